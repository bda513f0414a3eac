// The console's client module: every HTTP call the pages make, in one place.
//
// Service calls go to /console/svc/<service>/<the service's own path>, which the console
// forwards to that service's API as it is; the one read model no service offers (a search
// database's documents) comes from /console/api/…, a projection of the events.
//
// A failed call throws an ApiError carrying the service's own status and message, which the
// pages show where the call was made.

import { createParser } from "./lib.js";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

const svc = (service, path) => `/console/svc/${service}/${path}`;
export const encodePath = (path) => path.split("/").map(encodeURIComponent).join("/");

async function failure(response) {
  let text = (await response.text()).trim();
  try {
    const parsed = JSON.parse(text);
    if (parsed && typeof parsed.error === "string") text = parsed.error; // search's shape
  } catch {
    // plain text, as most services answer
  }
  return new ApiError(response.status, text || `${response.status} ${response.statusText}`);
}

async function send(url, { method = "GET", json, body, signal } = {}) {
  const init = { method, signal, headers: {} };
  if (json !== undefined) {
    init.body = JSON.stringify(json);
    init.headers["Content-Type"] = "application/json";
  } else if (body !== undefined) {
    init.body = body;
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, `cairn did not answer (${err.message}); is it running?`);
  }
  if (response.status === 401) {
    // Identities are on and this page's session ended (signed out, expired, token revoked).
    location.assign("/console/login");
  }
  if (!response.ok) throw await failure(response);
  return response;
}

const getJson = async (url, options) => (await send(url, options)).json();
const getText = async (url, options) => (await send(url, options)).text();

// Server-sent events of a response (a POST's, which EventSource cannot make): yields
// {event, data, id} with `data` parsed from JSON; a refusal before the stream is an ApiError.
export async function* stream(url, options = {}) {
  const response = await send(url, { method: "POST", ...options });
  const pending = [];
  const parser = createParser({ onEvent: (message) => pending.push(message) });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.feed(value);
      while (pending.length) {
        const message = pending.shift();
        let data = message.data;
        try {
          data = JSON.parse(data);
        } catch {
          // keep the text
        }
        yield { event: message.event || "message", data, id: message.id };
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// Newest first; the form starts on each system's default (its current stable release).
export const OS_VERSIONS = {
  debian: ["13", "12", "11"],
  ubuntu: ["24.04", "22.04", "20.04"],
  rockylinux: ["10", "9", "8"],
};
export const DEFAULT_VERSION = { debian: "12", ubuntu: "24.04", rockylinux: "9" };

export const api = {
  // The gateway's own /status: 503 when something is down, with the same body.
  status: async () => {
    const response = await fetch("/status");
    if (response.ok || response.status === 503) return response.json();
    throw await failure(response);
  },

  // VMs (the VM service, docs/vm.md)
  vms: () => getJson(svc("vm", "api/vm/list")),
  templates: () => getJson(svc("vm", "api/vm/templates")),
  vm: (id) => getJson(svc("vm", `api/vm/${encodeURIComponent(id)}`)),
  install: (body, signal) => stream(svc("vm", "api/vm/install"), { json: body, signal }),
  streamed: (id, action, body, signal) =>
    stream(svc("vm", `api/vm/${id}/${action}`), { json: body, signal }),
  act: (id, action, body) =>
    getText(svc("vm", `api/vm/${id}/${action}`), { method: "POST", json: body }),
  task: (id, signal) => stream(svc("vm", `api/vm/${id}/task`), { method: "GET", signal }),

  // Functions (docs/functions.md)
  functions: async () => (await getJson(svc("functions", "functions"))).functions,
  languages: async () => {
    const runtimes = await getJson(svc("functions", "runtimes"));
    return [...new Set(runtimes.map((r) => r.language))];
  },
  code: async (path, version) => {
    const query = version ? `?version=${encodeURIComponent(version)}` : "";
    const response = await send(svc("functions", `code/${encodePath(path)}${query}`));
    return {
      code: await response.text(),
      version: Number(response.headers.get("X-Function-Version")),
      language: response.headers.get("X-Function-Language"),
    };
  },
  upload: (fn) => getJson(svc("functions", "upload"), { method: "POST", json: fn }),
  deleteFunction: (path) =>
    getJson(svc("functions", `functions/${encodePath(path)}`), { method: "DELETE" }),
  run: (path, input, signal, version = null) =>
    stream(svc("functions", `run/${encodePath(path)}${version ? `?version=${version}` : ""}`), {
      json: { input, stream: true },
      signal,
    }),

  // Search (docs/search.md)
  databases: () => getJson(svc("search", "api/list")),
  documents: (db) => getJson(`/console/api/search/${encodeURIComponent(db)}/documents`),
  // Indexing progress per database; null from a search service without the route (older).
  searchStatus: async () => {
    try {
      return await getJson(svc("search", "api/status"));
    } catch (err) {
      if (err.status === 404) return null;
      throw err;
    }
  },
  search: ({ db, q, target, limit }) => {
    const query = new URLSearchParams({ db, q, limit: String(limit || 10) });
    if (target && target !== "both") query.set("target", target);
    return getJson(svc("search", `api/search?${query}`));
  },

  // Images (docs/images.md)
  folder: (folder) => getJson(svc("images", folder ? `ls/${encodePath(folder)}` : "ls")),
  imageUrl: (path, params = "") =>
    svc("images", `c/img/${encodePath(path)}`) + (params ? `?${params}` : ""),
  uploadImage: (folder, file) => {
    const form = new FormData();
    form.append("filepath", file, file.name);
    return getJson(svc("images", `upload/${encodePath(folder)}`), { method: "POST", body: form });
  },
  deleteImage: (path) => getJson(svc("images", `del/${encodePath(path)}`), { method: "DELETE" }),
};
