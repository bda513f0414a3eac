// A VM's serial console on its page: a terminal (xterm.js, the console's own bundle
// /console/vendor/xterm/terminal.js) over the console's websocket /console/vm/<id>/serial,
// which relays to Proxmox's termproxy. Offered only when this cairn drives Proxmox through its
// API (GET /console/serial says) and to a role that may (operator or admin once tokens exist).

import { html, useEffect, useRef, useState } from "../lib.js";
import { may } from "../identity.js";

let availability = null;

// Whether this console can open serial consoles at all (asked once per page load).
export function useSerialAvailable() {
  const [available, setAvailable] = useState(false);
  useEffect(() => {
    availability ||= fetch("/console/serial", { headers: { Accept: "application/json" } })
      .then((r) => (r.ok ? r.json() : { available: false }))
      .then((body) => body.available === true)
      .catch(() => false);
    let live = true;
    availability.then((yes) => live && setAvailable(yes));
    return () => { live = false; };
  }, []);
  return available && may("operator");
}

export function SerialConsole({ id }) {
  const [open, setOpen] = useState(false);
  const [status, setStatus] = useState(null);
  const holder = useRef(null);
  useEffect(() => {
    if (!open) return undefined;
    let session = null;
    let cancelled = false;
    setStatus("Connecting…");
    import("/console/vendor/xterm/terminal.js")
      .then(({ openSerialConsole }) => {
        if (cancelled) return;
        session = openSerialConsole(holder.current, id, {
          onClose: (why) => !cancelled && setStatus(`The serial console is ${why}.`),
        });
        setStatus(`Connected to VM ${id}'s serial console. Press Enter if no prompt shows; Shift+Tab leaves the terminal.`);
        // In view: xterm.js draws nothing while it is off screen, and the user looks there now.
        holder.current?.scrollIntoView({ block: "nearest" });
      })
      .catch((err) => setStatus(`The terminal could not be loaded: ${err.message}`));
    return () => {
      cancelled = true;
      session?.close();
    };
  }, [open, id]);
  return html`
    <section aria-labelledby="serial-h">
      <h2 id="serial-h">Serial console</h2>
      <div class="row">
        ${open
          ? html`<button type="button" class="secondary" onClick=${() => { setOpen(false); setStatus(null); }}>Close serial console</button>`
          : html`<button type="button" class="secondary" onClick=${() => setOpen(true)}>Serial console</button>`}
      </div>
      <p class="muted" role="status">${status}</p>
      ${open ? html`<div class="serial-console" ref=${holder} data-vmid=${id}></div>` : null}
    </section>`;
}
