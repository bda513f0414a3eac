// Stored functions, and a form to store a new one.

import { html, useState } from "../lib.js";
import { api, encodePath } from "../api.js";
import { useEvents } from "../feed.js";
import { count } from "../format.js";
import { ErrorNote, TimeAgo, useLoad } from "../ui.js";
import { may } from "../identity.js";

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

export function NewFunction({ onStored }) {
  const [language, setLanguage] = useState("python");
  const [code, setCode] = useState(SAMPLE.python);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    const path = String(new FormData(e.target).get("path") || "").trim();
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
      <label>Code <textarea name="code" class="code" rows="8" spellcheck="false"
        value=${code} onInput=${(e) => setCode(e.target.value)}></textarea></label>
      <${ErrorNote} error=${error} />
      <button type="submit" disabled=${busy} aria-busy=${busy}>Store</button>
    </form>`;
}

export function FunctionList() {
  const functions = useLoad(api.functions);
  useEvents(() => functions.reload(), ["functions."]);
  const list = functions.data || [];
  return html`
    <h1 tabindex="-1">Functions</h1>
    <${ErrorNote} error=${functions.error} />
    ${functions.data === null && !functions.error ? html`<p aria-busy="true">Loading…</p>` : list.length === 0 ? html`<p class="muted">No functions stored yet.</p>` : html`
      <div class="table"><table>
        <thead><tr><th scope="col">Path</th><th scope="col">Language</th>
          <th scope="col">Versions</th><th scope="col">Latest</th></tr></thead>
        <tbody>${list.map((fn) => html`
          <tr key=${fn.path}>
            <td><a href=${`#/function/${encodePath(fn.path)}`}>${fn.path}</a></td>
            <td>${fn.language}</td>
            <td>${count(fn.versions.length, "version")}</td>
            <td><${TimeAgo} when=${fn.latest} /></td>
          </tr>`)}
        </tbody>
      </table></div>`}
    ${may("admin") ? html`<${NewFunction} onStored=${(stored) => { location.hash = `#/function/${encodePath(stored.path)}`; }} />` : null}`;
}
