"""A child that died just before it is signalled keeps its real exit status, and asyncio's
child watcher stays the one that reaps it (events/children.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from events.children import end_child, kill_child, signal_child


@pytest.fixture(autouse=True)
async def reaped_by_the_loop() -> AsyncIterator[None]:
    """Children reaped on the loop when it next runs (SafeChildWatcher), not at once by a
    thread: the moment between a child's death and its reaping, which a killpg followed by
    a signal hits by chance in cairn, lasts until the test awaits."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        policy = asyncio.get_event_loop_policy()
        before = policy.get_child_watcher()
        watcher = asyncio.SafeChildWatcher()
        watcher.attach_loop(asyncio.get_running_loop())
        policy.set_child_watcher(watcher)
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        policy.set_child_watcher(before)
        watcher.close()


def until_zombie(pid: int) -> None:
    """Block (the loop too, on purpose: its watcher would reap the child at its next turn)
    until ``pid`` has exited and is not reaped yet."""
    deadline = time.monotonic() + 10
    while True:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat[stat.rindex(")") + 2] == "Z":
            return
        assert time.monotonic() < deadline, "the child did not exit"
        time.sleep(0.001)


async def exited_unreaped() -> asyncio.subprocess.Process:
    """A child that has exited (status 7) and that asyncio has not reaped yet."""
    # It waits for its stdin to close: one that ended at once would be reaped already when
    # the watcher is told of it.
    read_end, write_end = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec("sh", "-c", "read line; exit 7", stdin=read_end)
    finally:
        os.close(read_end)
    os.close(write_end)
    until_zombie(proc.pid)
    return proc


async def test_killing_a_child_that_just_died_keeps_its_status_and_warns_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="asyncio")
    proc = await exited_unreaped()
    kill_child(proc)
    assert await proc.wait() == 7
    assert "Unknown child process" not in caplog.text


async def test_asyncios_own_kill_there_loses_the_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The contrast: Popen's poll-before-signal reaps it behind the watcher's back."""
    caplog.set_level(logging.WARNING, logger="asyncio")
    proc = await exited_unreaped()
    proc.kill()
    assert await proc.wait() == 255
    assert "Unknown child process" in caplog.text


async def test_signals_to_an_ended_child_are_no_error() -> None:
    proc = await exited_unreaped()
    assert await proc.wait() == 7
    signal_child(proc, 15)
    kill_child(proc)
    assert await end_child(proc) == 7


async def test_end_child_kills_a_running_one() -> None:
    proc = await asyncio.create_subprocess_exec("sleep", "60")
    assert await end_child(proc) == -9
