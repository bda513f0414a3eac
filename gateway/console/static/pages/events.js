// The live feed of every event of the platform, newest first, filterable, pausable.

import { html, useState } from "../lib.js";
import { recent, useEvents } from "../feed.js";
import { bytes } from "../format.js";
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
    case "functions.version_stored": return `${d.path} version ${d.version} (${d.language})`;
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

export function EventsPage() {
  const [events, setEvents] = useState(recent);
  const [held, setHeld] = useState([]);
  const [paused, setPaused] = useState(false);
  const [aggregate, setAggregate] = useState("");
  useEvents((event) => {
    if (paused) setHeld((h) => [event, ...h].slice(0, KEEP));
    else setEvents((list) => [event, ...list].slice(0, KEEP));
  }, null, [paused]);
  const resume = () => {
    setEvents((list) => [...held, ...list].slice(0, KEEP));
    setHeld([]);
    setPaused(false);
  };
  const shown = aggregate ? events.filter((e) => e.type.split(".")[0] === aggregate) : events;
  return html`
    <h1 tabindex="-1">Events</h1>
    <div class="row toolbar">
      <label class="inline">Show
        <select value=${aggregate} onChange=${(e) => setAggregate(e.target.value)}>
          <option value="">every kind</option>
          ${AGGREGATES.map((a) => html`<option value=${a}>${a}</option>`)}
        </select></label>
      <button type="button" class="secondary" aria-pressed=${paused}
              onClick=${() => (paused ? resume() : setPaused(true))}>
        ${paused ? `Resume (${held.length} new)` : "Pause"}</button>
    </div>
    <div class="table feed" tabindex="0" aria-label="Events, newest first">
      <table>
        <thead><tr><th scope="col">When</th><th scope="col">Type</th><th scope="col">What</th></tr></thead>
        <tbody>${shown.map((e) => html`
          <tr key=${e.position} data-type=${e.type}>
            <td class="nowrap"><${TimeAgo} when=${e.recorded_at} /></td>
            <td><code>${e.type}</code></td>
            <td class="what">${summary(e)}</td>
          </tr>`)}
        </tbody>
      </table>
      ${shown.length === 0 ? html`<p class="muted">Waiting for events…</p>` : null}
    </div>`;
}
