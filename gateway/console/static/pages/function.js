// One function: its versions and code, edited and stored as a new version, and run with input
// while its output streams in.

import { html, useEffect, useRef, useState } from "../lib.js";
import { api, encodePath } from "../api.js";
import { absolute } from "../format.js";
import { Confirm, ErrorNote, useLoad } from "../ui.js";
import { LanguageSelect, OverwriteConfirm, VersionName, overwriteOf } from "./functions.js";
import { may } from "../identity.js";
import { CodeEditor } from "../code.js";

function Run({ path, version }) {
  const [input, setInput] = useState('{"name": "cairn"}');
  const [lines, setLines] = useState([]);
  const [outcome, setOutcome] = useState(null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const abort = useRef(null);
  const box = useRef(null);
  const result = useRef(null);
  const problem = useRef(null);
  useEffect(() => () => abort.current?.abort(), []);
  useEffect(() => {
    if (box.current) box.current.scrollTop = box.current.scrollHeight;
  }, [lines.length]);
  // What a click on Run gave is where the user looks, on a phone too (where the output is
  // below the fold): the output as it starts, the result or the error once it is in.
  useEffect(() => {
    if (busy) box.current?.scrollIntoView({ block: "nearest" });
  }, [busy]);
  useEffect(() => {
    if (error) problem.current?.scrollIntoView({ block: "nearest" });
    else if (outcome) result.current?.scrollIntoView({ block: "nearest" });
  }, [outcome, error]);

  const run = async (e) => {
    e.preventDefault();
    abort.current = new AbortController();
    setLines([]);
    setOutcome(null);
    setError(null);
    setBusy(true);
    try {
      for await (const { data } of api.run(path, input, abort.current.signal, version)) {
        if (data.event === "log") setLines((l) => [...l, data.data]);
        else setOutcome(data);
      }
    } catch (err) {
      if (err.name !== "AbortError") setError(err);
    } finally {
      setBusy(false);
    }
  };
  const stop = () => abort.current?.abort();

  return html`
    <section aria-labelledby="run-h">
      <h2 id="run-h">Run</h2>
      <form onSubmit=${run}>
        <label>Input (JSON, given to the code as <code>event</code> and <code>input</code>)
          <textarea name="input" class="code" rows="3" spellcheck="false" value=${input}
            onInput=${(e) => setInput(e.target.value)}></textarea></label>
        <div class="row">
          <button type="submit" disabled=${busy} aria-busy=${busy}>${version ? html`Run the version of <${VersionName} version=${version} />` : "Run the latest version"}</button>
          <button type="button" class="secondary" disabled=${!busy} onClick=${stop}>Stop</button>
        </div>
      </form>
      <div ref=${problem}><${ErrorNote} error=${error} /></div>
      <h3>Output</h3>
      <pre class="log output" ref=${box} tabindex="0" role="log" aria-label="Output">${lines.join("\n")}</pre>
      <div class="outcome" role="status" ref=${result}>
        ${outcome?.event === "result" ? html`<p class="ok">Result (${outcome.type}): <code>${outcome.data}</code></p>` : null}
        ${outcome?.event === "error" ? html`<p class="error">Error: ${outcome.data}</p>` : null}
      </div>
    </section>`;
}

function Editor({ path, shown, onStored }) {
  const [code, setCode] = useState(shown.code);
  const [language, setLanguage] = useState(shown.language);
  const [error, setError] = useState(null);
  const [note, setNote] = useState(null);
  const [over, setOver] = useState(null);
  useEffect(() => {
    setCode(shown.code);
    setLanguage(shown.language);
  }, [shown.version]);
  const store = async () => {
    setError(null);
    setNote(null);
    try {
      const stored = await api.upload({ path, language, code });
      setNote(html`Stored as the version of <${VersionName} version=${stored.version} />.`);
      onStored(stored);
    } catch (err) {
      setError(err);
    }
  };
  // Storing a new version is what this form is for; a change of language is asked about.
  const save = async (e) => {
    e.preventDefault();
    setError(null);
    let existing;
    try {
      existing = await api.functions();
    } catch (err) {
      setError(err);
      return;
    }
    const found = overwriteOf(existing, path, language);
    if (found && found.changes) setOver(found);
    else await store();
  };
  return html`
    <form onSubmit=${save} aria-labelledby="code-h">
      <h2 id="code-h">Code</h2>
      <${LanguageSelect} value=${language} onChange=${setLanguage} />
      <${CodeEditor} id="fn-code" label=${html`Code of version <${VersionName} version=${shown.version} />`}
                     name=${`Code of version ${absolute(shown.version)}`} value=${code}
                     language=${language} readOnly=${!may("admin")} onChange=${setCode} rows="12" />
      <${ErrorNote} error=${error} />
      ${may("admin") ? html`<div class="row">
        <button type="submit" disabled=${code === shown.code && language === shown.language}>Store as a new version</button>
        <span role="status" class="muted">${note}</span>
      </div>` : null}
    </form>
    <${OverwriteConfirm} over=${over} onCancel=${() => setOver(null)}
                         onConfirm=${() => { setOver(null); store(); }} />`;
}

export function FunctionPage({ path, version }) {
  const functions = useLoad(api.functions);
  const shown = useLoad(() => api.code(path, version), [path, version]);
  const [asking, setAsking] = useState(false);
  const [deleted, setDeleted] = useState(null);
  const [error, setError] = useState(null);
  const fn = functions.data?.find((f) => f.path === path);
  const versions = fn ? [...fn.versions].reverse() : [];
  const choose = (e) => {
    const v = e.target.value;
    location.hash = `#/function/${encodePath(path)}${v && Number(v) !== fn.latest ? `?version=${v}` : ""}`;
  };
  const remove = async () => {
    setAsking(false);
    setError(null);
    try {
      await api.deleteFunction(path);
      setDeleted(path);
    } catch (err) {
      setError(err);
    }
  };
  if (deleted) {
    return html`
      <h1 tabindex="-1">${path}</h1>
      <p class="ok" role="status">${path} deleted, with every version. <a href="#/functions">All functions</a></p>`;
  }
  return html`
    <div class="title-row">
      <h1 tabindex="-1">${path}</h1>
      ${fn && may("admin") ? html`<button type="button" class="danger" onClick=${() => setAsking(true)}>Delete</button>` : null}
    </div>
    <p><a href="#/functions">← All functions</a></p>
    <${ErrorNote} error=${error || shown.error || functions.error} />
    ${fn ? html`
      <label class="inline">Version
        <select value=${shown.data?.version || fn.latest} onChange=${choose}>
          ${versions.map((v) => html`<option value=${v} title=${`version ${v}`}>${absolute(v)}${v === fn.latest ? " (latest)" : ""}</option>`)}
        </select></label>` : null}
    <div class="grid-2">
      <div>${shown.data ? html`<${Editor} path=${path} shown=${shown.data}
            onStored=${() => { functions.reload(); location.hash = `#/function/${encodePath(path)}`; shown.reload(); }} />` : null}</div>
      <div>${may("operator") ? html`<${Run} path=${path} version=${version} />` : null}</div>
    </div>
    <${Confirm} open=${asking} title=${`Delete ${path}?`} action="Delete" danger
                onCancel=${() => setAsking(false)} onConfirm=${remove}>
      <p>Every version of it goes; runs of it then answer "script not found".</p>
    </${Confirm}>`;
}
