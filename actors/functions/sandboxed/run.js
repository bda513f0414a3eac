'use strict';
// Runs one JavaScript (or transpiled TypeScript) function inside the sandbox.
//
// stdin: {"fd": n, "code": string, "transpiled": bool, "input": <the input JSON>} written by the
// runner; fd is the result pipe.
// JavaScript is the body of an async function (top-level return and await work); TypeScript
// arrives from esbuild as one async function expression. The return value goes to the result
// pipe, never to stdout: "V" + JSON, "T" + text (a value JSON cannot hold), "N" (no value), "E" + message.
const fs = require('fs');
const vm = require('vm');
const { SourceMap } = require('module');

// The user's code is compiled as one file, main.js (or main.ts), whose line N is the user's
// line N: the function's header shares the first line (its width taken off that line's
// columns), and TypeScript's lines are mapped back through esbuild's source map.
const HEADER = '(async function (event, input, require) {';
let fileName = 'main.js';
// esbuild's inline map, base64; parsed only when a stack is shown (most runs never need it).
let sourceMapData = null;
let sourceMap = null;
let userLines = Infinity; // a syntax error at the end of the code is on its last line
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

// "main.ts:L:C" of esbuild's output -> the user's line and column.
function userPosition(line, column) {
  if (sourceMapData === null) return [line, column];
  if (sourceMap === null) {
    sourceMap = new SourceMap(JSON.parse(Buffer.from(sourceMapData, 'base64')));
  }
  const entry = sourceMap.findEntry(line - 1, column - 1);
  if (!entry || entry.originalLine === undefined) return [line, column];
  return [entry.originalLine + 1, entry.originalColumn + 1];
}

function userStack(stack) {
  const frame = new RegExp(fileName.replace('.', '\\.') + ':(\\d+):(\\d+)', 'g');
  return String(stack)
    .replace(frame, (_, line, column) => fileName + ':' + userPosition(+line, +column).join(':'))
    .split('\n')
    .filter((text) => !/node:internal|\/cairn\/run\.js|^\s+at (new )?Script/.test(text))
    .join('\n');
}

function syntaxLine(err) {
  // V8 puts "main.js:N" as the first line of a compile error's stack.
  const found = new RegExp('^' + fileName.replace('.', '\\.') + ':(\\d+)').exec(String(err.stack));
  return found ? Math.min(userPosition(+found[1], 1)[0], userLines) : null;
}

function describe(err) {
  try {
    if (err instanceof Error) {
      const name = String(err.name || 'Error');
      const message = String(err.message);
      const line = err instanceof SyntaxError ? syntaxLine(err) : null;
      const where = line ? ' (line ' + line + ')' : '';
      return (message ? name + ': ' + message : name) + where;
    }
    return 'Uncaught ' + String(err);
  } catch (_) {
    return 'Uncaught exception';
  }
}

function fail(err) {
  try {
    process.stderr.write((err && err.stack ? userStack(err.stack) : String(err)) + '\n');
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
function compile(code, transpiled) {
  if (transpiled) {
    fileName = 'main.ts';
    const inline = /\/\/# sourceMappingURL=data:application\/json;base64,(\S+)\s*$/.exec(code);
    if (inline) sourceMapData = inline[1];
    return new vm.Script(code, { filename: fileName }).runInThisContext();
  }
  userLines = code.split('\n').length;
  const script = new vm.Script(HEADER + code + '\n})', {
    filename: fileName,
    columnOffset: -HEADER.length,
  });
  return script.runInThisContext();
}

let main;
try {
  main = compile(request.code, request.transpiled);
} catch (err) {
  fail(err);
}
if (!finished) {
  Promise.resolve()
    .then(() => main(value, value, require))
    .then((result) => finish(encode(result)), fail);
}
