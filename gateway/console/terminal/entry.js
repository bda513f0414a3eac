// A VM's serial console in the page: xterm.js (npm @xterm/xterm, ops/package.json), bundled by
// esbuild into one ES module the console serves itself (gateway/console/editor.py's bundler,
// route /console/vendor/xterm/terminal.js): no CDN, no inline script.
//
// The console's CSP allows styles from its own files only (style-src 'self'): no <style>
// element, no style attribute. xterm.js 6 makes both: three <style> elements (its theme, the
// cell size, the scrollbar) and, for 24-bit colours, style attributes on its cells. While a
// terminal is open, the createElement xterm.js uses (its documentOverride, and the page's own,
// which parts of xterm.js call whatever the override says: the scrollbar's style, every cell's
// span) is one that
// - returns, for "style", a hidden stand-in whose text goes into a constructed style sheet
//   adopted by the document (adopted sheets are not inline styles: the policy lets them be);
// - returns elements whose setAttribute("style", …) sets the same declarations through the
//   CSSOM (element.style.cssText), which the policy does not govern either.
// Neither changes what markup can do: parsed HTML never goes through createElement, so an
// injected style attribute or <style> is still refused. Closing the terminal puts the page's
// createElement back. xterm's own stylesheet (xterm.css) comes in the bundle as text, adopted
// the same way.

import { Terminal } from "@xterm/xterm";
import xtermCss from "@xterm/xterm/css/xterm.css";

function setAttributeSafely(name, value) {
  if (String(name).toLowerCase() === "style") {
    this.style.cssText = String(value);
    return;
  }
  Element.prototype.setAttribute.call(this, name, value);
}

// xterm.js's createElement; `sheets` collects the sheets it adopts.
function terminalCreateElement(doc, sheets) {
  const create = (tag, options) => Document.prototype.createElement.call(doc, tag, options);
  const adopt = (sheet) => {
    sheets.add(sheet);
    doc.adoptedStyleSheets = [...doc.adoptedStyleSheets, sheet];
  };
  const createElement = (tag, options) => {
    if (String(tag).toLowerCase() === "style") {
      const standIn = create("xterm-style");
      standIn.hidden = true;
      const sheet = new CSSStyleSheet();
      let text = "";
      Object.defineProperty(standIn, "textContent", {
        get: () => text,
        set: (value) => {
          text = String(value ?? "");
          sheet.replaceSync(text);
        },
      });
      standIn.remove = () => {
        sheets.delete(sheet);
        doc.adoptedStyleSheets = doc.adoptedStyleSheets.filter((s) => s !== sheet);
        Element.prototype.remove.call(standIn);
      };
      adopt(sheet);
      return standIn;
    }
    const element = create(tag, options);
    element.setAttribute = setAttributeSafely;
    return element;
  };
  return createElement;
}

// Make `createElement` the page's own until the returned function is called.
function borrowCreateElement(doc, createElement) {
  const had = Object.getOwnPropertyDescriptor(doc, "createElement");
  doc.createElement = createElement;
  let done = false;
  return () => {
    if (done || doc.createElement !== createElement) return;
    done = true;
    if (had) Object.defineProperty(doc, "createElement", had);
    else delete doc.createElement;
  };
}

// The document xterm.js creates its elements with: the page's, but for createElement.
function terminalDocument(doc, createElement) {
  return new Proxy(doc, {
    get(target, prop) {
      if (prop === "createElement") return createElement;
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

// Open VM `vmid`'s serial console in `parent`: a terminal of 80x24 and the console's websocket
// (/console/vm/<id>/serial). `onClose(reason)` is called once when the session ends, whoever
// ended it. Returns {terminal, close}.
export function openSerialConsole(parent, vmid, { onClose = () => {} } = {}) {
  const doc = parent.ownerDocument;
  const sheets = new Set();
  const createElement = terminalCreateElement(doc, sheets);
  const base = new CSSStyleSheet();
  base.replaceSync(xtermCss);
  sheets.add(base);
  doc.adoptedStyleSheets = [...doc.adoptedStyleSheets, base];
  const terminal = new Terminal({
    cols: 80,
    rows: 24,
    cursorBlink: true,
    fontFamily: "ui-monospace, 'DejaVu Sans Mono', monospace",
    fontSize: 14,
    lineHeight: 1.2, // at 1.0 the DOM renderer cuts the underscore off ("x86 64")
    scrollback: 2000,
    screenReaderMode: false,
    documentOverride: terminalDocument(doc, createElement),
  });
  // Parts of xterm.js use the page's own document whatever the override (the scrollbar's style
  // in Terminal.open, the cells' spans at every render): while the terminal lives, the page's
  // createElement is xterm's.
  const restore = borrowCreateElement(doc, createElement);
  terminal.open(parent);
  terminal.textarea?.setAttribute("aria-label", `Serial console of VM ${vmid}`);
  // Tab is the guest's (completion), so the terminal would hold the keyboard for good:
  // Shift+Tab is left to the browser, and moves the focus back out of it.
  terminal.attachCustomKeyEventHandler((e) => !(e.key === "Tab" && e.shiftKey));
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(`${scheme}//${location.host}/console/vm/${vmid}/serial`);
  socket.binaryType = "arraybuffer";
  const encoder = new TextEncoder();
  let ended = false;
  const end = (reason) => {
    if (ended) return;
    ended = true;
    onClose(reason);
  };
  socket.addEventListener("open", () => {
    socket.send(JSON.stringify({ resize: [terminal.cols, terminal.rows] }));
    terminal.focus();
  });
  socket.addEventListener("message", (e) => {
    terminal.write(typeof e.data === "string" ? e.data : new Uint8Array(e.data));
  });
  socket.addEventListener("close", (e) => {
    terminal.write("\r\n[the serial console is closed]\r\n");
    end(e.code === 1000 || e.code === 1005 ? "closed" : `closed (${e.code}${e.reason ? `: ${e.reason}` : ""})`);
  });
  socket.addEventListener("error", () => end("the serial console could not be opened or was cut"));
  const send = (bytes) => {
    if (socket.readyState === WebSocket.OPEN) socket.send(bytes);
  };
  terminal.onData((text) => send(encoder.encode(text)));
  terminal.onBinary((text) => send(Uint8Array.from(text, (c) => c.charCodeAt(0) & 0xff)));
  terminal.onResize(({ cols, rows }) => {
    if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ resize: [cols, rows] }));
  });
  return {
    terminal,
    close() {
      socket.close(1000);
      terminal.dispose();
      restore();
      doc.adoptedStyleSheets = doc.adoptedStyleSheets.filter((s) => !sheets.has(s));
      end("closed");
    },
  };
}
