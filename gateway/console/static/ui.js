// Small pieces every page uses: an error note, a confirmation dialog, times that keep up.

import { html, useEffect, useRef, useState } from "./lib.js";
import { absolute, ago, sentence, toMillis } from "./format.js";

// What an HTTP status means to the person who asked, as the label before the service's words.
const STATUS_WORDS = {
  0: "No answer", 401: "Sign-in needed", 403: "Not allowed", 404: "Not found",
  409: "Conflict", 429: "Busy", 502: "Unreachable", 503: "Unavailable", 504: "Timed out",
};
export const statusWord = (status) => STATUS_WORDS[status] || (status >= 500 ? "Failed" : "Refused");

// A message from a service, shown where the action was; `role=alert` so it is announced. The
// service's own words, as a sentence, after a label that says what kind of failure it is (the
// status number on hover, for whoever reads logs).
export function ErrorNote({ error }) {
  if (!error) return null;
  const status = error.status ?? null;
  return html`<p class="error" role="alert" data-status=${status}>${status === null ? null : html`<span
      class="status-label" title=${status ? `HTTP status ${status}` : "no HTTP answer"}>${statusWord(status)}</span> `}${sentence(error.message)}</p>`;
}

// A shared clock, so every "3 s ago" on a page moves on together.
const clockListeners = new Set();
setInterval(() => {
  const now = Date.now();
  for (const fn of clockListeners) fn(now);
}, 1000);

export function useNow() {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    clockListeners.add(setNow);
    return () => clockListeners.delete(setNow);
  }, []);
  return now;
}

export function TimeAgo({ when }) {
  const now = useNow();
  const ms = toMillis(when);
  const iso = ms === null || Number.isNaN(ms) ? "" : new Date(ms).toISOString();
  return html`<time datetime=${iso} title=${absolute(when)}>${ago(when, now)}</time>`;
}

// A modal confirmation: `open` shows it; Escape or Cancel calls onCancel.
let confirms = 0;

export function Confirm({ open, title, children, action, danger, onConfirm, onCancel }) {
  const ref = useRef(null);
  const id = useRef(null);
  if (id.current === null) id.current = `confirm-title-${++confirms}`; // several on one page
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    if (open && !dialog.open) dialog.showModal();
    if (!open && dialog.open) dialog.close();
  }, [open]);
  return html`
    <dialog ref=${ref} onCancel=${(e) => { e.preventDefault(); onCancel(); }} aria-labelledby=${id.current}>
      <article>
        <h2 id=${id.current}>${title}</h2>
        ${children}
        <footer>
          <button type="button" class="secondary" onClick=${onCancel}>Cancel</button>
          <button type="button" class=${danger ? "danger" : ""} onClick=${onConfirm}>${action}</button>
        </footer>
      </article>
    </dialog>`;
}

// Loads `load()` when `deps` change; returns {data, error, reload}.
export function useLoad(load, deps = []) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    load()
      .then((data) => live && setState({ data, error: null, loading: false }))
      .catch((error) => live && setState((s) => ({ data: s.data, error, loading: false })));
    return () => {
      live = false;
    };
  }, [...deps, tick]);
  return { ...state, reload: () => setTick((t) => t + 1) };
}

export function StateBadge({ state }) {
  const kind = { running: "ok", stopped: "off", failed: "bad", absent: "off" }[state] || "busy";
  return html`<span class=${`badge ${kind}`}>${state}</span>`;
}

// `fn` at most once per `ms`, the last call always honoured (for reloads driven by events).
export function useThrottled(fn, ms = 1000) {
  const state = useRef({ timer: null, last: 0 });
  const latest = useRef(fn);
  latest.current = fn;
  useEffect(() => () => clearTimeout(state.current.timer), []);
  return () => {
    const s = state.current;
    if (s.timer) return;
    const wait = Math.max(0, s.last + ms - Date.now());
    s.timer = setTimeout(() => {
      s.timer = null;
      s.last = Date.now();
      latest.current();
    }, wait);
  };
}
