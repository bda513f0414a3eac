// The platform's live events (GET /console/events), one EventSource shared by every page.
// EventSource re-attaches by itself after a break, with Last-Event-ID, and the console sends
// what was missed meanwhile.

import { useEffect, useState } from "./lib.js";

const listeners = new Set();
// The latest events this page has seen, so a page opened later starts with them.
const RECENT = 200;
const recentEvents = [];
const statusListeners = new Set();
let source = null;
let connected = false;

function setConnected(value) {
  connected = value;
  for (const fn of statusListeners) fn(value);
}

function open() {
  if (source) return;
  source = new EventSource("/console/events");
  source.onopen = () => setConnected(true);
  source.onerror = () => setConnected(false);
  source.onmessage = (message) => {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      return;
    }
    recentEvents.unshift(event);
    recentEvents.length = Math.min(recentEvents.length, RECENT);
    for (const fn of listeners) fn(event);
  };
}

// Calls `fn(event)` for every event while the calling component is shown; `filter` is a list of
// type prefixes ("vm.", "images." …) or a predicate.
export function useEvents(fn, filter = null, deps = []) {
  useEffect(() => {
    const wanted = (event) =>
      !filter ||
      (typeof filter === "function"
        ? filter(event)
        : filter.some((prefix) => event.type.startsWith(prefix)));
    const listener = (event) => {
      if (wanted(event)) fn(event);
    };
    listeners.add(listener);
    open();
    return () => listeners.delete(listener);
  }, deps);
}

export function useFeedConnected() {
  const [value, setValue] = useState(connected);
  useEffect(() => {
    statusListeners.add(setValue);
    open();
    return () => statusListeners.delete(setValue);
  }, []);
  return value;
}

// The events seen so far, newest first.
export const recent = () => [...recentEvents];
