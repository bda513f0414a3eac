"""``GET /console/vendor/codemirror/editor.js``: the console's code editor, CodeMirror 6 from npm
(``ops/package.json``), bundled by esbuild (already there for TypeScript functions) into one ES
module from ``editor/entry.js``, the first time a page asks for it; kept in memory after that.

``GET /console/vendor/xterm/terminal.js`` is a VM's serial console's terminal, xterm.js from
npm, bundled the same way from ``terminal/entry.js``.

Bundled here rather than at set-up so a checkout needs no build step beyond ``npm install``; it
takes esbuild well under a second. Without esbuild or the packages the route says what to run
(503), and the pages keep a plain text box.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

ENTRY = Path(__file__).resolve().parent / "editor" / "entry.js"
OPS = Path(__file__).resolve().parents[2] / "ops"
TERMINAL_ENTRY = Path(__file__).resolve().parent / "terminal" / "entry.js"
# A stylesheet imported by an entry comes in as text (xterm.css, adopted as a constructed sheet).
ESBUILD_ARGS = (
    "--bundle",
    "--format=esm",
    "--minify",
    "--legal-comments=none",
    "--loader=js",
    "--loader:.css=text",
)
MISSING = (
    "{what} is not available: {why}; run ops/setup, which installs the npm packages "
    "of ops/package.json ({packages} and esbuild)"
)


def esbuild_command(ops: Path = OPS) -> list[str]:
    """The bundler's command line; the entry comes on stdin, resolved from ``ops/``."""
    return [str(ops / "node_modules" / ".bin" / "esbuild"), *ESBUILD_ARGS]


class EditorBundle:
    def __init__(
        self,
        ops: Path = OPS,
        entry: Path = ENTRY,
        what: str = "the code editor",
        packages: str = "CodeMirror",
    ) -> None:
        self.ops = ops
        self.entry = entry
        self.what = what
        self.packages = packages
        self._body: bytes | None = None
        self._lock = asyncio.Lock()

    async def build(self) -> bytes:
        """The bundle; ``RuntimeError`` with the reason when it cannot be made."""
        async with self._lock:
            if self._body is None:
                command = esbuild_command(self.ops)
                source = await asyncio.to_thread(self.entry.read_bytes)
                try:
                    proc = await asyncio.create_subprocess_exec(
                        *command,
                        cwd=self.ops,
                        stdin=asyncio.subprocess.PIPE,
                        stdout=asyncio.subprocess.PIPE,
                        stderr=asyncio.subprocess.PIPE,
                    )
                except FileNotFoundError:
                    raise RuntimeError(f"{command[0]} is missing") from None
                out, err = await proc.communicate(source)
                if proc.returncode != 0:
                    lines = err.decode(errors="replace").strip().splitlines()
                    raise RuntimeError(f"esbuild failed: {lines[0] if lines else proc.returncode}")
                self._body = out
            return self._body

    async def serve(self, _: web.Request) -> web.Response:
        try:
            body = await self.build()
        except RuntimeError as exc:
            why = MISSING.format(what=self.what, why=exc, packages=self.packages)
            return web.Response(status=503, text=why)
        return web.Response(
            body=body,
            content_type="text/javascript",
            charset="utf-8",
            headers={"Cache-Control": "no-cache"},
        )


def terminal_bundle(ops: Path = OPS) -> EditorBundle:
    """The serial console's terminal: xterm.js, bundled the same way (``terminal/entry.js``)."""
    return EditorBundle(ops, TERMINAL_ENTRY, "the serial console's terminal", "xterm.js")


def add_routes(
    app: web.Application,
    bundle: EditorBundle | None = None,
    terminal: EditorBundle | None = None,
) -> None:
    app.router.add_get("/console/vendor/codemirror/editor.js", (bundle or EditorBundle()).serve)
    app.router.add_get("/console/vendor/xterm/terminal.js", (terminal or terminal_bundle()).serve)
