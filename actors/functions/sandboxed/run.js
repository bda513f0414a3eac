'use strict';
// Runs one JavaScript (or transpiled TypeScript) function inside the sandbox.
//
// stdin: {"fd": n, "code": string, "transpiled": bool, "input": <the input JSON>} written by the
// runner; fd is the result pipe.
// JavaScript is the body of an async function (top-level return and await work); TypeScript
// arrives from esbuild as one async function expression. The return value goes to the result
// pipe, never to stdout: "V" + JSON, "T" + text (a value JSON cannot hold), "N" (no value), "E" + message.
const fs = require('fs');

const AsyncFunction = Object.getPrototypeOf(async function () {}).constructor;
let finished = false;
let resultFd = -1;

function writeAll(fd, text) {
  const buffer = Buffer.from(text, 'utf8');
  let offset = 0;
  while (offset < buffer.length) {
    offset += fs.writeSync(fd, buffer, offset, buffer.length - offset);
  }
}

function finish(payload) {
  if (finished) return;
  finished = true;
  let status = 0;
  try {
    writeAll(resultFd, payload);
  } catch (err) {
    status = 70;
  }
  // stdout and stderr are blocking pipes (see below): nothing is lost by exiting,
  // and timers the code left behind must not keep the run alive.
  process.exit(status);
}

function describe(err) {
  try {
    if (err instanceof Error) {
      const name = String(err.name || 'Error');
      const message = String(err.message);
      return message ? name + ': ' + message : name;
    }
    return 'Uncaught ' + String(err);
  } catch (_) {
    return 'Uncaught exception';
  }
}

function fail(err) {
  try {
    process.stderr.write(String((err && err.stack) || err) + '\n');
  } catch (_) {
    // an error whose stack cannot be printed still has a message
  }
  finish('E' + describe(err));
}

function encode(value) {
  if (value === undefined) return 'N';
  if (typeof value === 'number' && !Number.isFinite(value)) return 'T' + String(value);
  try {
    const text = JSON.stringify(value);
    if (text !== undefined) return 'V' + text;
  } catch (_) {
    // BigInt, cycles: fall through to text
  }
  try {
    return 'T' + String(value);
  } catch (_) {
    return 'T' + Object.prototype.toString.call(value);
  }
}

// Node writes to a full pipe asynchronously, so a busy loop that prints would queue its output
// in memory instead of reaching the runner (and its output cap): make the pipes blocking.
for (const stream of [process.stdout, process.stderr]) {
  if (stream._handle && typeof stream._handle.setBlocking === 'function') {
    stream._handle.setBlocking(true);
  }
}

process.on('uncaughtException', fail);
process.on('unhandledRejection', fail);

const request = JSON.parse(fs.readFileSync(0, 'utf8'));
resultFd = request.fd;
const value = request.input; // one object, parsed once, seen as both names
let main;
try {
  main = request.transpiled
    ? (0, eval)(request.code)
    : new AsyncFunction('event', 'input', 'require', request.code);
} catch (err) {
  fail(err);
}
if (!finished) {
  Promise.resolve()
    .then(() => main(value, value, require))
    .then((result) => finish(encode(result)), fail);
}
