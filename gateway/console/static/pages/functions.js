// Stored functions, and a form to store a new one.

import { html, useState } from "../lib.js";
import { api, encodePath } from "../api.js";
import { useEvents } from "../feed.js";
import { absolute, count } from "../format.js";
import { Confirm, ErrorNote, TimeAgo, useLoad } from "../ui.js";
import { may } from "../identity.js";
import { CodeEditor } from "../code.js";

export const SAMPLE = {
  python: 'name = event.get("name", "world")\nprint("greeting", name)\nreturn {"hello": name}\n',
  javascript: 'const name = event.name ?? "world";\nconsole.log("greeting", name);\nreturn { hello: name };\n',
  typescript: 'const name: string = event.name ?? "world";\nconsole.log("greeting", name);\nreturn { hello: name };\n',
};

// The languages the runner hosts run (GET /runtimes); the current one until they answer.
export function LanguageSelect({ value, onChange }) {
  const languages = useLoad(api.languages);
  const list = languages.data || [value];
  return html`
    <label>Language
      <select name="language" value=${value} onChange=${(e) => onChange(e.target.value)}>
        ${list.map((l) => html`<option value=${l}>${l}</option>`)}
      </select></label>
    <${ErrorNote} error=${languages.error} />`;
}

// A version is the time it was stored (milliseconds since the epoch): shown as that date, the
// raw number on hover and to screen readers' "title".
export function VersionName({ version }) {
  return html`<span class="version" title=${`version ${version}`}>${absolute(version)}</span>`;
}

// What storing `path` in `language` would replace, for the confirmation (null: nothing).
export function overwriteOf(existing, path, language) {
  const fn = (existing || []).find((f) => f.path === path);
  if (!fn) return null;
  return { path, versions: fn.versions.length, from: fn.language, to: language, changes: fn.language !== language };
}

// The confirmation before storing over a function; stronger (a danger button, said twice)
// when the language changes.
export function OverwriteConfirm({ over, onConfirm, onCancel }) {
  if (!over) return null;
  return html`
    <${Confirm} open=${true} danger=${over.changes}
                title=${over.changes ? `Change ${over.path} from ${over.from} to ${over.to}?` : `Replace ${over.path}?`}
                action=${over.changes ? `Store as ${over.to}` : "Store a new version"}
                onCancel=${onCancel} onConfirm=${onConfirm}>
      <p>${`${over.path} exists (${count(over.versions, "version")}, ${over.from}). Storing adds a new version, and every run of ${over.path} runs it from now on.`}</p>
      ${over.changes ? html`<p class="error"><strong>${`The language changes from ${over.from} to ${over.to}:`}</strong>${` the new code must read the same input; callers that worked with the ${over.from} version may fail. Older versions stay ${over.from} and can still be run.`}</p>` : null}
    </${Confirm}>`;
}

export function NewFunction({ onStored }) {
  const [language, setLanguage] = useState("python");
  const [code, setCode] = useState(SAMPLE.python);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const [over, setOver] = useState(null);
  const store = async (path) => {
    setBusy(true);
    setError(null);
    try {
      const stored = await api.upload({ path, language, code });
      onStored(stored);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const submit = async (e) => {
    e.preventDefault();
    const path = String(new FormData(e.target).get("path") || "").trim();
    setError(null);
    let existing;
    try {
      existing = await api.functions(); // what is stored now, not when the page opened
    } catch (err) {
      setError(err);
      return;
    }
    const found = overwriteOf(existing, path, language);
    if (found) setOver(found);
    else await store(path);
  };
  return html`
    <form onSubmit=${submit} aria-labelledby="new-h">
      <h2 id="new-h">Store a function</h2>
      <div class="grid-form">
        <label>Path <input name="path" required placeholder="greet/hello" autocomplete="off" /></label>
        <div><${LanguageSelect} value=${language} onChange=${(next) => {
          if (code === SAMPLE[language] && SAMPLE[next]) setCode(SAMPLE[next]);
          setLanguage(next);
        }} /></div>
      </div>
      <${CodeEditor} id="new-code" label="Code" name="Code" value=${code} language=${language}
                     onChange=${setCode} />
      <${ErrorNote} error=${error} />
      <button type="submit" disabled=${busy} aria-busy=${busy}>Store</button>
    </form>
    <${OverwriteConfirm} over=${over} onCancel=${() => setOver(null)}
                         onConfirm=${() => { const path = over.path; setOver(null); store(path); }} />`;
}

export function FunctionList() {
  const functions = useLoad(api.functions);
  useEvents(() => functions.reload(), ["functions."]);
  const list = functions.data || [];
  return html`
    <h1 tabindex="-1">Functions</h1>
    <${ErrorNote} error=${functions.error} />
    ${functions.data === null && !functions.error ? html`<p aria-busy="true">Loading…</p>` : list.length === 0 ? html`<p class="muted">No functions stored yet.</p>` : html`
      <div class="table" tabindex="0" role="region" aria-label="Stored functions"><table>
        <thead><tr><th scope="col">Path</th><th scope="col">Language</th>
          <th scope="col">Versions</th><th scope="col">Latest</th></tr></thead>
        <tbody>${list.map((fn) => html`
          <tr key=${fn.path}>
            <td><a href=${`#/function/${encodePath(fn.path)}`}>${fn.path}</a></td>
            <td>${fn.language}</td>
            <td>${count(fn.versions.length, "version")}</td>
            <td><span title=${`version ${fn.latest}`}><${TimeAgo} when=${fn.latest} /></span></td>
          </tr>`)}
        </tbody>
      </table></div>`}
    ${may("admin") ? html`<${NewFunction} onStored=${(stored) => { location.hash = `#/function/${encodePath(stored.path)}`; }} />` : null}`;
}
