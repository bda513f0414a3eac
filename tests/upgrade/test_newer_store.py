"""A data directory whose event store a newer cairn stamped: `cairn serve` and `cairn store
check` refuse it at start with one message naming both versions and the way out (no
traceback, exit status 1), and leave it as it was; `cairn store backup` still copies it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from events.release import VERSION
from events.stamp import STORE_FORMAT, check_and_stamp
from events.store import EventStore, default_store_url
from tests.events.sample_events import Incremented

CAIRN = [sys.executable, "-m", "gateway.main"]
NEWER = STORE_FORMAT + 1


@pytest.fixture
def newer_data(tmp_path: Path) -> Path:
    data = tmp_path / "data"

    async def make() -> None:
        url = default_store_url(data)
        store = await EventStore.open(url)
        await store.append("counter:1", 0, [Incremented(by=1)])
        await store.close()
        engine = create_async_engine(url)
        async with engine.begin() as conn:
            await check_and_stamp(conn, "", version="9.1.0", store_format=NEWER)
        await engine.dispose()

    asyncio.run(make())
    return data


def _cairn(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(data.parent),
        "CAIRN_DATA": str(data),
        "PORT": "1",  # never reached: the store is refused first
    }
    return subprocess.run(
        [*CAIRN, *args], env=env, cwd=data.parent, capture_output=True, text=True, timeout=120
    )


def _assert_refused(done: subprocess.CompletedProcess[str], data: Path) -> None:
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    refusal = [line for line in done.stderr.splitlines() if line.startswith("cairn: the event")]
    assert refusal == [
        f"cairn: the event store {data / 'events.sqlite3'} was written by cairn 9.1.0 (store "
        f"format {NEWER}); this is cairn {VERSION}, which reads store formats up to "
        f"{STORE_FORMAT}. Run cairn 9.1.0 or later on it, or, to go back to cairn {VERSION}, "
        "restore the backup taken before the upgrade (cairn store backup FILE, or pg_dump)"
    ], done.stderr


def test_serve_refuses_a_store_of_a_newer_cairn(newer_data: Path) -> None:
    before = (newer_data / "events.sqlite3").read_bytes()
    done = _cairn(newer_data, "serve", "images")
    _assert_refused(done, newer_data)
    assert "cairn: ready" not in done.stdout
    assert (newer_data / "events.sqlite3").read_bytes() == before


def test_store_check_refuses_it_and_backup_still_copies_it(newer_data: Path) -> None:
    _assert_refused(_cairn(newer_data, "store", "check"), newer_data)
    copied = _cairn(newer_data, "store", "backup", "before-downgrade.sqlite3")
    assert copied.returncode == 0, copied
    assert copied.stdout.startswith("backed up 1 events to ")
    assert (newer_data.parent / "before-downgrade.sqlite3").is_file()
