"""The event store on a real SQLite file: append, conflict, replay, global order."""

from __future__ import annotations

import asyncio

import pytest

from events.store import ConcurrencyConflict, EventStore
from events.subjects import split_stream, stream_name, subject_for
from tests.events.sample_events import Incremented, Noted


async def test_append_assigns_stream_versions_and_global_positions(store: EventStore) -> None:
    first = await store.append("counter:a", 0, [Incremented(1), Incremented(2)])
    second = await store.append("counter:b", 0, [Noted("hello")])
    third = await store.append("counter:a", 2, [Incremented(3)])
    assert [(r.stream, r.version) for r in first + second + third] == [
        ("counter:a", 1),
        ("counter:a", 2),
        ("counter:b", 1),
        ("counter:a", 3),
    ]
    positions = [r.position for r in first + second + third]
    assert positions == sorted(positions) and len(set(positions)) == 4


async def test_read_stream_replays_in_version_order(store: EventStore) -> None:
    await store.append("counter:a", 0, [Incremented(1)])
    await store.append("counter:other", 0, [Incremented(100)])
    await store.append("counter:a", 1, [Incremented(2), Noted("x", tags=("t",))])
    replay = await store.read_stream("counter:a")
    assert [r.event for r in replay] == [Incremented(1), Incremented(2), Noted("x", tags=("t",))]
    assert [r.version for r in await store.read_stream("counter:a", after_version=2)] == [3]


async def test_stale_expected_version_is_a_conflict_and_writes_nothing(store: EventStore) -> None:
    await store.append("counter:a", 0, [Incremented(1)])
    with pytest.raises(ConcurrencyConflict, match="at version 1, not 0") as info:
        await store.append("counter:a", 0, [Incremented(5), Incremented(6)])
    assert (info.value.expected, info.value.actual) == (0, 1)
    assert [r.event for r in await store.read_stream("counter:a")] == [Incremented(1)]


async def test_two_writers_racing_one_wins(store: EventStore) -> None:
    results = await asyncio.gather(
        *(store.append("counter:race", 0, [Incremented(i)]) for i in range(5)),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(r, ConcurrencyConflict) for r in results if r not in winners)
    assert len(await store.read_stream("counter:race")) == 1


async def test_conflict_across_two_store_instances_on_one_database(store_url: str) -> None:
    url = store_url
    one, two = await EventStore.open(url), await EventStore.open(url)
    try:
        await one.append("counter:x", 0, [Incremented(1)])
        with pytest.raises(ConcurrencyConflict):
            await two.append("counter:x", 0, [Incremented(2)])
    finally:
        await one.close()
        await two.close()


async def test_read_all_is_global_order_from_a_position(store: EventStore) -> None:
    for i in range(5):
        await store.append(f"counter:{i % 2}", i // 2, [Incremented(i)])
    everything = await store.read_all()
    assert [r.event for r in everything] == [Incremented(i) for i in range(5)]
    tail = await store.read_all(after_position=everything[2].position, limit=1)
    assert [r.event for r in tail] == [Incremented(3)]


async def test_events_survive_reopening_the_database(store_url: str) -> None:
    url = store_url
    s = await EventStore.open(url)
    await s.append("counter:a", 0, [Noted('tricky "text"\n', extra={"n": 1})])
    await s.close()
    s = await EventStore.open(url)
    try:
        assert [r.event for r in await s.read_stream("counter:a")] == [
            Noted('tricky "text"\n', extra={"n": 1})
        ]
        assert await s.stream_version("counter:a") == 1
    finally:
        await s.close()


async def test_stream_names_by_prefix_treats_wildcards_literally(store: EventStore) -> None:
    await store.append("vm:101", 0, [Incremented(1)])
    await store.append("vm:100", 0, [Incremented(1)])
    await store.append("vmx:1", 0, [Incremented(1)])
    await store.append("v_:1", 0, [Incremented(1)])
    assert await store.stream_names("vm:") == ["vm:101", "vm:100"]
    assert await store.stream_names("v_:") == ["v_:1"]


async def test_cursor_is_saved_and_loaded(store: EventStore) -> None:
    assert await store.load_cursor("relay") == 0
    await store.save_cursor("relay", 7)
    await store.save_cursor("relay", 9)
    assert await store.load_cursor("relay") == 9


def test_subjects_escape_ids_into_one_token() -> None:
    assert stream_name("vm", 120) == "vm:120"
    assert split_stream("fn:a/b.c") == ("fn", "a/b.c")
    assert subject_for("vm:120") == "cairn.evt.vm.120"
    assert subject_for("fn:a/b.c *>") == "cairn.evt.fn.a~2Fb~2Ec~20~2A~3E"
    with pytest.raises(ValueError):
        stream_name("bad.aggregate", 1)


async def test_a_writer_with_a_remembered_version_still_meets_a_conflict(store_url: str) -> None:
    """The store skips re-reading versions it wrote itself; the unique key must then catch a
    writer in another process that appended in between."""
    url = store_url
    one, two = await EventStore.open(url), await EventStore.open(url)
    try:
        await one.append("counter:x", 0, [Incremented(1)])
        await two.append("counter:x", 1, [Incremented(2), Incremented(3)])
        with pytest.raises(ConcurrencyConflict) as info:
            await one.append("counter:x", 1, [Incremented(9)])
        assert info.value.actual == 3
        assert [r.event.by for r in await one.read_stream("counter:x")] == [1, 2, 3]  # type: ignore[attr-defined]
        await one.append("counter:x", 3, [Incremented(4)])
    finally:
        await one.close()
        await two.close()


async def test_positions_returned_by_a_batch_are_the_stored_ones(store: EventStore) -> None:
    await store.append("counter:a", 0, [Incremented(0)])
    batch = await store.append("counter:b", 0, [Incremented(i) for i in range(1, 51)])
    await store.append("counter:a", 1, [Incremented(99)])
    stored = {(r.stream, r.version): r.position for r in await store.read_all()}
    assert [r.position for r in batch] == [stored[("counter:b", v)] for v in range(1, 51)]
    assert [r.event for r in await store.read_all(after_position=batch[0].position - 1)][:2] == [
        Incremented(1),
        Incremented(2),
    ]
