// Every VM of the cluster with its live state.

import { html } from "../lib.js";
import { api } from "../api.js";
import { useEvents } from "../feed.js";
import { gib, mib } from "../format.js";
import { ErrorNote, StateBadge, useLoad } from "../ui.js";
import { may } from "../identity.js";

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

export function VmTable({ list }) {
  if (list.length === 0) return html`<p class="muted">No VMs yet.</p>`;
  return html`
    <div class="table"><table class="vms">
      <thead><tr>
        <th scope="col">ID</th><th scope="col">Name</th><th scope="col">State</th>
        <th scope="col">Node</th><th scope="col">OS</th><th scope="col" class="num">vCPUs</th>
        <th scope="col" class="num">Memory</th><th scope="col" class="num">Disk</th>
      </tr></thead>
      <tbody>
        ${list.map((vm) => html`
          <tr key=${vm.vmid} data-vmid=${vm.vmid}>
            <td><a href=${`#/vm/${vm.vmid}`}>${vm.vmid}</a></td>
            <td><a href=${`#/vm/${vm.vmid}`}>${vm.name}</a>
              ${vm.created_by_cairn === false ? html` <small class="muted" title="cairn did not create this VM and never destroys or migrates it">(not cairn's)</small>` : null}</td>
            <td><${StateBadge} state=${vm.state || (vm.running ? "running" : "stopped")} /></td>
            <td>${vm.node}</td>
            <td>${vm.os}</td>
            <td class="num">${vm.cpu}</td>
            <td class="num">${mib(vm.memory)}</td>
            <td class="num">${gib(vm.disk)}</td>
          </tr>`)}
      </tbody>
    </table></div>`;
}

export function VmList() {
  const vms = useLoad(api.vms);
  useEvents(() => vms.reload(), VM_CHANGES);
  return html`
    <div class="title-row">
      <h1 tabindex="-1">VMs</h1>
      ${may("admin") ? html`<a role="button" href="#/vms/new">Install a VM</a>` : null}
    </div>
    <${ErrorNote} error=${vms.error} />
    ${vms.data ? html`
      <p class="muted">${vms.data.simulated ? "Simulated cluster" : "Proxmox cluster"} · ${vms.data.count} VMs</p>
      <${VmTable} list=${vms.data.list} />` : vms.error ? null : html`<p aria-busy="true">Loading…</p>`}`;
}
