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
# Document embedding takes the CPU that queries and keyword indexing leave over, never the
# other way round.
EMBED_NICE = 10


def lower_this_thread(by: int) -> None:
    """Make the calling thread `by` nicer than it is (a sandbox without setpriority: as is)."""
    me = threading.get_native_id()
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, me, os.getpriority(os.PRIO_PROCESS, me) + by)
