// What runs where, whether it is healthy, the cluster's nodes, and the latest events.

import { html, useState } from "../lib.js";
import { api } from "../api.js";
import { recent, useEvents } from "../feed.js";
import { bytes, mib, count } from "../format.js";
import { ErrorNote, TimeAgo, useLoad, useThrottled } from "../ui.js";
import { summary, title } from "./events.js";
import { VM_CHANGES, VmTable } from "./vms.js";
import { may } from "../identity.js";

// An address that may break after its scheme, never inside the host or the port.
function Url({ href }) {
  const [scheme, rest] = String(href || "").split("://");
  return rest === undefined ? html`<code class="url">${href}</code>`
    : html`<code class="url">${scheme}://<wbr />${rest}</code>`;
}

// One line first: whether everything is up, and if not, what is wrong.
function Health({ status }) {
  const up = status.status === "up";
  const cluster = status.services.vm?.cluster;
  return html`
    <p class=${`health ${up ? "ok" : "error"}`} role="status">
      ${up ? "Every service is up" : status.problems.length ? status.problems.join("; ") : "Something is down"}
      <span class="muted">${` · message bus ${status.bus.connected ? "connected" : "disconnected"}`}${cluster ? ` · ${cluster} cluster` : ""}${status.quarantined && status.quarantined.length
        ? ` · ${count(status.quarantined.length, "quarantined stream")}` : ""}</span></p>`;
}

function Services({ status }) {
  return html`
    <section aria-labelledby="services-h">
      <h2 id="services-h">Services</h2>
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
                <td><${Url} href=${service.url} /></td>
              </tr>`;
          })}
        </tbody>
      </table></div>
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

// "8.4 of 64 GiB": the unit once when both share it.
function share(used, total) {
  const unit = (text) => text.split(" ")[1];
  return unit(used) && unit(used) === unit(total) ? `${used.split(" ")[0]} of ${total}` : `${used} of ${total}`;
}

// One card per node: its state and facts in a line, then CPU, memory and root storage side by
// side, so three nodes take a phone's first screen with room for the VMs below.
export function Nodes({ cluster }) {
  return html`
    <section aria-labelledby="nodes-h">
      <h2 id="nodes-h">Nodes</h2>
      <div class="cards nodes">
        ${cluster.map((node) => {
          const online = node.online ?? node.running;
          const load = node.load === null || node.load === undefined ? null : Math.round(node.load * 100);
          return html`
          <article class="node" data-node=${node.node}>
            <header><strong>${node.node}</strong>
              <span class=${`badge ${online ? "ok" : "bad"}`}>${online ? "online" : "offline"}</span>
              <span class="facts">${`Up: ${online ? uptime(node.uptime) : "—"}`}</span></header>
            <div class="meters">
              <label><span class="what">CPU</span> <span class="value">${load === null ? "—" : `${load}%`} of ${node.max_cpu}</span>
                <progress value=${load ?? 0} max="100"
                          aria-label=${`CPU load: ${load === null ? "—" : `${load}%`} of ${node.max_cpu} CPUs`}></progress></label>
              <label><span class="what">Memory</span> <span class="value">${share(mib(node.memory_used), mib(node.max_memory))}</span>
                <progress value=${node.memory_used} max=${node.max_memory}
                          aria-label=${`Memory in use: ${mib(node.memory_used)} of ${mib(node.max_memory)}`}></progress></label>
              <label><span class="what">Storage</span> <span class="value">${share(bytes(node.rootfs_used), bytes(node.rootfs_total))}</span>
                <progress value=${node.rootfs_used ?? 0} max=${node.rootfs_total || 1}
                          aria-label=${`Storage (root): ${bytes(node.rootfs_used)} of ${bytes(node.rootfs_total)}`}></progress></label>
            </div>
            <p class="facts"><span>${`VMs running: ${node.running_vms ?? 0}`}</span>
              <span>${`vCPUs assigned: ${node.cpu}`}</span></p>
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
      ${events.length === 0 ? html`<p class="muted">Waiting for events…</p>` : html`
      <ul class="latest">
        ${events.map((e) => html`
          <li key=${e.position}><strong>${title(e)}</strong>: ${summary(e)} · <${TimeAgo} when=${e.recorded_at} /></li>`)}
      </ul>`}
      <p><a href="#/events">All events</a></p>
    </section>`;
}

// The first screen: is everything up, what the nodes carry, which VMs run; then the services'
// addresses and the latest events.
export function Overview() {
  const status = useLoad(api.status);
  const vms = useLoad(api.vms);
  const reload = useThrottled(() => vms.reload(), 1000); // at most one a second (vms.js)
  useEvents(() => reload(), VM_CHANGES);
  const list = vms.data?.list || [];
  const running = list.filter((vm) => vm.running).length;
  return html`
    <h1 tabindex="-1">Overview</h1>
    <${ErrorNote} error=${status.error} />
    ${status.data ? html`<${Health} status=${status.data} />` : html`<p aria-busy="true">Loading…</p>`}
    <${ErrorNote} error=${vms.error} />
    ${vms.data ? html`<${Nodes} cluster=${vms.data.cluster} />` : null}
    <section aria-labelledby="vms-h">
      <div class="title-row">
        <h2 id="vms-h">VMs</h2>
        <p class="links">${count(list.length, "VM")}, ${running} running · <a href="#/vms">All VMs</a>${may("admin")
          ? html` · <a href="#/vms/new">Install a VM</a>` : null}</p>
      </div>
      ${vms.data ? html`<${VmTable} list=${list} />` : null}
    </section>
    <div class="grid-2">
      <div>${status.data ? html`<${Services} status=${status.data} />` : null}</div>
      <div><${Latest} /></div>
    </div>`;
}
