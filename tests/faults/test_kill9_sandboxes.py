"""kill -9 of ``cairn up`` alone while function sandboxes wait for runs (bwrap, python3, node):
none of them outlives it, with cgroups and without (where nothing but their tie to their
parent's death can end them)."""

from __future__ import annotations

import os
import signal

import pytest

from tests.conftest import wait_for
from tests.faults.conftest import StartCairn, descendants, still_alive
from tests.faults.test_kill9 import _end

SANDBOX = ("bwrap", "/cairn/run.py", "/cairn/run.js")


def _sandboxes(tree: dict[int, tuple[int, str]]) -> dict[int, tuple[int, str]]:
    return {pid: p for pid, p in tree.items() if any(part in p[1] for part in SANDBOX)}


@pytest.mark.parametrize("cgroups", ["1", "0"])
async def test_kill9_of_the_service_leaves_no_sandbox(
    start_cairn: StartCairn, cgroups: str
) -> None:
    cairn = await start_cairn("up", RUN_CGROUPS=cgroups, RUN_CONCURRENCY="1", RUN_WARM="2")
    # Both runtimes' waiting sandboxes have booted (their wrappers wait on stdin).
    await wait_for(
        lambda: {"python3", "node"} <= _runtimes(descendants(cairn.proc.pid)),
        timeout=30,
        what="waiting python3 and node sandboxes",
    )
    tree = _sandboxes(descendants(cairn.proc.pid))
    os.kill(cairn.proc.pid, signal.SIGKILL)  # the process alone, not its group
    await cairn.proc.wait()
    try:
        await wait_for(lambda: not still_alive(tree), timeout=10, what="the sandboxes to end")
    except AssertionError:
        _end(tree)
        pytest.fail("outlived cairn's kill -9:\n" + "\n".join(still_alive(tree)))


def _runtimes(tree: dict[int, tuple[int, str]]) -> set[str]:
    found = set()
    for _, cmdline in tree.values():
        if cmdline.startswith("/usr/bin/python3 -I -S -B /cairn/run.py"):
            found.add("python3")
        elif cmdline.startswith("/usr/bin/node ") and cmdline.rstrip().endswith("/cairn/run.js"):
            found.add("node")
    return found
