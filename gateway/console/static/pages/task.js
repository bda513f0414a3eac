// A task's records (the VM service's SSE records) as a list of its stages, each with its state
// and latest message, plus the full log. Known stages are listed from the start, so the list
// does not move as records arrive.

import { html, useEffect, useRef } from "../lib.js";

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
    return { step, status, message: record ? record.message : "" };
  });
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
  return html`<pre class="log" ref=${box} onScroll=${onScroll} tabindex="0" aria-label="Log">${records
    .map((r) => `${r.step}: ${r.message}`)
    .join("\n")}</pre>`;
}

function current(records) {
  const last = records[records.length - 1];
  return last ? `${last.step}: ${last.status}` : "";
}

// `done`: what to say once the task succeeded (a link to the new VM …). The line that says it,
// or the failure, is there from the start, so the stages below it never move.
export function TaskStages({ stages = [], records, running, done = null }) {
  const rows = stageRows(stages, records, running);
  const finished = rows.filter((r) => r.status === "success" || r.status === "skipped").length;
  const failed = rows.find((r) => r.status === "error");
  return html`
    <section class="task" aria-labelledby="task-h">
      <h2 id="task-h">Progress</h2>
      <progress value=${finished} max=${rows.length || 1} aria-label="Stages done"></progress>
      <p class=${`task-note ${failed ? "error" : "ok"}`} role=${failed ? "alert" : "status"}>
        ${failed ? `${failed.step}: ${failed.message}` : done}</p>
      <p class="visually-hidden" role="status">${current(records)}</p>
      <ol class="stages">
        ${rows.map((row) => html`
          <li key=${row.step} class=${row.status} data-step=${row.step} data-status=${row.status}>
            <span class="mark" aria-hidden="true">${MARK[row.status] || "•"}</span>
            <span class="step">${row.step.replace(" > ", " › ")}</span>
            <span class="visually-hidden">: ${row.status}</span>
            <span class="message" title=${row.message}>${row.message}</span>
          </li>`)}
      </ol>
      <details>
        <summary>Log (${records.length} records)</summary>
        <${Log} records=${records} />
      </details>
    </section>`;
}
