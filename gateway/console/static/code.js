// A code box: CodeMirror 6 (syntax highlighting, Tab indents), loaded on first use from the
// console's own bundle (/console/vendor/codemirror/editor.js, gateway/console/editor.py). If
// the bundle is not there, a plain text box does the same job.

import { html, useEffect, useRef, useState } from "./lib.js";

let loading = null;
const loadEditor = () =>
  (loading ||= import("/console/vendor/codemirror/editor.js").catch(() => null));

// `label`: the visible label (text or markup); `name`: the same as plain text, the editor's
// accessible name. `onChange(text)` follows every edit.
export function CodeEditor({ id, label, name, value, language, readOnly = false, onChange, rows = 8 }) {
  const box = useRef(null);
  const editor = useRef(null);
  const latest = useRef(onChange);
  latest.current = onChange;
  const [failed, setFailed] = useState(false);
  useEffect(() => {
    let live = true;
    loadEditor().then((module) => {
      if (!live) return;
      if (!module) {
        setFailed(true);
        return;
      }
      editor.current = module.createEditor(box.current, {
        doc: value, language, label: name, readOnly, describedBy: `${id}-help`,
        onChange: (text) => latest.current(text),
      });
    });
    return () => {
      live = false;
      editor.current?.destroy();
      editor.current = null;
    };
  }, [readOnly]);
  useEffect(() => editor.current?.setDoc(value), [value]);
  useEffect(() => editor.current?.setLanguage(language), [language]);
  useEffect(() => editor.current?.setLabel(name), [name]);
  if (failed) {
    return html`
      <label>${label}
        <textarea class="code" rows=${rows} spellcheck="false" value=${value} readonly=${readOnly}
          onInput=${(e) => onChange(e.target.value)}></textarea></label>`;
  }
  return html`
    <div class="code-field">
      <div class="code-label" id=${`${id}-label`}>${label}</div>
      <div class="code-editor" ref=${box} data-language=${language}></div>
      <small id=${`${id}-help`} class="muted">${readOnly
        ? "Read only."
        : "Tab indents, Shift+Tab dedents; to leave the editor by keyboard, press Escape, then Tab."}</small>
    </div>`;
}
