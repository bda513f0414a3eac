"""The simulated Proxmox VE cluster (ops/pvesim) as a program cairn starts, never imports.

The simulator is a stand-in users run (``cairn sim``, or ``cairn up`` with no cluster
configured), not a part of the product: cairn runs it as a child process, ``python -m
pvesim.cli sim``, reads its environment from the lines it prints once its nodes answer
(``NAME=value``, ``PATH`` last), and stops it with SIGTERM when the VM service stops. The
child is tied to cairn as the embedded nats-server is (events/nats_server.py): a ``kill -9``
of cairn takes it down too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import NoReturn

from events.children import end_child, signal_child
from events.nats_server import _TIED_TO_PARENT
from events.printed_env import printed_env

# The simulator's program: the same Python, its module run as a script.
PROGRAM = (sys.executable, "-m", "pvesim.cli", "sim")
START_TIMEOUT = 60.0  # generating its SSH keys and starting three nodes takes seconds
STOP_TIMEOUT = 15.0  # then it is killed


class SimulatorFailed(Exception):
    """The simulator ended (or hung) before its cluster ran."""


def run_sim(args: Sequence[str]) -> NoReturn:
    """``cairn sim``: become the simulator, its options and output its own."""
    os.execv(PROGRAM[0], [*PROGRAM, *args])


@contextlib.asynccontextmanager
async def simulated_cluster(root: Path, delay_scale: float) -> AsyncIterator[dict[str, str]]:
    """Run the simulator on state directory ``root``; yields the environment that drives it
    (``MAIN_NODE``, ``NODE_*``, the SSH and API settings, ``PATH`` with its fake commands)."""
    argv = [*PROGRAM, "--root", str(root), "--delay-scale", repr(delay_scale)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-S", "-c", _TIED_TO_PARENT, str(os.getpid()), *argv,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        # A session of its own: Ctrl-C reaches cairn alone, which stops the simulator after
        # the VM service, never before it.
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    drain: asyncio.Task[None] | None = None
    try:
        try:
            env = await asyncio.wait_for(printed_env(proc.stdout, "the simulator"), START_TIMEOUT)
        except (TimeoutError, EOFError):
            raise SimulatorFailed(
                f"the simulated cluster did not start in {root} (its errors are above)"
            ) from None
        # It prints nothing more that matters; read on so that a line never blocks it.
        drain = asyncio.create_task(_discard(proc.stdout))
        yield env
    finally:
        signal_child(proc, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
        except TimeoutError:
            await end_child(proc)
        if drain is not None:
            drain.cancel()


async def _discard(stdout: asyncio.StreamReader) -> None:
    while await stdout.readline():
        pass
