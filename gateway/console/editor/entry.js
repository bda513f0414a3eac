// The console's code editor: CodeMirror 6 (npm, ops/package.json), bundled by esbuild into one
// ES module the console serves itself (gateway/console/editor.py): no CDN, no inline script.
//
// Tab indents (and Shift-Tab dedents) inside the editor; to leave it from the keyboard, press
// Escape, then Tab (CodeMirror's convention, said in the page's help text).
//
// The editor lives in a shadow root of its parent: there CodeMirror's styles go into
// constructed style sheets, which the console's CSP (style-src 'self', no inline <style>)
// lets through, where in the document it would add a <style> element the policy refuses. Its
// theme reads the page's Pico colours (custom properties cross into the shadow root), so it
// follows light and dark like the rest.

import { Annotation, EditorState, Compartment } from "@codemirror/state";
import {
  EditorView, keymap, lineNumbers, highlightActiveLine, highlightActiveLineGutter, drawSelection,
} from "@codemirror/view";
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import {
  HighlightStyle, bracketMatching, defaultHighlightStyle, indentOnInput, indentUnit,
  syntaxHighlighting,
} from "@codemirror/language";
import { tags as t } from "@lezer/highlight";
import { python } from "@codemirror/lang-python";
import { javascript } from "@codemirror/lang-javascript";

const theme = EditorView.theme({
  "&": {
    minHeight: "12rem",
    maxHeight: "32rem",
    border: "var(--pico-border-width, 1px) solid var(--pico-form-element-border-color, #ccc)",
    borderRadius: "var(--pico-border-radius, 0.25rem)",
    background: "var(--pico-form-element-background-color, #fff)",
    color: "var(--pico-form-element-color, #222)",
    fontSize: "0.9rem",
  },
  "&.cm-focused": { outline: "3px solid var(--pico-primary, #0172ad)", outlineOffset: "2px" },
  ".cm-scroller": { fontFamily: "var(--pico-font-family-monospace, monospace)", overflow: "auto" },
  ".cm-gutters": {
    background: "var(--pico-card-sectioning-background-color, #f6f6f6)",
    color: "var(--pico-muted-color, #666)",
    borderRight: "1px solid var(--pico-muted-border-color, #ddd)",
  },
  ".cm-activeLine, .cm-activeLineGutter": {
    background: "color-mix(in srgb, var(--pico-primary, #0172ad) 8%, transparent)",
  },
  ".cm-content": { caretColor: "var(--pico-color, #222)" },
  "&.cm-focused .cm-cursor": { borderLeftColor: "var(--pico-color, #222)" },
});

// On a dark page CodeMirror's default colours are too dark to read: these keep 4.5:1 on it.
const darkHighlight = HighlightStyle.define([
  { tag: [t.keyword, t.controlKeyword, t.operatorKeyword, t.definitionKeyword, t.moduleKeyword], color: "#d7a8ff" },
  { tag: [t.string, t.special(t.string), t.regexp], color: "#b5e08a" },
  { tag: [t.number, t.bool, t.atom, t.null], color: "#ffa87a" },
  { tag: [t.comment, t.lineComment, t.blockComment], color: "#9aa4b2", fontStyle: "italic" },
  { tag: [t.function(t.variableName), t.function(t.definition(t.variableName)), t.definition(t.variableName)], color: "#8fb8ff" },
  { tag: [t.typeName, t.className], color: "#ffd479" },
  { tag: [t.propertyName, t.attributeName], color: "#8fe3ff" },
  { tag: t.invalid, color: "#ff9a9a" },
]);
const darkQuery = typeof matchMedia === "function" ? matchMedia("(prefers-color-scheme: dark)") : null;
const highlighting = (dark) =>
  syntaxHighlighting(dark ? darkHighlight : defaultHighlightStyle, { fallback: true });

const LANGUAGES = {
  python: () => python(),
  javascript: () => javascript(),
  typescript: () => javascript({ typescript: true }),
};

// Marks a text the page put in (setDoc): the page knows it already, so it is not reported back.
const fromPage = Annotation.define();

// An editor in `parent`: `label` names it for assistive technology, `onChange(text)` follows
// every edit. Returns {view, setDoc, setLanguage, setReadOnly, destroy}.
export function createEditor(parent, { doc = "", language = "python", label = "Code",
  readOnly = false, describedBy = null, onChange = () => {} } = {}) {
  const lang = new Compartment();
  const ro = new Compartment();
  const attrs = new Compartment();
  const colours = new Compartment();
  const contentAttrs = (text) => ({
    "aria-label": text,
    ...(describedBy ? { "aria-describedby": describedBy } : {}),
  });
  const root = parent.shadowRoot || parent.attachShadow({ mode: "open" });
  const view = new EditorView({
    parent: root,
    root,
    state: EditorState.create({
      doc,
      extensions: [
        lineNumbers(),
        highlightActiveLineGutter(),
        history(),
        drawSelection(),
        indentOnInput(),
        bracketMatching(),
        highlightActiveLine(),
        colours.of(highlighting(darkQuery?.matches)),
        indentUnit.of("    "),
        theme,
        keymap.of([indentWithTab, ...defaultKeymap, ...historyKeymap]),
        lang.of((LANGUAGES[language] || LANGUAGES.python)()),
        ro.of([EditorState.readOnly.of(readOnly), EditorView.editable.of(!readOnly)]),
        attrs.of(EditorView.contentAttributes.of(contentAttrs(label))),
        EditorView.updateListener.of((update) => {
          const edited = update.transactions.some((tr) => tr.docChanged && !tr.annotation(fromPage));
          if (edited) onChange(update.state.doc.toString());
        }),
      ],
    }),
  });
  // The page follows the system's light or dark; so do the editor's colours.
  const follow = (e) => view.dispatch({ effects: colours.reconfigure(highlighting(e.matches)) });
  darkQuery?.addEventListener("change", follow);
  return {
    view,
    setDoc(text) {
      if (text !== view.state.doc.toString()) {
        view.dispatch({
          changes: { from: 0, to: view.state.doc.length, insert: text },
          annotations: fromPage.of(true),
        });
      }
    },
    setLanguage(name) {
      view.dispatch({ effects: lang.reconfigure((LANGUAGES[name] || LANGUAGES.python)()) });
    },
    setLabel(text) {
      view.dispatch({ effects: attrs.reconfigure(EditorView.contentAttributes.of(contentAttrs(text))) });
    },
    destroy() {
      darkQuery?.removeEventListener("change", follow);
      view.destroy();
    },
  };
}
