"""Repeated log lines are held back, and the next one that passes says how many."""

from __future__ import annotations

import logging

from gateway.logs import RepeatFilter


def record(msg: str, level: int = logging.ERROR, name: str = "asyncio") -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


def test_a_repeated_line_passes_a_burst_per_window_then_counts_what_it_held() -> None:
    now = [0.0]
    rf = RepeatFilter(burst=2, window=10, clock=lambda: now[0])
    accept = "socket.accept() out of system resource\nsocket: <fd=%d>"
    passed = [rf.filter(record(accept % fd)) for fd in range(100)]
    assert passed == [True, True] + [False] * 98  # the socket after the first line varies
    assert rf.filter(record("another problem"))  # other lines are not affected
    assert rf.filter(record("socket.accept() out of system resource", name="other"))
    now[0] = 10.5
    again = record(accept % 7)
    assert rf.filter(again)
    assert again.getMessage().endswith("[98 more like this held back]")
    assert rf.filter(record(accept % 8))  # the second of the new window
    assert not rf.filter(record(accept % 9))


def test_lines_below_warning_are_never_held() -> None:
    rf = RepeatFilter(burst=1, window=60, clock=lambda: 0.0)
    assert all(rf.filter(record("polled", logging.INFO)) for _ in range(50))
