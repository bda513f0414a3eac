"""The search service's background work runs below the service itself, so the event loop that
answers queries wins a shared core: the keyword stage's processes (preparer and writer)
`WRITER_NICE` below it, document embedding `EMBED_NICE` below it (after the keyword stage).
Linux threads have a nice value of their own, a thread or process starts with its creator's,
and lowering one's own priority needs no privilege (raising it back does: so only threads that
do nothing else are lowered).
"""

from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["EMBED_NICE", "WRITER_NICE", "lower_this_thread"]

# How much nicer than the service the keyword stage runs. It is throughput work beside the
# queries the service answers: at the service's own priority, on two cores, its process and
# the event loop shared a core evenly, and a query arriving meanwhile waited for the loop's
# turn. It still takes every cycle the loop leaves idle.
WRITER_NICE = 5
# Document embedding comes after queries and the keyword stage, but not further below than
# that: nice orders threads within their scheduling group (a session's autogroup, a systemd
# unit's cgroup), and the group's weight is spread over the cores by its threads' weights, so
# embedder threads 10 below a busy nice-0 thread of their own group brought a sixth of a nice-0
# weight to their core and lost it to any other group's work there (7-11 chunks/s against a
# one-core hog on a busy machine; 6 below: x1.5-2.2). The cost: a query embedded beside a busy
# embedder takes 2-9% longer (median; float32 4.6 -> 4.9 ms), the keyword stage no longer
# (ops/bench/search_notes.md, 2026-11-27 late).
EMBED_NICE = 6


def lower_this_thread(by: int) -> None:
    """Make the calling thread `by` nicer than it is (a sandbox without setpriority: as is)."""
    me = threading.get_native_id()
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, me, os.getpriority(os.PRIO_PROCESS, me) + by)
