// A code box: CodeMirror 6 (syntax highlighting, Tab indents), loaded on first use from the
// console's own bundle (/console/vendor/codemirror/editor.js, gateway/console/editor.py). If
// the bundle is not there, a plain text box does the same job.

import { html, useEffect, useLayoutEffect, useRef, useState } from "./lib.js";

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
  // The text the editor holds as far as the page knows: what it last reported, or what it was
  // last given. Each edit comes back as `value` one render later; were it written into the
  // editor again, a render that lags behind fast typing would put older text back, the editor
  // would report that, and the two would chase each other forever (the tab froze).
  const known = useRef(value);
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
        doc: known.current, language, label: name, readOnly, describedBy: `${id}-help`,
        onChange: (text) => {
          known.current = text;
          latest.current(text);
        },
      });
    });
    return () => {
      live = false;
      editor.current?.destroy();
      editor.current = null;
    };
  }, [readOnly]);
  // Only a value from elsewhere (another version shown) goes into the editor, and at once
  // after the render that brought it, before another key can arrive.
  useLayoutEffect(() => {
    if (value === known.current) return;
    known.current = value;
    editor.current?.setDoc(value);
  }, [value]);
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
