// Human units: sizes in KiB/MiB/GiB, times as "3 s ago".

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

function trim(value) {
  return value >= 10 || Number.isInteger(value) ? String(Math.round(value)) : value.toFixed(1);
}

export function bytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "—";
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${trim(value)} ${UNITS[unit]}`;
}

// Proxmox's MB and GB are binary units (MiB, GiB).
export const mib = (mb) => (mb === null || mb === undefined ? "—" : bytes(mb * 1024 * 1024));
export const gib = (gb) => (gb === null || gb === undefined ? "—" : bytes(gb * 1024 ** 3));

// `when` in seconds since the epoch (the store's recorded_at) or an ISO 8601 string.
export function toMillis(when) {
  if (when === null || when === undefined) return null;
  if (typeof when === "string") return Date.parse(when);
  return when < 1e11 ? when * 1000 : when; // seconds, else already milliseconds
}

export function ago(when, now = Date.now()) {
  const ms = toMillis(when);
  if (ms === null || Number.isNaN(ms)) return "—";
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 60) return `${s} s ago`;
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min ago`;
  const h = Math.round(m / 60);
  if (h < 48) return `${h} h ago`;
  return `${Math.round(h / 24)} d ago`;
}

export function absolute(when) {
  const ms = toMillis(when);
  return ms === null || Number.isNaN(ms) ? "" : new Date(ms).toLocaleString();
}

// "1 VM", "2 VMs", "1 match", "3 matches".
export function count(n, word) {
  if (n === 1) return `${n} ${word}`;
  return `${n} ${word}${/(s|x|ch|sh)$/.test(word) ? "es" : "s"}`;
}

// Operating systems as their products are called, not as the API spells them.
const OS_NAMES = { debian: "Debian", ubuntu: "Ubuntu", rockylinux: "Rocky Linux" };
export function osName(os, version = "") {
  if (!os) return "—";
  const name = OS_NAMES[os] || os;
  return version ? `${name} ${version}` : name;
}

// A task record's message as its parts: the VM service writes "[+] done (0.42s)" ("[+]" done,
// "[*]" under way, "[-]" failed; every message ends with its elapsed time). `kind` is "ok",
// "info", "bad" or null, `seconds` a string or null. A message that already says its time
// ("… completed in 6.63s (6.63s)") keeps it once, in its words.
const RECORD = /^\[([+*!-])\]\s*([\s\S]*?)\s*(?:\((\d+(?:\.\d+)?)s\))?$/;
const KINDS = { "+": "ok", "*": "info", "-": "bad", "!": "bad" };
export function parseMessage(message) {
  const text = (message || "").trim();
  const match = RECORD.exec(text);
  if (!match) return { kind: null, text, seconds: null };
  const [, mark, body, seconds] = match;
  const said = seconds !== undefined && new RegExp(`\\b${seconds.replace(".", "\\.")}s$`).test(body);
  return { kind: KINDS[mark], text: body, seconds: seconds === undefined || said ? null : seconds };
}

// A service's message as a sentence: its words kept, a capital first and a full stop last.
export function sentence(text) {
  const words = String(text || "").trim();
  if (!words) return "";
  const first = words[0].toUpperCase() + words.slice(1);
  return /[.!?…]$/.test(first) ? first : `${first}.`;
}
