"""The store's format stamp: a new store and one from before the stamp are stamped with this
cairn's format and version; one stamped by a newer cairn is refused at open, untouched, with
a message naming both versions and what to do. Each backend."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from events.release import VERSION
from events.stamp import STORE_FORMAT, StoreTooNew, check_and_stamp, meta_table
from events.store import EventStore, default_store_url
from tests.events.sample_events import Incremented

UPGRADE_FIXTURE = Path(__file__).parents[1] / "upgrade" / "fixture-0.1.0"


async def _meta(url: str) -> dict[str, str]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(sa.select(meta_table.c.key, meta_table.c.value))
            return dict(rows.all())
    finally:
        await engine.dispose()


async def _stamp(url: str, version: str, store_format: int) -> None:
    """Stamp as another cairn would (a newer one: a higher format)."""
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await check_and_stamp(conn, "test", version=version, store_format=store_format)
    finally:
        await engine.dispose()


async def test_a_new_store_is_stamped_with_this_format_and_version(store_url: str) -> None:
    store = await EventStore.open(store_url)
    await store.close()
    assert await _meta(store_url) == {"format": str(STORE_FORMAT), "written_by": VERSION}


async def test_a_store_from_before_the_stamp_is_stamped_and_read(tmp_path: Path) -> None:
    shutil.copy(UPGRADE_FIXTURE / "events.sqlite3", tmp_path / "events.sqlite3")
    url = default_store_url(tmp_path)
    store = await EventStore.open(url)
    try:
        count, damaged = await store.check()
    finally:
        await store.close()
    assert count > 90 and damaged == []
    assert await _meta(url) == {"format": str(STORE_FORMAT), "written_by": VERSION}


async def test_an_older_format_is_raised_to_this_one(store_url: str) -> None:
    engine = create_async_engine(store_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(meta_table.metadata.create_all)
            await conn.execute(
                meta_table.insert(),
                [{"key": "format", "value": "0"}, {"key": "written_by", "value": "0.0.1"}],
            )
    finally:
        await engine.dispose()
    store = await EventStore.open(store_url)
    await store.close()
    assert await _meta(store_url) == {"format": str(STORE_FORMAT), "written_by": VERSION}


async def test_a_store_stamped_by_a_newer_cairn_is_refused_untouched(store_url: str) -> None:
    store = await EventStore.open(store_url)
    await store.append("counter:1", 0, [Incremented(by=1)])
    await store.close()
    newer = STORE_FORMAT + 1
    await _stamp(store_url, "9.0.0", newer)
    with pytest.raises(StoreTooNew) as refused:
        await EventStore.open(store_url)
    message = str(refused.value)
    assert f"was written by cairn 9.0.0 (store format {newer}); this is cairn {VERSION}" in (
        message
    )
    assert f"which reads store formats up to {STORE_FORMAT}" in message
    assert "Run cairn 9.0.0 or later on it, or, to go back to cairn" in message
    assert "restore the backup taken before the upgrade (cairn store backup FILE" in message
    assert "password" not in message
    assert await _meta(store_url) == {"format": str(newer), "written_by": "9.0.0"}
    # A cairn of that format still opens it and finds its events.
    engine = create_async_engine(store_url)
    try:
        async with engine.connect() as conn:
            count = (await conn.execute(sa.text("SELECT count(*) FROM events"))).scalar()
    finally:
        await engine.dispose()
    assert count == 1


async def test_another_release_of_the_same_format_opens_it_both_ways(store_url: str) -> None:
    await _stamp(store_url, "9.0.0", STORE_FORMAT)
    store = await EventStore.open(store_url)
    await store.append("counter:1", 0, [Incremented(by=1)])
    await store.close()
    # Opened, and the stamp still names the cairn that set the format.
    assert await _meta(store_url) == {"format": str(STORE_FORMAT), "written_by": "9.0.0"}
