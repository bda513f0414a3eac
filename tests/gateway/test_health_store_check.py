"""The look a cluster host's /health takes at the shared store (gateway/http/health.py): a problem
it found clears once the store takes writes again, without waiting for a request to ask."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from events.store import EventStore
from gateway.http.health import StoreCheck
from tests.conftest import wait_for


async def test_a_store_problem_is_looked_at_again_until_it_clears(
    store: EventStore, tmp_path: Path
) -> None:
    check = StoreCheck(store)
    # Another client holds SQLite's write lock: the look's write is refused.
    other = sqlite3.connect(tmp_path / "events.sqlite3", isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        check.refresh()
        await wait_for(lambda: check.problem is not None, what="the look to find the lock")
        assert check.problem is not None and "database is locked" in check.problem
    finally:
        other.execute("ROLLBACK")
        other.close()
    # Nobody asks again: the answer the next /health would give is already the fresh one.
    await wait_for(lambda: check.problem is None, timeout=15, what="the problem to clear")
