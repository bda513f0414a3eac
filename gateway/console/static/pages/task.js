// A task's records (the VM service's SSE records) as a list of its stages, each with its state
// and latest message, plus the full log. Known stages are listed from the start, so the list
// does not move as records arrive.

import { html, useEffect, useRef } from "../lib.js";
import { count, parseMessage } from "../format.js";

const MARK = { pending: "○", processing: "◔", success: "✓", error: "✗", skipped: "–" };

export function stageRows(stages, records, running) {
  const latest = new Map();
  for (const record of records) latest.set(record.step, record);
  const order = [...stages];
  for (const record of records) if (!order.includes(record.step)) order.push(record.step);
  const failed = records.some((r) => r.status === "error");
  return order.map((step) => {
    const record = latest.get(step);
    const status = record ? record.status : running && !failed ? "pending" : "skipped";
    return { step, status, message: record ? tidy(shownMessage(step, records, record)) : "" };
  });
}

// A message as shown: the stream's summary line carries its time twice (every message ends
// with its elapsed time: "completed in 7.00s (7.00s)"), shown once.
export const tidy = (message) => (message || "").replace(/ (\d+(?:\.\d+)?s) \(\1\)$/, " $1");

// A stage that ends with several lines (the install's summary: "[+] … completed in 7.00s",
// then the VMID, IP and user) is shown by its summary line, not by whichever came last.
function shownMessage(step, records, last) {
  if (last.status !== "success") return last.message;
  const summary = records.findLast((r) => r.step === step && r.status === "success" && r.message.startsWith("[+]"));
  return summary ? summary.message : last.message;
}

// The bar counts the stages that ran: while the task runs, done of all it may run; once it
// succeeded, done of those that ran (a stage it had no need of is not "done"); once it failed,
// what was done before the failure, and the bar says it failed.
export function barOf(rows, running) {
  const done = rows.filter((r) => r.status === "success").length;
  const failed = rows.some((r) => r.status === "error");
  const ran = rows.filter((r) => r.status !== "skipped").length;
  if (failed) return { value: done, max: rows.length || 1, outcome: "failed" };
  if (running) return { value: done, max: rows.length || 1, outcome: "running" };
  return { value: done, max: ran || 1, outcome: rows.length ? "done" : "running" };
}

// What the records of an install tell of the VM it builds (its sizes, once validated), for a
// VM page opened while the install runs.
export function requestedSizes(records) {
  const sizes = {};
  for (const { message } of records) {
    const cpuRam = /CPU (\d+) and RAM (\d+) MB validated/.exec(message || "");
    if (cpuRam) {
      sizes.cpu = Number(cpuRam[1]);
      sizes.memory = Number(cpuRam[2]);
    }
    const disk = /disk size (\d+)G validated/.exec(message || "");
    if (disk) sizes.disk = Number(disk[1]);
  }
  return sizes;
}

// A message in its parts: a mark for done, under way or failed (the stream's "[+]", "[*]",
// "[-]"), the words, and the elapsed time apart and muted.
const KIND_MARK = { ok: "✓", info: "›", bad: "✗" };
const KIND_WORD = { ok: "done", info: "", bad: "failed" };
// `mark`: false where the line has its own (a stage's row).
export function Message({ message, mark = true }) {
  const { kind, text, seconds } = parseMessage(message);
  return html`<span class="msg" data-kind=${kind}>${kind && mark ? html`<span class="kind" aria-hidden="true">${KIND_MARK[kind]}</span>` : null}${
    kind && mark && KIND_WORD[kind] ? html`<span class="visually-hidden">${KIND_WORD[kind]}: </span>` : null}<span class="text">${text}</span>${
    seconds === null ? null : html` <span class="elapsed" title="time since the task began">${seconds} s</span>`}</span>`;
}

export function Log({ records }) {
  const box = useRef(null);
  const stick = useRef(true);
  useEffect(() => {
    const el = box.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  }, [records.length]);
  const onScroll = () => {
    const el = box.current;
    stick.current = el.scrollTop + el.clientHeight >= el.scrollHeight - 4;
  };
  return html`<div class="log records" ref=${box} onScroll=${onScroll} tabindex="0" role="log" aria-label="Log"><ol>${records
    .map((r, i) => html`<li key=${i} data-status=${r.status}><span class="step">${r.step.replace(" > ", " › ")}</span> <${Message} message=${r.message} /></li>`)}</ol></div>`;
}

function current(records) {
  const last = records[records.length - 1];
  return last ? `${last.step}: ${last.status}` : "";
}

// `done`: what to say once the task succeeded (a link to the new VM …). The line that says it,
// or the failure, is there from the start, so the stages below it never move.
// `follow`: the task was started here: the page moves to it when it appears (the user sees
// its progress where they are looking, at any window size) and the keyboard focus with it.
export function TaskStages({ stages = [], records, running, done = null, follow = false }) {
  const rows = stageRows(stages, records, running);
  const bar = barOf(rows, running);
  const failed = rows.find((r) => r.status === "error");
  const section = useRef(null);
  useEffect(() => {
    if (!follow) return;
    section.current?.scrollIntoView({ block: "start" });
    section.current?.querySelector("h2")?.focus({ preventScroll: true });
  }, []);
  const label = `Stages done: ${bar.value} of ${bar.max}${bar.outcome === "failed" ? ", failed" : ""}`;
  return html`
    <section class="task" aria-labelledby="task-h" ref=${section}>
      <h2 id="task-h" tabindex="-1">Progress</h2>
      <progress class=${bar.outcome} data-outcome=${bar.outcome} value=${bar.value} max=${bar.max}
                aria-label=${label}></progress>
      <p class=${`task-note ${failed ? "error" : "ok"}`} role=${failed ? "alert" : "status"}>
        ${failed ? `${failed.step}: ${parseMessage(failed.message).text}` : done}</p>
      <p class="visually-hidden" role="status">${current(records)}</p>
      <ol class="stages">
        ${rows.map((row) => html`
          <li key=${row.step} class=${row.status} data-step=${row.step} data-status=${row.status}>
            <span class="mark" aria-hidden="true">${MARK[row.status] || "•"}</span>
            <span class="step">${row.step.replace(" > ", " › ")}</span>
            <span class="visually-hidden">: ${row.status}</span>
            <span class="message" title=${parseMessage(row.message).text}><${Message} message=${row.message} mark=${false} /></span>
          </li>`)}
      </ol>
      <details>
        <summary>Log (${count(records.length, "record")})</summary>
        <${Log} records=${records} />
      </details>
    </section>`;
}
