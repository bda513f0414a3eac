"""TypeScript to JavaScript with esbuild, in a sandbox of its own under the same limits as a
run (esbuild parses what a user sent: a few hundred KB can drive it to a GB), and once per
source: the output is kept by the hash of the source in a bounded cache (see ``tscache.py``),
so a later run of that version starts node on ready JavaScript (what tsx does on each run,
≈150 ms, is paid once)."""

from __future__ import annotations

import asyncio
import hashlib
import re
import signal
from pathlib import Path

from actors.functions.limits import MIB, SandboxLimits
from actors.functions.runner import ToolOutcome, ToolRunner
from actors.functions.sandbox import esbuild_program
from actors.functions.tscache import DiskCache, MemoryCache

# The code is the body of an async function, as for JavaScript; esbuild only strips types.
# The prefix shares the first line with the code, so line N of the source is line N of the
# user's code; the source map (inline, without the source itself) takes a stack frame back from
# esbuild's output to that line (see sandboxed/run.js).
PREFIX = "(async function (event: any, input: any, require: any) {"
SUFFIX = "\n})"
FLAGS = (
    "--loader=ts",
    "--target=node20",
    "--log-level=error",
    "--color=false",
    "--log-limit=1",
    "--sourcemap=inline",
    "--sources-content=false",
)
# What esbuild may print: its output is about the size of its input.
OUTPUT_CAP_FACTOR = 4
OUTPUT_CAP_SLACK = 1 * MIB
_ERROR = re.compile(r"\[ERROR\]\s*(?P<message>.+)")
_WHERE = re.compile(r"<stdin>:(?P<line>\d+):(?P<col>\d+)")


class TranspileError(Exception):
    pass


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
    def __init__(
        self,
        esbuild: str | None,
        cache_dir: Path,
        run: ToolRunner,
        limits: SandboxLimits,
        *,
        max_bytes: int,
    ) -> None:
        self.esbuild = esbuild
        self.run = run
        self.limits = limits
        self.max_bytes = max_bytes
        self.memory = MemoryCache()
        self.disk = DiskCache(cache_dir)
        self._inflight: dict[str, asyncio.Future[str]] = {}

    @property
    def cache_dir(self) -> Path:
        return self.disk.directory

    async def transpile(self, source: str, *, keep: bool = False) -> str:
        """The JavaScript of ``source``. ``keep``: a stored version, worth keeping on disk
        (a /run-now body is only kept in memory). Raises TranspileError."""
        size = len(source.encode())
        if size > self.max_bytes:
            raise TranspileError(f"TypeScript: the code is larger than {self.max_bytes} bytes")
        key = cache_key(source)
        output = self.memory.get(key) or self.disk.get(key)
        if output is None:
            running = self._inflight.get(key)
            output = await (asyncio.shield(running) if running else self._build_once(key, source))
        self.memory.put(key, output)
        if keep:
            self.disk.put(key, output)
        return output

    async def _build_once(self, key: str, source: str) -> str:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            output = await self._esbuild(source)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it, nobody is warned
            raise
        else:
            future.set_result(output)
            return output
        finally:
            del self._inflight[key]

    async def _esbuild(self, source: str) -> str:
        if self.esbuild is None:
            raise TranspileError(
                "TypeScript needs esbuild: set ESBUILD to its path or put it on PATH (in a "
                "checkout, ops/setup installs it)"
            )
        stdin = f"{PREFIX}{source}{SUFFIX}".encode()
        cap = OUTPUT_CAP_FACTOR * len(stdin) + OUTPUT_CAP_SLACK
        try:
            ended = await self.run(esbuild_program(self.esbuild, FLAGS), stdin, cap)
        except OSError as exc:
            raise TranspileError(f"TypeScript: esbuild failed to start: {exc}") from None
        failure = failure_message(ended, self.limits, cap)
        if failure is not None:
            raise TranspileError(failure)
        return ended.stdout.decode("utf-8")


def failure_message(ended: ToolOutcome, limits: SandboxLimits, cap: int) -> str | None:
    """Why an esbuild run failed, in the words a run's failure would use; None if it did not."""
    if ended.timed_out:
        return f"TypeScript: timed out after {limits.timeout_s:g} s"
    # Go says "fatal error: out of memory" when RLIMIT_DATA stops it; the cgroup kills it.
    if ended.oom_killed or "out of memory" in ended.stderr:
        return f"TypeScript: memory limit of {limits.memory_mib} MiB exceeded"
    if ended.output_exceeded:
        return f"TypeScript: esbuild's output is larger than {cap} bytes"
    if ended.returncode in (128 + signal.SIGXCPU, -signal.SIGXCPU):
        return "TypeScript: CPU time limit exceeded"
    if ended.returncode != 0:
        return error_message(ended.stderr)
    return None
