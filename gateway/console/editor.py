"""``GET /console/vendor/codemirror/editor.js``: the console's code editor, CodeMirror 6 from npm
(``ops/package.json``), bundled by esbuild (already there for TypeScript functions) into one ES
module from ``editor/entry.js``, the first time a page asks for it; kept in memory after that.

``GET /console/vendor/xterm/terminal.js`` is a VM's serial console's terminal, xterm.js from
npm, bundled the same way from ``terminal/entry.js``.

Bundled here rather than at set-up so a checkout needs no build step beyond ``npm install``; it
takes esbuild well under a second. A wheel carries both bundles made when it was built
(``events/resources.py``) and serves those. Without esbuild or the packages the route says what
to run (503), and the pages keep a plain text box.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from events import resources
from gateway.console.bundles import ENTRIES, command, failure

ENTRY = ENTRIES["editor.js"]
TERMINAL_ENTRY = ENTRIES["terminal.js"]
MISSING = (
    "{what} is not available: {why}; run ops/setup, which installs the npm packages "
    "of ops/package.json ({packages} and esbuild)"
)


class EditorBundle:
    def __init__(
        self,
        node_modules: Path | None = None,
        entry: Path = ENTRY,
        what: str = "the code editor",
        packages: str = "CodeMirror",
        prebuilt: Path | None = None,
    ) -> None:
        """``prebuilt``: the bundle made when the wheel was built, served as it is; without
        it ``entry`` is bundled from ``node_modules`` (the checkout's by default)."""
        self.node_modules = node_modules or resources.node_modules()
        self.entry = entry
        self.what = what
        self.packages = packages
        self.prebuilt = prebuilt
        self._body: bytes | None = None
        self._lock = asyncio.Lock()

    async def build(self) -> bytes:
        """The bundle; ``RuntimeError`` with the reason when it cannot be made."""
        async with self._lock:
            if self._body is None and self.prebuilt is not None:
                self._body = await asyncio.to_thread(self.prebuilt.read_bytes)
            if self._body is None:
                argv = command(self.node_modules)
                source = await asyncio.to_thread(self.entry.read_bytes)
                try:
                    proc = await asyncio.create_subprocess_exec(
                        *argv,
                        cwd=self.node_modules.parent,
                        stdin=asyncio.subprocess.PIPE,
                        stdout=asyncio.subprocess.PIPE,
                        stderr=asyncio.subprocess.PIPE,
                    )
                except FileNotFoundError:
                    raise RuntimeError(f"{argv[0]} is missing") from None
                out, err = await proc.communicate(source)
                if proc.returncode != 0:
                    raise RuntimeError(failure(err, proc.returncode or 0))
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


def editor_bundle(node_modules: Path | None = None) -> EditorBundle:
    """The code editor: CodeMirror, the wheel's bundle when there is one."""
    return EditorBundle(node_modules, prebuilt=resources.console_bundle("editor.js"))


def terminal_bundle(node_modules: Path | None = None) -> EditorBundle:
    """The serial console's terminal: xterm.js, bundled the same way (``terminal/entry.js``)."""
    return EditorBundle(
        node_modules,
        TERMINAL_ENTRY,
        "the serial console's terminal",
        "xterm.js",
        prebuilt=resources.console_bundle("terminal.js"),
    )


def add_routes(
    app: web.Application,
    bundle: EditorBundle | None = None,
    terminal: EditorBundle | None = None,
) -> None:
    app.router.add_get("/console/vendor/codemirror/editor.js", (bundle or editor_bundle()).serve)
    app.router.add_get("/console/vendor/xterm/terminal.js", (terminal or terminal_bundle()).serve)
