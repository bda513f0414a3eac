// What runs where, whether it is healthy, the cluster's nodes, and the latest events.

import { html, useState } from "../lib.js";
import { api } from "../api.js";
import { recent, useEvents } from "../feed.js";
import { bytes, mib, count } from "../format.js";
import { ErrorNote, TimeAgo, useLoad, useThrottled } from "../ui.js";
import { summary } from "./events.js";
import { VM_CHANGES } from "./vms.js";

function Services({ status }) {
  const up = status.status === "up";
  const cluster = status.services.vm?.cluster;
  return html`
    <section aria-labelledby="services-h">
      <h2 id="services-h">Services</h2>
      <p class=${up ? "ok" : "error"} role="status">
        ${up ? "Every service is up." : status.problems.length ? status.problems.join("; ") : "Something is down."}
      </p>
      <div class="table" tabindex="0" role="region" aria-label="Services"><table>
        <thead><tr><th scope="col">Service</th><th scope="col">State</th><th scope="col">Address</th></tr></thead>
        <tbody>
          ${Object.entries(status.services).map(([name, service]) => {
            const notes = [...(service.problems || []), ...(service.warnings || [])];
            return html`
              <tr data-service=${name}>
                <td>${name}</td>
                <td><span class=${`badge ${service.status === "up" ? "ok" : "bad"}`}>${service.status}</span>
                  ${notes.length ? html`<br /><small class="error">${notes.join("; ")}</small>` : null}</td>
                <td><code>${service.url}</code></td>
              </tr>`;
          })}
        </tbody>
      </table></div>
      <p class="muted">
        Message bus ${status.bus.connected ? "connected" : "disconnected"}
        ${cluster ? ` · ${cluster} cluster` : ""}
        ${status.quarantined && status.quarantined.length
          ? ` · ${count(status.quarantined.length, "quarantined stream")}` : ""}
      </p>
    </section>`;
}

// "3 d 4 h", "2 h 5 min", "12 min": how long a node has been up.
export function uptime(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const d = Math.floor(seconds / 86400);
  const h = Math.floor((seconds % 86400) / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  if (d) return `${d} d ${h} h`;
  if (h) return `${h} h ${m} min`;
  return `${m} min`;
}

export function Nodes({ cluster }) {
  return html`
    <section aria-labelledby="nodes-h">
      <h2 id="nodes-h">Nodes</h2>
      <div class="cards">
        ${cluster.map((node) => {
          const online = node.online ?? node.running;
          const load = node.load === null || node.load === undefined ? null : Math.round(node.load * 100);
          return html`
          <article class="node" data-node=${node.node}>
            <header><strong>${node.node}</strong>
              <span class=${`badge ${online ? "ok" : "bad"}`}>${online ? "online" : "offline"}</span></header>
            <label>${`CPU load: ${load === null ? "—" : `${load}%`} of ${node.max_cpu} CPUs`}
              <progress value=${load ?? 0} max="100"></progress></label>
            <label>${`Memory in use: ${mib(node.memory_used)} of ${mib(node.max_memory)}`}
              <progress value=${node.memory_used} max=${node.max_memory}></progress></label>
            <label>${`Storage (root): ${bytes(node.rootfs_used)} of ${bytes(node.rootfs_total)}`}
              <progress value=${node.rootfs_used ?? 0} max=${node.rootfs_total || 1}></progress></label>
            <p class="facts"><span>${`vCPUs assigned: ${node.cpu}`}</span>
              <span>${`VMs running: ${node.running_vms ?? 0}`}</span>
              <span>${`Up: ${online ? uptime(node.uptime) : "—"}`}</span></p>
          </article>`;
        })}
      </div>
    </section>`;
}

function Latest() {
  const [events, setEvents] = useState(() => recent().slice(0, 5));
  useEvents((event) => setEvents((list) => [event, ...list].slice(0, 5)));
  return html`
    <section aria-labelledby="latest-h">
      <h2 id="latest-h">Latest events</h2>
      <ol class="latest">
        ${events.length === 0 ? html`<li class="muted">Waiting for events…</li>` : null}
        ${events.map((e) => html`
          <li key=${e.position}><code>${e.type}</code> ${summary(e)} · <${TimeAgo} when=${e.recorded_at} /></li>`)}
      </ol>
      <p><a href="#/events">All events</a></p>
    </section>`;
}

export function Overview() {
  const status = useLoad(api.status);
  const vms = useLoad(api.vms);
  const reload = useThrottled(() => vms.reload(), 1000); // at most one a second (vms.js)
  useEvents(() => reload(), VM_CHANGES);
  const list = vms.data?.list || [];
  const running = list.filter((vm) => vm.running).length;
  return html`
    <h1 tabindex="-1">Overview</h1>
    <div class="grid-2">
      <div>
        <${ErrorNote} error=${status.error} />
        ${status.data ? html`<${Services} status=${status.data} />` : html`<p aria-busy="true">Loading…</p>`}
      </div>
      <div>
        <section aria-labelledby="vms-h">
          <h2 id="vms-h">VMs</h2>
          <${ErrorNote} error=${vms.error} />
          <p>${count(list.length, "VM")}, ${running} running. <a href="#/vms">All VMs</a> · <a href="#/vms/new">Install a VM</a></p>
        </section>
        <${Latest} />
      </div>
    </div>
    ${vms.data ? html`<${Nodes} cluster=${vms.data.cluster} />` : null}`;
}
