"""cairn's command line as a test runs it, as a user would: to its end, or kept running with
its output read (until it says it is ready, or until the lines wanted came)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from tests.conftest import wait_for
from tests.ports import free_ports

CAIRN = str(Path(sys.executable).parent / "cairn")


def own_ports_env(root: Path, *more_ports: str) -> dict[str, str]:
    """What a `cairn` process needs to keep off others' files and ports: its data and config
    under `root`, a free port for cairn, vm, functions and images, and one for each variable
    `more_ports` names (picked with the others, so no two are the same)."""
    cairn, vm, functions, images, *more = free_ports(4 + len(more_ports))
    return {
        "CAIRN_DATA": str(root / "data"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "CAIRN_PORT": str(cairn),
        "VM_PORT": str(vm),
        "FUNCTIONS_PORT": str(functions),
        "IMAGES_PORT": str(images),
        **dict(zip(more_ports, map(str, more), strict=True)),
    }


async def cairn_start(
    *args: str,
    env: Mapping[str, str],
    cwd: Path | None = None,
    stderr: int = asyncio.subprocess.STDOUT,
    **kw: Any,
) -> asyncio.subprocess.Process:
    """`cairn ARGS` started, stdout in a pipe and stderr with it (or where `stderr` says)."""
    pipe = asyncio.subprocess.PIPE
    return await asyncio.create_subprocess_exec(
        CAIRN, *args, env=env, cwd=cwd, stdout=pipe, stderr=stderr, **kw
    )


async def cairn_run(
    *args: str, env: Mapping[str, str], cwd: Path | None = None, timeout: float = 60
) -> tuple[int, str, str]:
    """`cairn ARGS` to its end: its exit status, stdout and stderr."""
    proc = await cairn_start(*args, env=env, cwd=cwd, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


async def tail_lines(env: Mapping[str, str], wanted: int, *, kinds: tuple[str, ...]) -> list[str]:
    """What `cairn events tail --since 1` prints for the events of `kinds` (``functions``,
    ``images``, ...), read until `wanted` such lines came (at most 60 s)."""
    proc = await cairn_start("events", "tail", "--since", "1", env=env)
    assert proc.stdout is not None
    marks = tuple(f" cairn.evt.{kind}." for kind in kinds)
    lines: list[str] = []
    try:
        async with asyncio.timeout(60):
            while len(lines) < wanted:
                raw = await proc.stdout.readline()
                assert raw, f"cairn events tail ended: {lines}"
                line = raw.decode().rstrip()
                if any(mark in line for mark in marks):
                    lines.append(line)
    finally:
        proc.terminate()
        await proc.wait()
    return lines


@attrs.define
class Running:
    proc: asyncio.subprocess.Process
    output: list[bytes] = attrs.field(factory=list)

    def text(self) -> str:
        return b"".join(self.output).decode(errors="replace")

    def ready(self) -> bool:
        if self.proc.returncode is not None:
            raise AssertionError("cairn exited: " + self.text())
        return any(b"cairn: ready" in line for line in self.output)

    async def collect(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            self.output.append(line)


@contextlib.asynccontextmanager
async def until_ready(*argv: str, what: str, **kw: Any) -> AsyncIterator[Running]:
    """Start `argv` with stdout and stderr kept together, wait up to 120 s for its
    `cairn: ready` (failing with its output if it exits first), and stop it on the way out."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, **kw
    )
    running = Running(proc)
    reader = asyncio.create_task(running.collect())
    try:
        await wait_for(running.ready, timeout=120, what=what)
        yield running
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
        await reader
