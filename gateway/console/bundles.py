"""The console's two esbuild bundles: the code editor (CodeMirror, from ``editor/entry.js``)
and a VM's serial console's terminal (xterm.js, from ``terminal/entry.js``), each one ES module
with nothing left to fetch. A checkout bundles them on the first request (``editor.py``); a
wheel's build bundles them once (``setup.py``), since an installed cairn has no npm tree.

Standard library only: ``setup.py`` loads this file by its path, before anything is installed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Bundle name (as served under /console/vendor/ and as kept in a wheel) -> its entry.
ENTRIES = {
    "editor.js": HERE / "editor" / "entry.js",
    "terminal.js": HERE / "terminal" / "entry.js",
}
# A stylesheet imported by an entry comes in as text (xterm.css, adopted as a constructed sheet).
ESBUILD_ARGS = (
    "--bundle",
    "--format=esm",
    "--minify",
    "--legal-comments=none",
    "--loader=js",
    "--loader:.css=text",
)


def command(node_modules: Path) -> list[str]:
    """The bundler's command line: npm's esbuild; the entry comes on stdin and its imports are
    resolved from ``node_modules``'s folder (the working directory to run it in)."""
    return [str(node_modules / ".bin" / "esbuild"), *ESBUILD_ARGS]


def failure(stderr: bytes, returncode: int) -> str:
    lines = stderr.decode(errors="replace").strip().splitlines()
    return f"esbuild failed: {lines[0] if lines else returncode}"


def bundle(node_modules: Path, entry: Path) -> bytes:
    """The bundle of ``entry``, made at once (for a build); ``RuntimeError`` with the reason."""
    argv = command(node_modules)
    try:
        done = subprocess.run(
            argv, cwd=node_modules.parent, input=entry.read_bytes(), capture_output=True
        )
    except FileNotFoundError:
        raise RuntimeError(f"{argv[0]} is missing") from None
    if done.returncode != 0:
        raise RuntimeError(failure(done.stderr, done.returncode))
    return done.stdout
