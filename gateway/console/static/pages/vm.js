// One VM: its details and live state, its actions (with a confirmation), and its task as it runs.

import { html, useEffect, useRef, useState } from "../lib.js";
import { api } from "../api.js";
import { useEvents } from "../feed.js";
import { gib, mib, osName } from "../format.js";
import { Confirm, ErrorNote, StateBadge, TimeAgo, useLoad, useThrottled } from "../ui.js";
import { may } from "../identity.js";
import { requestedSizes, TaskStages } from "./task.js";
import { SerialConsole, useSerialAvailable } from "./serial.js";
import { ChangeForm } from "./change.js";
import { guestRows } from "./shape.js";

// `role`: the least role that may (gateway/http/roles.py); what the signed-in role may not do is
// not shown.
const ACTIONS = {
  start: { label: "Start", streamed: true, when: "stopped", role: "operator" },
  shutdown: {
    label: "Shut down", when: "running", role: "operator",
    confirm: "The guest is asked to power off (ACPI), as a power button press would.",
  },
  reboot: {
    label: "Reboot", streamed: true, when: "running", role: "operator",
    confirm: "The guest restarts; its SSH comes back when it is up again.",
  },
  stop: {
    label: "Stop", when: "running", role: "operator",
    confirm: "The VM is powered off at once, like pulling the plug: unsaved data in the guest is lost.",
  },
  destroy: {
    label: "Destroy", when: "stopped", danger: true, role: "admin",
    confirm: "The VM and its disk are deleted. This cannot be undone.",
  },
};

// Why an action's button is disabled, in words (a tooltip on a disabled button is not shown by
// every browser, nor read): shown for the dangerous ones, and read with every disabled button.
export function whyNot(spec, state, streaming) {
  if (streaming) return `${spec.label}: wait until the task below ends.`;
  if (state === spec.when) return null;
  const settled = state === "running" || state === "stopped";
  const fix = !settled ? "wait until its task ends" : spec.when === "stopped" ? "stop it first" : "start it first";
  return `${spec.label} needs a ${spec.when} VM; this one is ${state || "not known yet"}: ${fix}.`;
}

function taskOutcome(task) {
  if (task.ok === null || task.ok === undefined) return "running";
  return task.ok ? "done" : "failed";
}

// A size during an install: what the install validated (the cluster's figure is the image's
// until the disk is grown, or 0 before the VM exists), marked as such; else the cluster's word,
// or that it is not known yet; never a made-up 0.
function size(value, installing, requested, format) {
  if (!installing) return format(value);
  if (requested) return `${format(requested)} (requested)`;
  return value ? format(value) : "not known yet";
}

function Details({ vm, records }) {
  const installing = vm.state === "installing";
  const asked = installing ? requestedSizes(records) : {};
  const rows = [
    ["State", html`<${StateBadge} state=${vm.state} />`],
    ["Node", vm.node],
    ["Operating system", osName(vm.os, vm.version)],
    ["IP address", vm.ip ? html`<code>${vm.ip}</code>` : "—"],
    ["User", vm.user || "—"],
    ["vCPUs", size(vm.cpu, installing, asked.cpu, String)],
    ["Memory", vm.memory_used ? `${mib(vm.memory_used)} used of ${mib(vm.memory)}` : size(vm.memory, installing, asked.memory, mib)],
    ["Disk", size(vm.disk, installing, asked.disk, gib)],
    ["Created", vm.created_at ? html`<${TimeAgo} when=${vm.created_at} />` : installing ? "now (install under way)" : "—"],
    ["Created by cairn", installing ? "being created by cairn"
      : vm.created_by_cairn ? "yes" : "no: cairn never destroys or migrates it"],
    ...(vm.created_by ? [["Installed at the request of", vm.created_by]] : []),
    ...guestRows(vm.guest),
  ];
  return html`
    <dl class="details">
      ${rows.map(([name, value]) => html`<div><dt>${name}</dt><dd>${value}</dd></div>`)}
    </dl>`;
}

// What a resize changes, old → new, in the units the details show: "vCPUs: 2 → 4",
// "Memory: 2 GiB → 4 GiB", "Disk: 16 GiB → 24 GiB" (the disk grows by what was typed). An
// extra disk (`drive`, from the VM's config) is named with the size Proxmox gives it.
export function resizeTitle(what, current, typed, drive = null) {
  const n = Number(typed);
  if (what === "cpu") return `vCPUs: ${current} → ${n}`;
  if (what === "memory") return `Memory: ${mib(current)} → ${mib(n)}`;
  if (drive && drive.slot !== "scsi0") return `Disk ${drive.slot}: ${drive.size ?? "?"} + ${gib(n)}`;
  return `Disk: ${gib(current)} → ${gib(current + n)} (${gib(n)} more)`;
}

function SetForm({ id, what, label, unit, min, max, value, current, disabled, onDone, confirm, drives = [] }) {
  const [error, setError] = useState(null);
  const [note, setNote] = useState(null);
  // What the user typed, kept over the reloads events bring (the VM's figure would replace it).
  const [typed, setTyped] = useState(null);
  const submit = (e) => {
    e.preventDefault();
    const form = new FormData(e.target);
    const raw = form.get(what);
    // Which disk grows: the boot disk unless another is chosen (set/disk's `drive`).
    const drive = drives.find((d) => d.slot === form.get("drive")) ?? null;
    const body = what === "disk" ? { disk: `${raw}G` } : { [what]: Number(raw) };
    if (drive && drive.slot !== "scsi0") body.drive = drive.slot;
    confirm(resizeTitle(what, current, raw, drive), "The VM is changed while it is stopped.", async () => {
      setError(null);
      setNote(null);
      try {
        await api.act(id, `set/${what}`, body);
        setTyped(null);
        setNote("Done.");
        onDone();
      } catch (err) {
        setError(err);
      }
    });
  };
  return html`
    <form class="inline" onSubmit=${submit}>
      ${drives.length > 1 ? html`
        <label>Disk
          <select name="drive" disabled=${disabled}>
            ${drives.map((d) => html`<option value=${d.slot}>${d.slot} (${d.size ?? "?"})</option>`)}
          </select></label>` : null}
      <label>${label} (${unit})
        <input name=${what} type="number" min=${min} max=${max} value=${typed ?? value} required
               disabled=${disabled} onInput=${(e) => setTyped(e.target.value)} /></label>
      <button type="submit" class="secondary" disabled=${disabled}>Apply</button>
      <span role="status" class="muted">${note}</span>
      <${ErrorNote} error=${error} />
    </form>`;
}

export function VmDetail({ id }) {
  const detail = useLoad(() => api.vm(id), [id]);
  const list = useLoad(api.vms);
  const [records, setRecords] = useState([]);
  const [streaming, setStreaming] = useState(false);
  const [error, setError] = useState(null);
  const [note, setNote] = useState(null);
  const [asking, setAsking] = useState(null);
  const abort = useRef(null);
  const serial = useSerialAvailable();
  useEffect(() => () => abort.current?.abort(), []);
  const reload = useThrottled(() => detail.reload(), 1000); // at most one a second (vms.js)
  useEvents(() => reload(), (e) => e.stream === `vm:${id}` && e.type !== "vm.progress", [id]);

  const gone = detail.error?.status === 404;
  const vm = detail.data && !gone ? detail.data : null;
  const state = vm?.state;

  const follow = async (iterator) => {
    abort.current?.abort();
    abort.current = new AbortController();
    setRecords([]);
    setStreaming(true);
    try {
      for await (const { event, data } of iterator(abort.current.signal)) {
        if (event === "close") break;
        setRecords((r) => [...r, data]);
      }
    } catch (err) {
      if (err.name !== "AbortError") setError(err);
    } finally {
      setStreaming(false);
    }
  };

  // A task started elsewhere (another tab, the API, an install): follow it here.
  const runningTask = vm?.task || null;
  useEffect(() => {
    if (runningTask && !streaming) follow((signal) => api.task(id, signal));
  }, [runningTask]);

  const run = async (action, body) => {
    setError(null);
    setNote(null);
    const spec = ACTIONS[action];
    if (spec?.streamed || action === "set/node") {
      await follow((signal) => api.streamed(id, action, body, signal));
      return;
    }
    try {
      await api.act(id, action, body);
      setNote(action === "destroy" ? `VM ${id} destroyed.` : `${spec.label}: done.`);
    } catch (err) {
      setError(err);
    }
  };

  const confirm = (title, text, onYes, danger = false) =>
    setAsking({ title, text, danger, action: "Confirm", onYes });
  const ask = (action) => {
    const spec = ACTIONS[action];
    if (!spec.confirm) return run(action);
    setAsking({
      title: `${spec.label} VM ${id}${vm?.name ? ` (${vm.name})` : ""}?`,
      text: spec.confirm,
      danger: spec.danger,
      action: spec.label,
      onYes: () => run(action),
    });
  };
  const nodes = (list.data?.cluster || []).map((n) => n.node).filter((n) => n !== vm?.node);
  const stopped = state === "stopped";

  return html`
    <h1 tabindex="-1">VM ${id}${vm?.name ? html` <small>${vm.name}</small>` : null}</h1>
    <p><a href="#/vms">← All VMs</a></p>
    ${detail.error && !note ? html`<${ErrorNote} error=${detail.error} />` : null}
    ${note ? html`<p class="ok" role="status">${note}</p>` : null}
    ${vm ? html`
      <div class="grid-2">
        <section aria-labelledby="details-h">
          <h2 id="details-h">Details</h2>
          <${Details} vm=${vm} records=${records} />
        </section>
        ${may("operator") ? html`<section aria-labelledby="actions-h">
          <h2 id="actions-h">Actions</h2>
          <div class="row actions">
            ${Object.entries(ACTIONS).filter(([, spec]) => may(spec.role)).map(([action, spec]) => html`
              <button type="button" class=${spec.danger ? "danger" : "secondary"}
                      disabled=${streaming || state !== spec.when}
                      title=${whyNot(spec, state, streaming) || ""}
                      aria-describedby=${spec.danger && whyNot(spec, state, streaming) ? `why-${action}` : null}
                      onClick=${() => ask(action)}>${spec.label}</button>`)}
          </div>
          <ul class="why-not muted">
            ${Object.entries(ACTIONS).filter(([, spec]) => may(spec.role) && spec.danger && whyNot(spec, state, streaming)).map(([action, spec]) => html`
              <li id=${`why-${action}`}>${whyNot(spec, state, streaming)}</li>`)}
          </ul>
          <${ErrorNote} error=${error} />
          <h3>Resize</h3>
          ${stopped ? null : html`<p class="muted">Stop the VM to resize or migrate it.</p>`}
          <${SetForm} id=${id} what="cpu" label="vCPUs" unit="cores" min="1" max="32" value=${vm.cpu} current=${vm.cpu}
                      disabled=${!stopped || streaming} onDone=${detail.reload} confirm=${confirm} />
          <${SetForm} id=${id} what="memory" label="Memory" unit="MiB" min="512" value=${vm.memory} current=${vm.memory}
                      disabled=${!stopped || streaming} onDone=${detail.reload} confirm=${confirm} />
          <${SetForm} id=${id} what="disk" label="Grow disk by" unit="GiB" min="1" value="8" current=${vm.disk}
                      drives=${vm.guest?.disks ?? []}
                      disabled=${!stopped || streaming} onDone=${detail.reload} confirm=${confirm} />
          <h3>Migrate</h3>
          <form class="inline" onSubmit=${(e) => {
            e.preventDefault();
            const node = new FormData(e.target).get("node");
            confirm(`Migrate VM ${id} to ${node}?`, "Its disk is copied to the other node.", () => run("set/node", { node }));
          }}>
            <label>To node
              <select name="node" disabled=${!stopped || streaming || nodes.length === 0}>
                ${nodes.map((n) => html`<option value=${n}>${n}</option>`)}
              </select></label>
            <button type="submit" class="secondary" disabled=${!stopped || streaming || nodes.length === 0}>Migrate</button>
          </form>
          ${may("admin") ? html`<${ChangeForm} id=${id} disabled=${state !== "running" || streaming} confirm=${confirm}
              onRun=${(body) => { setError(null); setNote(null); follow((signal) => api.streamed(id, "change", body, signal)); }} />` : null}
        </section>` : null}
      </div>
      ${serial && state === "running" ? html`<${SerialConsole} id=${id} />` : null}` : detail.loading ? html`<p aria-busy="true">Loading…</p>` : null}
    ${records.length || streaming ? html`<${TaskStages} records=${records} running=${streaming} />` : vm?.last_task ? html`
      <section aria-labelledby="last-h">
        <h2 id="last-h">Last task</h2>
        <p>${vm.last_task.command}: ${taskOutcome(vm.last_task)}${vm.last_task.by ? ` (asked by ${vm.last_task.by})` : ""}
          ${vm.last_task.ended_at ? html` · <${TimeAgo} when=${vm.last_task.ended_at} />` : null}
          ${vm.last_task.error ? html`<br /><span class="error">${vm.last_task.error}</span>` : null}</p>
      </section>` : null}
    <${Confirm} open=${!!asking} title=${asking?.title} action=${asking?.action}
                danger=${asking?.danger}
                onCancel=${() => setAsking(null)}
                onConfirm=${() => { const yes = asking.onYes; setAsking(null); yes(); }}>
      <p>${asking?.text}</p>
    </${Confirm}>`;
}
