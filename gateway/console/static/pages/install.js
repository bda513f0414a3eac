// Install a VM from a form and watch its stages arrive.
//
// A password cairn generates arrives once, in this stream only (it is never stored). The page
// shows it in a modal box of its own, masked until asked for, until the user dismisses it; it is
// kept in this component's memory only (never in storage, never in the log), and a password
// typed into the form is cleared from the page as soon as the install is sent.

import { html, useEffect, useRef, useState } from "../lib.js";
import { api, DEFAULT_VERSION, OS_VERSIONS } from "../api.js";
import { ErrorNote, useLoad } from "../ui.js";
import { osName } from "../format.js";
import { TaskStages } from "./task.js";
// Written by the server from actors/vm/stages.py, the one list of the install's stages.
import { INSTALL_STAGES } from "/console/tables/stages.js";
import { AdvancedFields, advancedBody } from "./shape.js";

const DEFAULT_USER = { debian: "debian", ubuntu: "ubuntu", rockylinux: "rocky" };
const PASSWORD = /^\[\*\] Password: (\S+) \(generated/;

// A modal box: it asks to be read and dismissed, and it moves nothing on the page.
export function GeneratedPassword({ secret, user, onDone }) {
  const [shown, setShown] = useState(false);
  const [copied, setCopied] = useState(null);
  const ref = useRef(null);
  useEffect(() => {
    ref.current?.showModal();
  }, []);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(secret);
      setCopied("Copied.");
    } catch {
      setShown(true);
      setCopied("This browser does not allow copying here: select the password and copy it.");
    }
  };
  return html`
    <dialog ref=${ref} class="secret" aria-labelledby="secret-h"
            onCancel=${(e) => { e.preventDefault(); onDone(); }}>
      <article>
        <h2 id="secret-h">Password for ${user || "the VM's user"}</h2>
        <p>cairn generated it and shows it <strong>only now</strong>: it keeps no copy, and this
          page forgets it when you close this box.</p>
        <p>
          <label for="secret-text">Password</label>
          <input id="secret-text" type=${shown ? "text" : "password"} readonly value=${secret}
                 autocomplete="off" spellcheck="false" />
        </p>
        <footer class="row">
          <button type="button" class="secondary" aria-pressed=${shown} onClick=${() => setShown(!shown)}>
            ${shown ? "Hide" : "Show"}</button>
          <button type="button" class="secondary" onClick=${copy}>Copy</button>
          <button type="button" onClick=${onDone}>I have saved it</button>
        </footer>
        <p role="status" class="muted">${copied}</p>
      </article>
    </dialog>`;
}

function InstallForm({ nodes, onSubmit, busy, error }) {
  const [os, setOs] = useState("debian");
  const [version, setVersion] = useState(DEFAULT_VERSION.debian);
  const passwd = useRef(null);
  const submit = (e) => {
    e.preventDefault();
    const form = new FormData(e.target);
    const body = { os, version };
    for (const key of ["name", "node", "user", "passwd", "pubkey"]) {
      const value = String(form.get(key) || "").trim();
      if (value) body[key] = value;
    }
    for (const key of ["id", "cpu", "ram"]) {
      const value = String(form.get(key) || "").trim();
      if (value) body[key] = Number(value);
    }
    const disk = String(form.get("disk") || "").trim();
    if (disk) body.disk = `${disk}G`;
    Object.assign(body, advancedBody(form));
    passwd.current.value = ""; // not kept in the page once sent
    onSubmit(body);
  };
  return html`
    <form onSubmit=${submit} aria-labelledby="install-h">
      <div class="grid-form">
        <label>Operating system
          <select name="os" value=${os} onChange=${(e) => { setOs(e.target.value); setVersion(DEFAULT_VERSION[e.target.value]); }}>
            ${Object.keys(OS_VERSIONS).map((name) => html`<option value=${name}>${osName(name)}</option>`)}
          </select></label>
        <label>Version
          <select name="version" value=${version} onChange=${(e) => setVersion(e.target.value)}>
            ${OS_VERSIONS[os].map((v) => html`<option value=${v}>${v}</option>`)}
          </select></label>
        <label>Name <input name="name" placeholder="the VM id" autocomplete="off" /></label>
        <label>VM id <input name="id" type="number" min="100" max="254" placeholder="next free" /></label>
        <label>Node
          <select name="node">
            <option value="">main node</option>
            ${nodes.map((n) => html`<option value=${n.node}>${n.node}</option>`)}
          </select></label>
        <label>vCPUs <input name="cpu" type="number" min="1" max="32" value="2" /></label>
        <label>Memory (MiB) <input name="ram" type="number" min="512" step="512" value="2048" /></label>
        <label>Disk (GiB) <input name="disk" type="number" min="16" value="16" /></label>
        <label>User <input name="user" placeholder=${DEFAULT_USER[os]} autocomplete="off" /></label>
        <label>Password
          <input ref=${passwd} name="passwd" type="password" autocomplete="new-password"
                 aria-describedby="passwd-help" />
          <small id="passwd-help">Empty: cairn generates one and shows it once.</small></label>
      </div>
      <label>SSH public key <textarea name="pubkey" rows="2" placeholder="ssh-ed25519 AAAA… (optional)"></textarea></label>
      <${AdvancedFields} />
      <${ErrorNote} error=${error} />
      <button type="submit" disabled=${busy} aria-busy=${busy}>${busy ? "Installing…" : "Install"}</button>
    </form>`;
}

// What was sent, in one line, where the form was (the form folds away so the progress is
// where the user looks).
export function describeRequest(body) {
  const parts = [osName(body.os, body.version)];
  if (body.name) parts.push(`named ${body.name}`);
  if (body.id) parts.push(`as VM ${body.id}`);
  parts.push(`on ${body.node || "the main node"}`);
  const sizes = [
    body.cpu ? `${body.cpu} vCPUs` : null,
    body.ram ? `${body.ram} MiB` : null,
    body.disk ? `${body.disk.replace(/G$/, "")} GiB disk` : null,
  ].filter(Boolean);
  return `${parts.join(" ")}${sizes.length ? `: ${sizes.join(", ")}` : ""}`;
}

export function InstallVm() {
  const vms = useLoad(api.vms);
  const [records, setRecords] = useState([]);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const [secret, setSecret] = useState(null);
  const [done, setDone] = useState(null);
  const [user, setUser] = useState(null);
  const [sent, setSent] = useState(null);
  const abort = useRef(null);
  useEffect(() => () => abort.current?.abort(), []);

  const start = async (body) => {
    abort.current?.abort();
    abort.current = new AbortController();
    setRecords([]);
    setError(null);
    setDone(null);
    setSecret(null);
    setUser(body.user || DEFAULT_USER[body.os]);
    setSent(body);
    setBusy(true);
    let seen = 0;
    try {
      for await (const { event, data } of api.install(body, abort.current.signal)) {
        if (event === "close") break;
        const match = PASSWORD.exec(data.message || "");
        if (match) {
          setSecret(match[1]);
          data.message = "[*] Password: shown in its own box, never in this log";
        }
        seen += 1;
        setRecords((list) => [...list, data]);
        if (data.status === "success" && data.vm_id && data.ip) setDone(data);
      }
    } catch (err) {
      if (err.name !== "AbortError") setError(err);
      if (seen === 0) setSent(null); // refused before it began: the form again, with the reason
    } finally {
      setBusy(false);
    }
  };

  const again = () => {
    setSent(null);
    setRecords([]);
    setDone(null);
    setError(null);
  };
  return html`
    <h1 tabindex="-1">Install a VM</h1>
    <p><a href="#/vms">← All VMs</a></p>
    ${sent ? html`
      <section aria-labelledby="install-h" class="sent">
        <h2 id="install-h" class="visually-hidden">Install asked for</h2>
        <p class="row"><span>${busy ? "Installing" : "Asked for"} ${describeRequest(sent)}.</span>
          ${busy ? null : html`<button type="button" class="secondary" onClick=${again}>Install another VM</button>`}</p>
        <${ErrorNote} error=${error} />
      </section>` : html`
      <section>
        <h2 id="install-h" class="visually-hidden">Install form</h2>
        <${InstallForm} nodes=${vms.data?.cluster || []} onSubmit=${start} busy=${busy} error=${error} />
      </section>`}
    ${secret ? html`<${GeneratedPassword} secret=${secret} user=${user} onDone=${() => setSecret(null)} />` : null}
    ${sent && (records.length || busy) ? html`<${TaskStages} stages=${INSTALL_STAGES} records=${records} running=${busy} follow=${true}
        done=${done ? html`VM ${done.vm_id} is ready at <code>${done.ip}</code>.${" "}<a href=${`#/vm/${done.vm_id}`}>Open VM ${done.vm_id}</a>` : null} />` : null}`;
}
