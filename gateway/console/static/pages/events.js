// The live feed of every event of the platform, newest first, filterable, pausable.

import { html, useState } from "../lib.js";
import { recent, useEvents } from "../feed.js";
import { absolute, bytes } from "../format.js";
import { encodePath } from "../api.js";
import { TimeAgo } from "../ui.js";

const KEEP = 200;
const AGGREGATES = ["vm", "vmalloc", "functions", "search", "images"];

// One line that says what happened, from the event's own fields, and who asked for it when
// the event records that (`by`, the audit trail: a token's name or ip:<address>).
export function summary(event) {
  const by = event.data?.by;
  const what = happened(event);
  return by ? `${what} by ${by}` : what;
}

function happened(event) {
  const d = event.data || {};
  switch (event.type) {
    case "vm.progress": return `${d.step}: ${d.message}`;
    case "vm.task_started": return `${event.stream}: ${d.command} started`;
    case "vm.task_ended": return `${event.stream}: ${d.ok ? "done" : `failed: ${d.error}`} (now ${d.state})`;
    case "vm.installed": return `${event.stream}: ${d.name} (${d.os} ${d.version}) at ${d.ip}`;
    case "vm.observed": return `${event.stream} is ${d.state}`;
    case "functions.version_stored": return `${d.path} version of ${absolute(d.version)} (${d.language})`;
    case "functions.deleted": return `${d.path} deleted (${d.versions} versions)`;
    case "images.stored": return `${d.path} (${d.type}, ${bytes(d.size)})`;
    case "images.deleted": return `${d.path} deleted`;
    case "search.document_indexed": return `${d.db}: ${d.source} (${d.chunks} chunks)`;
    case "search.document_removed": return `${d.db}: ${d.source} removed`;
    case "search.document_dismissed": return `${d.db}: ${d.source}: ${d.reason}`;
    case "search.progress": return `${d.db}: ${d.state}, ${d.embedded} of ${d.chunks} chunks embedded`;
    default: return event.stream;
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
        <code class="type">${event.type}</code>
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
            ${AGGREGATES.map((a) => html`<option value=${a}>${a}.*</option>`)}
          </optgroup>
          <optgroup label="Types seen">
            ${types.map((t) => html`<option value=${t}>${t}</option>`)}
          </optgroup>
        </select></label>
      <button type="button" class="secondary" aria-pressed=${paused}
              onClick=${() => (paused ? resume() : setPaused(true))}>
        ${paused ? `Resume (${held.length} new)` : "Pause"}</button>
    </form>
    <p class="muted" role="status">${shown.length === events.length ? `${events.length} events` : `${shown.length} of ${events.length} events`}, newest first</p>
    <ol class="events feed" tabindex="0" aria-label="Events, newest first">
      ${shown.map((e) => html`<${EventRow} key=${e.position} event=${e} />`)}
    </ol>
    ${events.length === 0 ? html`<p class="muted">Waiting for events…</p>`
      : shown.length === 0 ? html`<p class="muted">No event matches the filter.</p>` : null}`;
}
