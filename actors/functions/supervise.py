"""Watching a run from outside for what no rlimit holds.

Without a memory cgroup each process of a run has its own memory rlimit, but a run may be
many processes; and a tmpfs caps bytes, not files (bubblewrap cannot pass ``nr_inodes``), while
every empty file costs the host about a kilobyte of kernel memory that no rlimit charges. So
while a run runs, its processes' anonymous memory is added up and its two tmpfs' files are
counted every ``PERIOD_S``; past a limit the run is killed and the reason kept for its error.

A run shorter than the period is never looked at, which keeps this off the cost of the usual
run; its per-process rlimits bound it meanwhile. A run below half its limits is looked at
half as often each time (up to ``SLOWEST_S``), one past half every ``PERIOD_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable

import attrs

from actors.functions.cgroups import process_tree
from actors.functions.limits import SandboxLimits

PERIOD_S = 0.02
# A run far from its limits is looked at less and less often, up to this: its per-process
# rlimits bound what it can do between two looks.
SLOWEST_S = 0.16
PAGE = os.sysconf("SC_PAGE_SIZE")
# Where the sandbox's tmpfs are, seen through one of its processes' root.
TMPFS = ("tmp", "home/sandbox")

MEMORY = "memory"
FILES = "files"


@attrs.frozen
class Watch:
    """What to watch: the run's memory (None where a memory cgroup holds it) and its files."""

    memory_bytes: int | None
    files: int
    tmpfs_bytes: int

    @classmethod
    def of(cls, limits: SandboxLimits, *, memory_cgroup: bool) -> Watch:
        memory = None if memory_cgroup else limits.memory_bytes
        return cls(memory, limits.tmpfs_files, limits.tmpfs_bytes)


def memory_of(pids: set[int]) -> int:
    """Resident anonymous memory of ``pids`` together (statm: resident minus file-backed and
    shared pages; threads share their process's, so only processes are given)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = open(f"/proc/{pid}/statm", "rb").read().split()  # noqa: SIM115
            total += (int(fields[1]) - int(fields[2])) * PAGE
    return total


def files_of(inside: int, size: int) -> int:
    """Files (inodes) in use in the sandbox's tmpfs, seen through process ``inside``. Only a
    file system of the sandbox's tmpfs size counts: while bubblewrap builds the sandbox, its
    processes still see the host's root."""
    used = 0
    for mount in TMPFS:
        with contextlib.suppress(OSError):
            stat = os.statvfs(f"/proc/{inside}/root/{mount}")
            if stat.f_blocks * stat.f_frsize == size:
                used = max(used, stat.f_files - stat.f_ffree)
    return used


def use(root: int, watch: Watch) -> dict[str, float]:
    """How much of each watched limit the run under ``root`` (the sandbox's outer process)
    uses: 1.0 is the limit."""
    tree = process_tree(root)
    used: dict[str, float] = {}
    if watch.memory_bytes is not None:
        used[MEMORY] = memory_of(tree) / watch.memory_bytes
    inside = next(iter(sorted(tree - {root})), None)  # any process in the sandbox's mounts
    used[FILES] = files_of(inside, watch.tmpfs_bytes) / watch.files if inside is not None else 0
    return used


async def supervise(root: int, watch: Watch, kill: Callable[[str], None]) -> None:
    """Look at the run until cancelled; ``kill(reason)`` once past a limit."""
    period = PERIOD_S
    while True:
        await asyncio.sleep(period)
        used = use(root, watch)
        past = [reason for reason, share in used.items() if share > 1]
        if past:
            kill(past[0])
            return
        near = any(share > 0.5 for share in used.values())
        period = PERIOD_S if near else min(period * 2, max(SLOWEST_S, PERIOD_S))
