// What the caller shaped of a guest (docs/vm.md, "Shaping the guest"): the install form's
// "Advanced" part, and how the list and a VM's page show tags, notes, the NIC, DNS and disks.

import { html } from "../lib.js";

// A VM's tags but its OS's (the list shows the OS in its own column).
export function TagChips({ tags, os }) {
  const shown = (tags || []).filter((t) => t !== os);
  if (!shown.length) return null;
  return html` <span class="tags">${shown.map((t) => html`<small class="tag">${t}</small> `)}</span>`;
}

const nic = (n) => [n.bridge || "—", n.vlan ? `VLAN ${n.vlan}` : null, n.mtu ? `MTU ${n.mtu}` : null]
  .filter(Boolean).join(", ");

// Rows of a VM's details: [name, value], from the page's `guest` (null: not known).
export function guestRows(guest) {
  if (!guest) return [];
  const dns = [guest.nameserver, guest.searchdomain ? `search ${guest.searchdomain}` : null].filter(Boolean);
  return [
    ["Tags", guest.tags.length ? guest.tags.join(", ") : "—"],
    ["Network", nic(guest.network)],
    ["DNS", dns.length ? dns.join("; ") : "cloud-init's default"],
    ["Disks", guest.disks.map((d) => `${d.slot}: ${d.size || "?"}`).join(", ") || "—"],
    ["Notes", guest.notes ? html`<span class="notes">${guest.notes}</span>` : "—"],
  ];
}

const words = (value) => String(value || "").split(/[\s,]+/).filter(Boolean);

// The install body's shaping fields from the form (the service checks every value).
export function advancedBody(form) {
  const body = {};
  const text = (key) => String(form.get(key) || "").trim();
  for (const key of ["bridge", "nameserver", "searchdomain", "description"]) {
    const value = key === "description" ? String(form.get(key) || "").trim() : words(form.get(key)).join(" ");
    if (value) body[key] = value;
  }
  for (const key of ["vlan", "mtu"]) if (text(key)) body[key] = Number(text(key));
  const packages = words(form.get("packages"));
  if (packages.length) body.packages = packages;
  const tags = words(form.get("tags"));
  if (tags.length) body.tags = tags;
  // "32G@local-lvm" or "8" (GiB, on the install's storage).
  const disks = words(form.get("disks")).map((spec) => {
    const [amount, storage] = spec.split("@");
    const size = `${amount.replace(/g$/i, "")}G`;
    return storage ? { size, storage } : { size };
  });
  if (disks.length) body.disks = disks;
  const script = String(form.get("script") || "");
  if (script.trim()) {
    body.script = script;
    if (form.get("script_keep")) body.script_failure = "keep";
  }
  return body;
}

export function AdvancedFields() {
  return html`
    <details class="advanced">
      <summary>Advanced: network, disks, packages, a first-boot script, tags and notes</summary>
      <div class="grid-form">
        <label>Bridge <input name="bridge" placeholder="VM_BRIDGE" autocomplete="off" /></label>
        <label>VLAN tag <input name="vlan" type="number" min="1" max="4094" /></label>
        <label>MTU <input name="mtu" type="number" min="576" max="65520" /></label>
        <label>DNS servers <input name="nameserver" placeholder="10.0.0.53 10.0.0.54" autocomplete="off" /></label>
        <label>DNS search domains <input name="searchdomain" placeholder="example.org" autocomplete="off" /></label>
        <label>Extra disks <input name="disks" placeholder="32G@local-lvm 8G" autocomplete="off"
          aria-describedby="disks-help" />
          <small id="disks-help">Sizes in GiB, each on a storage (default: the install's).</small></label>
        <label>Packages <input name="packages" placeholder="nginx curl" autocomplete="off" /></label>
        <label>Tags <input name="tags" placeholder="web prod" autocomplete="off" /></label>
      </div>
      <label>Notes <textarea name="description" rows="2" placeholder="shown as the VM's notes in Proxmox"></textarea></label>
      <label>First-boot script (run as root after cairn's init script; its output shows below)
        <textarea name="script" rows="4" spellcheck="false" placeholder="#!/bin/sh&#10;echo hello"></textarea></label>
      <label><input type="checkbox" name="script_keep" /> Keep the VM if the script fails</label>
    </details>`;
}
