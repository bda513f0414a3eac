"""The relay publishes into JetStream, and never stores an event twice: not after a relay is
killed between a publish and its cursor write, not with two relays on one store."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from nats.aio.client import Client
from nats.js.api import StorageType

from events.jetstream import DUPLICATE_WINDOW, STREAM, StreamSettings
from events.nats_server import EmbeddedNats
from events.relay import OutboxRelay
from events.store import EventStore, default_store_url
from tests.conftest import wait_for
from tests.events.sample_events import Incremented

REPO = Path(__file__).resolve().parents[2]

# A relay that never writes its cursor after the first batch, appending while it publishes:
# killed at any moment, whatever it published since is published again by its successor.
_RELAY_PROCESS = """
import asyncio, sys
from pathlib import Path
from events.access import NatsAccess
from events.credentials import Keyring
from events.permissions import Role
from events.relay import OutboxRelay
from events.store import EventStore
from tests.events.sample_events import Incremented

async def main(url, nats_url, keys, total):
    store = await EventStore.open(url)
    nc = await NatsAccess(nats_url, Keyring(Path(keys))).connect(Role.HOST)
    relay = OutboxRelay(store, nc, cursor_save_interval=3600, batch_size=50)
    await relay.start()
    for i in range(0, total, 20):
        await store.append(f"counter:{i % 7}", await store.stream_version(f"counter:{i % 7}"),
                           [Incremented(k) for k in range(i, i + 20)])
    await asyncio.Event().wait()

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


async def stream_messages(js_nc: Client) -> list[dict[str, object]]:
    """Every message in the events stream, in stream order."""
    js = js_nc.jetstream()
    info = await js.stream_info(STREAM)
    out = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg(STREAM, seq)
        assert msg.data is not None
        out.append(json.loads(msg.data))
    return out


async def stored_count(nc: Client) -> int:
    return (await nc.jetstream().stream_info(STREAM)).state.messages


async def test_the_stream_is_file_backed_with_an_explicit_duplicate_window(
    store: EventStore, nc: Client
) -> None:
    relay = OutboxRelay(store, nc, stream=StreamSettings(replicas=1, max_age=3600))
    await relay.start()
    try:
        info = await nc.jetstream().stream_info(STREAM)
        assert info.config.storage == StorageType.FILE
        assert info.config.num_replicas == 1
        assert info.config.duplicate_window == DUPLICATE_WINDOW
        assert info.config.subjects == ["cairn.evt.>"]
    finally:
        await relay.stop()
    # A second start with other settings updates the stream instead of failing.
    relay = OutboxRelay(store, nc, stream=StreamSettings(replicas=1, max_age=7200))
    await relay.start()
    await relay.stop()
    assert (await nc.jetstream().stream_info(STREAM)).config.max_age == 7200


async def test_a_relay_killed_before_its_cursor_write_publishes_nothing_twice(
    tmp_path: Path, nats_server: EmbeddedNats, nc: Client
) -> None:
    url = default_store_url(tmp_path / "store")
    (tmp_path / "store").mkdir()
    total = 2000
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _RELAY_PROCESS, url, nats_server.url,
        nats_server.client_env()["NATS_KEYS"], str(total), cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        await wait_for(
            lambda: _has_streamed(nc, total // 2), timeout=30, what="half the events published"
        )
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()

    store = await EventStore.open(url)
    try:
        published = await stored_count(nc)
        saved = await store.load_cursor("outbox")
        assert saved < published  # killed between publishes and their cursor write

        successor = OutboxRelay(store, nc)
        await successor.start()
        last = await store.last_position()
        await wait_for(lambda: successor.cursor == last, what="the successor caught up")
        await successor.stop()

        messages = await stream_messages(nc)
        keys = [(m["stream"], m["version"]) for m in messages]
        assert len(keys) == last  # every committed event, once
        assert len(set(keys)) == last
        assert [m["position"] for m in messages] == list(range(1, last + 1))
    finally:
        await store.close()


async def _has_streamed(nc: Client, at_least: int) -> bool:
    try:
        return await stored_count(nc) >= at_least
    except Exception:  # the stream is created by the relay process a moment after it starts
        return False


async def test_two_relays_on_one_store_publish_each_event_once(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    url = default_store_url(tmp_path)
    first_store, second_store = await EventStore.open(url), await EventStore.open(url)
    first_nc, second_nc = await nats_server.connect(), await nats_server.connect()
    relays = [OutboxRelay(first_store, first_nc), OutboxRelay(second_store, second_nc)]
    try:
        await first_store.append("counter:a", 0, [Incremented(i) for i in range(100)])
        for relay in relays:
            await relay.start()  # both catch up from the same saved cursor
        # Then both go on publishing live appends, each made through either store.
        for i in range(50):
            store = first_store if i % 2 else second_store
            await store.append("counter:b", i, [Incremented(i)])
        # One more through each store, so each relay hears of the end.
        await first_store.append("counter:a", 100, [Incremented(100)])
        await second_store.append("counter:c", 0, [Incremented(0)])
        last = await first_store.last_position()
        await wait_for(
            lambda: all(r.cursor == last for r in relays), what="both relays published all"
        )
        messages = await stream_messages(first_nc)
        keys = [(m["stream"], m["version"]) for m in messages]
        assert len(keys) == last == 152
        assert len(set(keys)) == last
        positions = [int(str(m["position"])) for m in messages]
        assert positions == sorted(positions)  # the store's order
    finally:
        for relay in relays:
            await relay.stop()
        for client in (first_nc, second_nc):
            await client.close()
        await first_store.close()
        await second_store.close()


async def test_a_relay_back_after_the_duplicate_window_publishes_nothing_again(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    """A host paused for longer than JetStream's duplicate window wakes with an old cursor: its
    relay must find what the stream holds, not lean on the window (issue 30: 245 messages for
    133 events, versions out of order)."""
    url = default_store_url(tmp_path)
    first_store, late_store = await EventStore.open(url), await EventStore.open(url)
    first_nc, late_nc = await nats_server.connect(), await nats_server.connect()
    short = StreamSettings(duplicate_window=1.0)
    first = OutboxRelay(first_store, first_nc, stream=short)
    late = OutboxRelay(late_store, late_nc, name="paused", stream=short)  # its cursor: 0
    try:
        await first.start()
        for i in range(30):
            await first_store.append(f"counter:{i % 4}", i // 4, [Incremented(i)])
        await wait_for(lambda: first.cursor == 30, what="the first relay published all")
        # Longer than the duplicate window: JetStream no longer knows these ids.
        await asyncio.sleep(short.duplicate_window + 0.5)
        await late.start()
        await wait_for(lambda: late.cursor == 30, what="the late relay caught up")
        assert late.skipped == 30
        # Both go on: each append published once, in order, whichever relay gets there.
        for i in range(30, 60):
            store = first_store if i % 2 else late_store
            await store.append(f"counter:{i % 4}", i // 4, [Incremented(i)])
        await wait_for(lambda: first.cursor == late.cursor == 60, what="both relays published all")
        messages = await stream_messages(first_nc)
        assert [m["position"] for m in messages] == list(range(1, 61))
    finally:
        for relay in (first, late):
            await relay.stop()
        for client in (first_nc, late_nc):
            await client.close()
        await first_store.close()
        await late_store.close()
