// The live feed of every event of the platform, newest first, filterable, pausable.

import { html, useState } from "../lib.js";
import { recent, useEvents } from "../feed.js";
import { absolute, bytes, count, gib, mib, osName, parseMessage } from "../format.js";
import { encodePath } from "../api.js";
import { TimeAgo } from "../ui.js";

const KEEP = 200;
const AGGREGATES = [
  ["vm", "VMs"], ["vmalloc", "VM IDs and addresses"], ["functions", "Functions"],
  ["search", "Search"], ["images", "Images"],
];

// What kind of thing happened, in words (the type as recorded is in the event's data).
const TITLES = {
  "vm.progress": "Task step",
  "vm.task_started": "Task started",
  "vm.task_ended": "Task ended",
  "vm.install_planned": "Install planned",
  "vm.installed": "VM installed",
  "vm.observed": "VM state seen",
  "vm.adopted": "VM found",
  "vm.disowned": "VM let go",
  "vm.reconfigured": "VM changed",
  "vmalloc.reserved": "ID and address reserved",
  "vmalloc.released": "ID and address freed",
  "vmalloc.refused": "No ID or address free",
  "functions.version_stored": "Function stored",
  "functions.deleted": "Function deleted",
  "images.stored": "Image stored",
  "images.deleted": "Image deleted",
  "search.document_indexed": "Document indexed",
  "search.document_removed": "Document removed",
  "search.document_dismissed": "Document skipped",
  "search.progress": "Indexing progress",
  "search.database_reconciled": "Database checked",
};

export function typeTitle(type) {
  if (TITLES[type]) return TITLES[type];
  const words = type.replace(/[._]/g, " ");
  return words[0].toUpperCase() + words.slice(1);
}
export const title = (event) => typeTitle(event.type);

// One line that says what happened, from the event's own fields, and who asked for it when
// the event records it (`by`, the audit trail: a token's name or ip:<address>).
export function summary(event) {
  const by = event.data?.by;
  const what = happened(event);
  return by ? `${what} by ${by}` : what;
}

// "vm:101" is VM 101; a stream of no known kind as it is.
function streamName(stream) {
  const [kind, ...rest] = (stream || "").split(":");
  return kind === "vm" && rest.length ? `VM ${rest.join(":")}` : stream || "";
}

function happened(event) {
  const d = event.data || {};
  const vm = streamName(event.stream);
  switch (event.type) {
    case "vm.progress": {
      const { text } = parseMessage(d.message);
      return `${vm}: ${(d.step || "").replace(" > ", " › ")}: ${text}`;
    }
    case "vm.task_started": return `${vm}: ${d.command} started`;
    case "vm.task_ended": return `${vm}: ${d.command ? `${d.command} ` : ""}${d.ok ? "done" : `failed: ${d.error}`} (now ${d.state})`;
    case "vm.install_planned": return `${vm}: ${d.name} (${osName(d.os, d.version)}) on ${d.node} at ${d.ip}`;
    case "vm.installed": return `${vm}: ${d.name} (${osName(d.os, d.version)}) at ${d.ip}`;
    case "vm.observed": return `${vm} is ${d.state}`;
    case "vm.adopted": return `${vm}: ${d.name} on ${d.node}, made by someone else`;
    case "vm.disowned": return `${vm}: ${d.reason}`;
    case "vm.reconfigured": {
      const sizes = [
        d.cpu ? count(d.cpu, "vCPU") : null,
        d.ram ? mib(d.ram) : null,
        d.disk_gb ? `${gib(d.disk_gb)} disk` : null,
        d.node ? `on ${d.node}` : null,
      ].filter(Boolean);
      return `${vm}: ${sizes.join(", ") || "changed"}`;
    }
    case "vmalloc.reserved": return `VM ${d.vmid} and ${d.ip} kept for an install`;
    case "vmalloc.released": return `VM ${d.vmid}'s ID and address free again${d.reason ? ` (${d.reason})` : ""}`;
    case "vmalloc.refused": return d.reason || "an install found no free ID or address";
    case "functions.version_stored": return `${d.path} version of ${absolute(d.version)} (${d.language})`;
    case "functions.deleted": return `${d.path} deleted (${count(d.versions, "version")})`;
    case "images.stored": return `${d.path} (${d.type}, ${bytes(d.size)})`;
    case "images.deleted": return `${d.path} deleted`;
    case "search.document_indexed": return `${d.db}: ${d.source} (${count(d.chunks, "chunk")})`;
    case "search.document_removed": return `${d.db}: ${d.source} removed`;
    case "search.document_dismissed": return `${d.db}: ${d.source}: ${d.reason}`;
    case "search.progress": return `${d.db}: ${d.state}, ${d.embedded} of ${count(d.chunks, "chunk")} embedded`;
    case "search.database_reconciled": return `${d.db}: ${count(d.queued, "file")} to index`;
    default: return vm;
  }
}

// Where an event leads: the VM, function, image folder or search it concerns (null: nowhere).
export function subjectOf(event) {
  const d = event.data || {};
  const [kind, ...rest] = (event.stream || "").split(":");
  const id = rest.join(":");
  switch (event.type.split(".")[0]) {
    case "vm":
      return kind === "vm" && id ? { href: `#/vm/${encodeURIComponent(id)}`, label: `VM ${id}` } : null;
    case "vmalloc":
      return d.vmid ? { href: `#/vm/${encodeURIComponent(d.vmid)}`, label: `VM ${d.vmid}` } : null;
    case "functions":
      return d.path && event.type !== "functions.deleted"
        ? { href: `#/function/${encodePath(d.path)}`, label: d.path } : null;
    case "images": {
      if (!d.path) return null;
      const folder = d.path.split("/").slice(0, -1).join("/");
      return { href: `#/images/${encodePath(folder)}`, label: folder ? `${folder}/` : "images /" };
    }
    case "search":
      return d.db ? { href: "#/search", label: `database ${d.db}` } : null;
    default:
      return null;
  }
}

// Whether an event matches the filters: `kind` an aggregate ("vm") or a type ("vm.installed"),
// `text` words that must all appear in its type, stream, summary or data.
export function matches(event, { kind = "", text = "" }) {
  if (kind && event.type !== kind && !event.type.startsWith(`${kind}.`)) return false;
  const words = text.toLowerCase().split(/\s+/).filter(Boolean);
  if (!words.length) return true;
  const hay = `${event.type} ${event.stream} ${summary(event)} ${JSON.stringify(event.data || {})}`.toLowerCase();
  return words.every((w) => hay.includes(w));
}

function EventRow({ event }) {
  const subject = subjectOf(event);
  const full = { type: event.type, stream: event.stream, position: event.position,
    version: event.version, recorded_at: event.recorded_at, data: event.data };
  return html`
    <li class="event" data-type=${event.type} data-position=${event.position}>
      <div class="head">
        <${TimeAgo} when=${event.recorded_at} />
        <strong class="what" title=${event.type}>${title(event)}</strong>
        ${subject ? html`<a class="subject" href=${subject.href}>${subject.label}</a>` : null}
      </div>
      <details>
        <summary>${summary(event)}</summary>
        <pre class="data">${JSON.stringify(full, null, 2)}</pre>
      </details>
    </li>`;
}

export function EventsPage() {
  const [events, setEvents] = useState(recent);
  const [held, setHeld] = useState([]);
  const [paused, setPaused] = useState(false);
  const [kind, setKind] = useState("");
  const [text, setText] = useState("");
  useEvents((event) => {
    if (paused) setHeld((h) => [event, ...h].slice(0, KEEP));
    else setEvents((list) => [event, ...list].slice(0, KEEP));
  }, null, [paused]);
  const resume = () => {
    setEvents((list) => [...held, ...list].slice(0, KEEP));
    setHeld([]);
    setPaused(false);
  };
  const types = [...new Set(events.map((e) => e.type))].sort();
  const shown = events.filter((e) => matches(e, { kind, text }));
  return html`
    <h1 tabindex="-1">Events</h1>
    <form class="filters events" role="search" aria-label="Filter the events" onSubmit=${(e) => e.preventDefault()}>
      <label>Filter by text
        <input type="search" value=${text} onInput=${(e) => setText(e.target.value)} autocomplete="off"
               placeholder="a VM id, a path, a word…" /></label>
      <label>Type
        <select value=${kind} onChange=${(e) => setKind(e.target.value)}>
          <option value="">every type</option>
          <optgroup label="Kinds">
            ${AGGREGATES.map(([a, label]) => html`<option value=${a}>${label}</option>`)}
          </optgroup>
          <optgroup label="Types seen">
            ${types.map((t) => html`<option value=${t}>${typeTitle(t)}</option>`)}
          </optgroup>
        </select></label>
      <button type="button" class="secondary" aria-pressed=${paused}
              onClick=${() => (paused ? resume() : setPaused(true))}>
        ${paused ? `Resume (${held.length} new)` : "Pause"}</button>
    </form>
    <p class="muted" role="status">${shown.length === events.length ? count(events.length, "event") : `${shown.length} of ${count(events.length, "event")}`}, newest first</p>
    <ol class="events feed" tabindex="0" aria-label="Events, newest first">
      ${shown.map((e) => html`<${EventRow} key=${e.position} event=${e} />`)}
    </ol>
    ${events.length === 0 ? html`<p class="muted">Waiting for events…</p>`
      : shown.length === 0 ? html`<p class="muted">No event matches the filter.</p>` : null}`;
}
