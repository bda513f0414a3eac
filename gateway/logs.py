"""Logging for a long-running process: one format, and repeated lines rate-limited.

A fault that repeats (no file descriptors left, a store that refuses writes, a peer that keeps
failing) must not grow the log by megabytes a second and bury the first line that explains it.
The same message template from the same logger at the same level passes ``burst`` times per
``window`` seconds; the rest are counted, and the next one that passes says how many were held
back.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RepeatFilter(logging.Filter):
    def __init__(
        self,
        burst: int = 5,
        window: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        min_level: int = logging.WARNING,
    ) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self.clock = clock
        self.min_level = min_level
        # key -> (window start, passed in this window, held back since the last that passed)
        self._seen: dict[tuple[str, int, str], tuple[float, int, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.min_level:
            return True
        # The template's first line: asyncio puts the socket or task (which vary) after it.
        key = (record.name, record.levelno, str(record.msg).split("\n", 1)[0])
        now = self.clock()
        start, passed, held = self._seen.get(key, (now, 0, 0))
        if now - start >= self.window:
            start, passed = now, 0
        if passed >= self.burst:
            self._seen[key] = (start, passed, held + 1)
            return False
        if held:
            record.msg = f"{record.msg} [{held} more like this held back]"
        if len(self._seen) >= 10_000:
            self._seen.clear()
        self._seen[key] = (start, passed + 1, 0)
        return True


def configure(verbose: bool = False) -> None:
    """cairn's logging: stderr, one format, repeats rate-limited."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(RepeatFilter())
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
