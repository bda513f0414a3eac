"""What a runner host runs each language on, read once from the programs themselves (GET
/runtimes answers it, as Piston's does)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from actors.functions.languages import Language
from actors.functions.sandbox import Runtimes
from events.children import end_child

_VERSION = re.compile(r"(\d+(?:\.\d+)+)")


def version_of(output: str) -> str:
    """``Python 3.11.2`` / ``v20.19.2`` / ``0.28.2`` -> the dotted number ("" if none)."""
    found = _VERSION.search(output)
    return found.group(1) if found else ""


async def _ask(program: str | None) -> str:
    if program is None:
        return ""
    try:
        proc = await asyncio.create_subprocess_exec(
            program,
            "--version",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={},
        )
    except OSError:
        return ""
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 10)
    except TimeoutError:
        await end_child(proc)  # a runtime that hangs on --version must not stay behind
        return ""
    return version_of(out.decode(errors="replace"))


async def describe(runtimes: Runtimes, esbuild: str | None) -> list[dict[str, Any]]:
    python, node, transpiler = await asyncio.gather(
        _ask(runtimes.python), _ask(runtimes.node), _ask(esbuild)
    )
    return [
        {"language": str(Language.PYTHON), "version": python, "runtime": "python3"},
        {"language": str(Language.JAVASCRIPT), "version": node, "runtime": "node"},
        {
            "language": str(Language.TYPESCRIPT),
            "version": node,
            "runtime": "node",
            # Types are stripped, not checked (as tsx does).
            "transpiler": f"esbuild {transpiler}" if transpiler else "",
        },
    ]
