// Every VM of the cluster with its live state.

import { html, useState } from "../lib.js";
import { api } from "../api.js";
import { useEvents } from "../feed.js";
import { count, gib, mib, osName } from "../format.js";
import { ErrorNote, StateBadge, useLoad, useThrottled } from "../ui.js";
import { may } from "../identity.js";
import { TagChips } from "./shape.js";

// The events after which the list reads differently (progress records do not change it).
export const VM_CHANGES = [
  "vm.task_started",
  "vm.task_ended",
  "vm.installed",
  "vm.reconfigured",
  "vm.adopted",
  "vm.disowned",
  "vm.observed",
];

// The columns a user may sort by: [key, header, value of a row to compare].
const COLUMNS = [
  ["vmid", "ID", (vm) => vm.vmid],
  ["name", "Name", (vm) => vm.name.toLowerCase()],
  ["state", "State", (vm) => stateOf(vm)],
  ["node", "Node", (vm) => vm.node],
  ["ip", "IP address", (vm) => ipKey(vm.ip)],
  ["os", "OS", (vm) => osName(vm.os)],
  ["cpu", "vCPUs", (vm) => vm.cpu],
  ["memory", "Memory", (vm) => vm.memory],
  ["disk", "Disk", (vm) => vm.disk],
];
const NUMERIC = new Set(["cpu", "memory", "disk"]);

const stateOf = (vm) => vm.state || (vm.running ? "running" : "stopped");
// 10.0.0.9 before 10.0.0.10; no address last.
const ipKey = (ip) => (ip ? ip.split(".").map((n) => n.padStart(3, "0")).join(".") : "~");

// The rows a filter keeps, in the order asked: pure, so the page and its tests agree.
export function arrange(list, { text = "", state = "", node = "", os = "", sort = "vmid", desc = false } = {}) {
  const needle = text.trim().toLowerCase();
  const kept = list.filter((vm) =>
    (!needle || `${vm.vmid} ${vm.name} ${vm.ip || ""} ${(vm.tags || []).join(" ")}`.toLowerCase().includes(needle)) &&
    (!state || stateOf(vm) === state) && (!node || vm.node === node) && (!os || vm.os === os));
  const key = (COLUMNS.find(([k]) => k === sort) || COLUMNS[0])[2];
  const sorted = [...kept].sort((a, b) => {
    const x = key(a);
    const y = key(b);
    return (x < y ? -1 : x > y ? 1 : 0) || a.vmid - b.vmid;
  });
  return desc ? sorted.reverse() : sorted;
}

const distinct = (list, fn) => [...new Set(list.map(fn).filter(Boolean))].sort();

function Filters({ list, view, setView }) {
  const set = (key) => (e) => setView({ ...view, [key]: e.target.value });
  const choice = (key, label, values, name = (v) => v) => html`
    <label>${label}
      <select value=${view[key]} onChange=${set(key)}>
        <option value="">any</option>
        ${values.map((v) => html`<option value=${v}>${name(v)}</option>`)}
      </select></label>`;
  return html`
    <form class="filters" role="search" aria-label="Filter the VMs" onSubmit=${(e) => e.preventDefault()}>
      <label>Filter by name, ID or IP
        <input type="search" value=${view.text} onInput=${set("text")} autocomplete="off" /></label>
      ${choice("state", "State", distinct(list, stateOf))}
      ${choice("node", "Node", distinct(list, (vm) => vm.node))}
      ${choice("os", "OS", distinct(list, (vm) => vm.os), (v) => osName(v))}
    </form>`;
}

export function VmTable({ list, view = null, setView = null }) {
  if (list.length === 0) return html`<p class="muted">No VMs yet.</p>`;
  const sortable = view && setView;
  const rows = sortable ? arrange(list, view) : list;
  const header = ([key, label]) => {
    const cls = NUMERIC.has(key) ? "num" : "";
    if (!sortable) return html`<th scope="col" class=${cls}>${label}</th>`;
    const active = view.sort === key;
    const sort = active ? (view.desc ? "descending" : "ascending") : null;
    return html`<th scope="col" class=${cls} aria-sort=${sort}>
      <button type="button" class="sort" onClick=${() => setView({ ...view, sort: key, desc: active ? !view.desc : false })}>
        ${label}<span aria-hidden="true">${active ? (view.desc ? " ▼" : " ▲") : ""}</span></button></th>`;
  };
  return html`
    <div class="table" tabindex="0" role="region" aria-label="VMs"><table class=${`vms${sortable ? " sortable" : ""}`}>
      <thead><tr>${COLUMNS.map(header)}</tr></thead>
      <tbody>
        ${rows.map((vm) => html`
          <tr key=${vm.vmid} data-vmid=${vm.vmid}>
            <td class="id"><a href=${`#/vm/${vm.vmid}`}>${vm.vmid}</a></td>
            <td class="name"><a href=${`#/vm/${vm.vmid}`}>${vm.name}</a><${TagChips} tags=${vm.tags} os=${vm.os} />
              ${vm.created_by_cairn === false && stateOf(vm) !== "installing" ? html` <small class="muted" title="cairn did not create this VM and never destroys or migrates it">(not cairn's)</small>` : null}</td>
            <td class="state"><${StateBadge} state=${stateOf(vm)} /></td>
            <td data-label="Node">${vm.node}</td>
            <td class="nowrap" data-label="IP">${vm.ip ? html`<code>${vm.ip}</code>` : "—"}</td>
            <td data-label="OS">${osName(vm.os)}</td>
            <td class="num" data-label="vCPUs">${vm.cpu}</td>
            <td class="num" data-label="Memory">${mib(vm.memory)}</td>
            <td class="num" data-label="Disk">${gib(vm.disk)}</td>
          </tr>`)}
      </tbody>
    </table></div>
    ${sortable && rows.length === 0 ? html`<p class="muted" role="status">No VM matches the filter.</p>` : null}`;
}

// The templates installs clone, each with the VMs that are linked clones of it: a template
// stays while one of them lives, so the list shows why it is still there.
export function TemplateTable({ list }) {
  if (list.length === 0) return html`<p class="muted">No templates yet: the first install of an image builds one.</p>`;
  return html`
    <div class="table" tabindex="0" role="region" aria-label="Templates"><table class="templates">
      <thead><tr>
        <th scope="col">ID</th><th scope="col">Node</th><th scope="col">OS</th>
        <th scope="col">Image checksum</th><th scope="col">State</th><th scope="col">Linked clones</th>
      </tr></thead>
      <tbody>
        ${list.map((t) => html`
          <tr key=${t.vmid} data-template=${t.vmid}>
            <td class="id">${t.vmid}</td>
            <td data-label="Node">${t.node}</td>
            <td data-label="OS">${osName(t.os, t.version)}</td>
            <td data-label="Checksum"><code title=${t.checksum}>${t.checksum.slice(0, 19)}…</code></td>
            <td data-label="State">${t.state}${t.current ? ", installs clone it" : ""}</td>
            <td data-label="Linked clones">${t.clones.length === 0 ? "none" : t.clones.map((id, i) => html`${i ? ", " : ""}<a href=${`#/vm/${id}`}>${id}</a>`)}</td>
          </tr>`)}
      </tbody>
    </table></div>`;
}

function Templates() {
  const templates = useLoad(api.templates);
  const reload = useThrottled(() => templates.reload(), 1000);
  useEvents(() => reload(), ["vm.task_ended"]); // an install or a destroy changes the clones
  return html`
    <section aria-labelledby="templates-h">
      <h2 id="templates-h">Templates</h2>
      <${ErrorNote} error=${templates.error} />
      ${templates.data ? html`<${TemplateTable} list=${templates.data} />` : templates.error ? null : html`<p aria-busy="true">Loading…</p>`}
    </section>`;
}

export function VmList() {
  const vms = useLoad(api.vms);
  // However fast events come (a replay on opening, many tasks at once), at most one reload a
  // second; the last event is always followed by one.
  const reload = useThrottled(() => vms.reload(), 1000);
  useEvents(() => reload(), VM_CHANGES);
  const [view, setView] = useState({ text: "", state: "", node: "", os: "", sort: "vmid", desc: false });
  const list = vms.data?.list || [];
  const shown = vms.data ? arrange(list, view).length : 0;
  return html`
    <div class="title-row">
      <h1 tabindex="-1">VMs</h1>
      ${may("admin") ? html`<a role="button" href="#/vms/new">Install a VM</a>` : null}
    </div>
    <${ErrorNote} error=${vms.error} />
    ${vms.data ? html`
      <${Filters} list=${list} view=${view} setView=${setView} />
      <p class="muted" role="status">${`${shown === vms.data.count ? count(vms.data.count, "VM") : `${shown} of ${count(vms.data.count, "VM")}`} on the ${vms.data.simulated ? "simulated" : "Proxmox"} cluster`}</p>
      <${VmTable} list=${list} view=${view} setView=${setView} />` : vms.error ? null : html`<p aria-busy="true">Loading…</p>`}
    <${Templates} />`;
}
