"""Upcasters: each step golden-tested, stored rows of older schema versions read in today's
shape, and rows from a newer cairn refused by name, with a store of each backend."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from events.codec import decode_stored, encode
from events.errors import DamagedEvent
from events.model import REGISTRY, Event, domain_event
from events.stamp import STORE_FORMAT
from events.store import EventStore, events_table
from events.upcast import (
    UPCASTERS,
    DuplicateUpcaster,
    MissingUpcaster,
    SchemaNewerThanCairn,
    missing_steps,
    upcast,
    upcaster,
)
from gateway.server import domain_events

DOMAIN = domain_events()

GOLDEN = Path(__file__).parent / "golden"


# An event whose schema went through two changes: version 1 had `owner` and `limit` as a
# decimal string; version 2 renamed `owner` to `holder`; version 3 keeps the limit in cents.
@domain_event("test.account", version=3)
class Account(Event):
    holder: str
    limit_cents: int


@upcaster("test.account", from_version=1)
def _account_v1_to_v2(fields: dict[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in fields.items() if k != "owner"}
    return {"holder": fields["owner"], **rest}


@upcaster("test.account", from_version=2)
def _account_v2_to_v3(fields: dict[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in fields.items() if k != "limit"}
    return {**rest, "limit_cents": round(float(fields["limit"]) * 100)}


def _golden(type_name: str, from_version: int) -> Path:
    return GOLDEN / "upcast" / f"{type_name}.{from_version}.json"


@pytest.mark.parametrize("step", sorted(UPCASTERS), ids=lambda s: f"{s[0]}.{s[1]}")
def test_every_upcaster_turns_its_golden_input_into_its_golden_output(
    step: tuple[str, int],
) -> None:
    path = _golden(*step)
    assert path.is_file(), f"an upcaster without its golden file {path}"
    golden = json.loads(path.read_text())
    assert UPCASTERS[step](golden["before"]) == golden["after"]


def test_every_golden_file_has_its_upcaster() -> None:
    names = {p.name for p in (GOLDEN / "upcast").glob("*.json")}
    assert names == {_golden(*step).name for step in UPCASTERS}


def test_the_domains_events_have_every_step_from_version_one() -> None:
    domain = {name: cls.schema_version for name, cls in REGISTRY.items() if name in DOMAIN}
    assert domain, "no domain events loaded"
    assert missing_steps(domain) == []
    assert missing_steps({"test.account": 3}) == []
    assert missing_steps({"test.account": 4}) == ["test.account 3 -> 4"]


def test_a_schema_version_change_raises_the_store_format() -> None:
    """The golden list of every domain event's schema version, with the store format they
    belong to: raising a version without raising STORE_FORMAT (events/stamp.py) fails here,
    so an older cairn can never open a store holding events it cannot read."""
    golden = json.loads((GOLDEN / "event_schemas.json").read_text())
    now = {
        name: cls.schema_version
        for name, cls in sorted(REGISTRY.items())
        if name in DOMAIN and cls.schema_version > 1
    }
    if golden["store_format"] == STORE_FORMAT:
        assert now == golden["types"], (
            "an event's schema version changed: raise STORE_FORMAT in events/stamp.py and "
            "update tests/events/golden/event_schemas.json (types above version 1)"
        )
    else:
        assert golden["store_format"] < STORE_FORMAT, "the store format never goes down"
        pytest.fail("update tests/events/golden/event_schemas.json to the new STORE_FORMAT")


def test_steps_apply_in_turn_and_current_rows_are_left_alone() -> None:
    v1 = {"owner": "Ann", "limit": "2.5"}
    assert upcast("test.account", 1, 3, v1) == {"holder": "Ann", "limit_cents": 250}
    assert upcast("test.account", 2, 3, {"holder": "Bo", "limit": "1"}) == {
        "holder": "Bo",
        "limit_cents": 100,
    }
    current = {"holder": "Cy", "limit_cents": 7}
    assert upcast("test.account", 3, 3, current) is current
    assert decode_stored("test.account", 1, json.dumps(v1)) == Account("Ann", 250)
    assert decode_stored("test.account", 3, encode(Account("Cy", 7))) == Account("Cy", 7)


def test_a_newer_schema_and_a_missing_step_are_named() -> None:
    with pytest.raises(SchemaNewerThanCairn, match=r"test\.account of schema version 4 was "):
        decode_stored("test.account", 4, "{}")
    with pytest.raises(MissingUpcaster, match=r"test\.account of schema version 0"):
        decode_stored("test.account", 0, "{}")


def test_a_step_cannot_be_claimed_twice() -> None:
    with pytest.raises(DuplicateUpcaster):
        upcaster("test.account", from_version=1)(_account_v1_to_v2)


async def _insert_raw(url: str, rows: list[tuple[str, int, str, int, dict[str, Any]]]) -> None:
    """Rows as an older (or newer) cairn wrote them: stream, version, type, schema, fields."""
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            for stream, version, type_name, schema, fields in rows:
                await conn.execute(
                    sa.insert(events_table).values(
                        stream=stream,
                        version=version,
                        type=type_name,
                        schema=schema,
                        data=json.dumps(fields),
                        recorded_at=time.time(),
                    )
                )
    finally:
        await engine.dispose()


async def test_stored_rows_of_older_versions_read_in_todays_shape(store_url: str) -> None:
    store = await EventStore.open(store_url)
    try:
        await _insert_raw(
            store_url,
            [
                ("account:1", 1, "test.account", 1, {"owner": "Ann", "limit": "12.50"}),
                ("account:1", 2, "test.account", 2, {"holder": "Ann", "limit": "20"}),
            ],
        )
        await store.append("account:1", 2, [Account("Ann", 3000)])
        events = [r.event for r in await store.read_stream("account:1")]
        assert events == [Account("Ann", 1250), Account("Ann", 2000), Account("Ann", 3000)]
        assert [r.event for r in await store.read_all()] == events
    finally:
        await store.close()


async def test_a_row_from_a_newer_cairn_is_a_damaged_row_naming_both_versions(
    store_url: str,
) -> None:
    store = await EventStore.open(store_url)
    try:
        await _insert_raw(
            store_url,
            [
                ("account:2", 1, "test.account", 3, {"holder": "Ann", "limit_cents": 1}),
                ("account:2", 2, "test.account", 4, {"holder": "Ann", "credit": {"eur": 1}}),
            ],
        )
        with pytest.raises(DamagedEvent) as raised:
            await store.read_stream("account:2")
        assert raised.value.version == 2
        assert "test.account of schema version 4 was written by a newer cairn; this cairn " in (
            raised.value.error
        )
        assert "reads up to version 3: upgrade cairn on this host" in raised.value.error
        page = await store.read_page()
        assert [r.event for r in page.records] == [Account("Ann", 1)]
        assert [d.version for d in page.damaged] == [2]
        count, damaged = await store.check()
        assert (count, [d.stream for d in damaged]) == (2, ["account:2"])
    finally:
        await store.close()
