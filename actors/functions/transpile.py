"""TypeScript to JavaScript with esbuild, once per version: the output is cached on disk by
the hash of the source, so every later run of that version starts node on ready JavaScript
(what tsx does on each run, ≈150 ms, is paid once)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import platform
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

OPS = Path(__file__).resolve().parents[2] / "ops"
# The code is the body of an async function, as for JavaScript; esbuild only strips types.
PREFIX = "(async function (event: any, input: any, require: any) {\n"
SUFFIX = "\n})"
FLAGS = ("--loader=ts", "--target=node20", "--log-level=error", "--color=false", "--log-limit=1")
TIMEOUT_S = 30.0
_ERROR = re.compile(r"\[ERROR\]\s*(?P<message>.+)")
_WHERE = re.compile(r"<stdin>:(?P<line>\d+):(?P<col>\d+)")


class TranspileError(Exception):
    pass


def find_esbuild(env: Mapping[str, str]) -> str | None:
    """``ESBUILD`` if set, else the native binary npm put under ops/node_modules, else PATH."""
    if env.get("ESBUILD"):
        return env["ESBUILD"]
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64"}.get(platform.machine().lower())
    candidates = [
        OPS / "node_modules" / "@esbuild" / f"linux-{arch}" / "bin" / "esbuild",
        OPS / "node_modules" / ".bin" / "esbuild",
    ]
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("esbuild")


def error_message(stderr: str) -> str:
    """esbuild's first error, with the line number of the user's code."""
    message = _ERROR.search(stderr)
    text = message.group("message").strip() if message else (stderr.strip() or "esbuild failed")
    where = _WHERE.search(stderr)
    if where:
        line = max(1, int(where.group("line")) - PREFIX.count("\n"))
        text = f"{text} (line {line})"
    return f"TypeScript: {text}"


def cache_key(source: str) -> str:
    material = "\0".join((PREFIX, SUFFIX, *FLAGS, source))
    return hashlib.sha256(material.encode()).hexdigest()


class Transpiler:
    def __init__(self, esbuild: str | None, cache_dir: Path) -> None:
        self.esbuild = esbuild
        self.cache_dir = cache_dir
        self._memory: dict[str, str] = {}
        self._inflight: dict[str, asyncio.Future[str]] = {}

    async def transpile(self, source: str) -> str:
        key = cache_key(source)
        if key in self._memory:
            return self._memory[key]
        running = self._inflight.get(key)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            output = await self._load_or_build(key, source)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it, nobody is warned
            raise
        else:
            future.set_result(output)
            if len(self._memory) > 256:
                self._memory.clear()
            self._memory[key] = output
            return output
        finally:
            del self._inflight[key]

    async def _load_or_build(self, key: str, source: str) -> str:
        path = self.cache_dir / key[:2] / f"{key}.js"
        with contextlib.suppress(OSError):
            return path.read_text(encoding="utf-8")
        output = await self._esbuild(source)
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(output)
            os.replace(tmp, path)
        return output

    async def _esbuild(self, source: str) -> str:
        if self.esbuild is None:
            raise TranspileError("TypeScript needs esbuild: run ops/setup (or set ESBUILD)")
        proc = await asyncio.create_subprocess_exec(
            self.esbuild,
            *FLAGS,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"},
        )
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(f"{PREFIX}{source}{SUFFIX}".encode()), TIMEOUT_S
            )
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise TranspileError("TypeScript: esbuild timed out") from None
        if proc.returncode != 0:
            raise TranspileError(error_message(err.decode("utf-8", "replace")))
        return out.decode("utf-8")
