"""Signals to asyncio's child processes that never reap them behind asyncio's back.

``asyncio.subprocess.Process.send_signal`` (and ``kill``/``terminate``) end in
``subprocess.Popen.send_signal``, which polls the child first (bpo-38630). When the child has
just died (a ``killpg`` of its group a moment before, or its own exit), that poll reaps it, and
asyncio's child watcher, whose ``waitpid`` was about to, finds nothing: it logs "Unknown child
process pid N, will report returncode 255" and reports 255 instead of the real status. A stop
that killed its sandboxes logged a few of those.

Here the signal goes straight to the pid. The pid cannot belong to another process while the
child is unreaped, and only asyncio's watcher reaps it: the one window is between the
watcher's ``waitpid`` and the loop setting ``returncode`` (microseconds), far shorter than the
time the kernel takes to hand the same pid out again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal


def signal_child(proc: asyncio.subprocess.Process, sig: int) -> None:
    """Send ``sig`` to ``proc`` unless it is known to have ended; a child that is already gone
    is not an error."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)


def kill_child(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL ``proc`` (see :func:`signal_child`)."""
    signal_child(proc, signal.SIGKILL)


async def end_child(proc: asyncio.subprocess.Process) -> int:
    """Kill ``proc`` and wait for asyncio to see it exit; its exit status."""
    kill_child(proc)
    return await proc.wait()
