"""Benchmark: the outbox relay after a long pause, against the relay's ordinary work.

Issue 30: a relay that wakes with an old cursor must publish nothing the events stream already
holds, whatever the pause. It reads the stream's last message and skips what it holds
(``events/relay.py``) instead of publishing everything again for JetStream's duplicate window to
drop. Measured in one run on one nats-server and one SQLite store:

* baseline: a relay publishing N stored events into an empty stream (the work a relay does
  anyway, publish and acknowledgement of each);
* catch-up: a second relay, cursor 0, started once the duplicate window (1 s here) is over,
  going through the same N events: its time, and how many it published (must be 0).

    .venv/bin/python -m ops.bench.relay_catchup [--n 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from events.jetstream import STREAM, StreamSettings
from events.nats_server import EmbeddedNats
from events.relay import OutboxRelay
from events.store import EventStore, default_store_url

from .events import Ticked

WINDOW = 1.0


async def _until(relay: OutboxRelay, position: int) -> None:
    """Until the relay's cursor reaches ``position`` (it moves once JetStream acknowledged)."""
    deadline = time.monotonic() + 120
    while relay.cursor < position:
        if time.monotonic() > deadline:
            raise SystemExit(f"the relay stopped at position {relay.cursor} of {position}")
        await asyncio.sleep(0.005)


async def one_round(root: Path, n: int) -> tuple[float, float, int]:
    server = EmbeddedNats(root / "nats")
    await server.start()
    store = await EventStore.open(default_store_url(root))
    try:
        for start in range(0, n, 100):
            stream = f"counter:{start // 100}"
            await store.append(stream, 0, [Ticked(i, 0.0) for i in range(start, start + 100)])
        settings = StreamSettings(duplicate_window=WINDOW)
        first_nc, late_nc = await server.connect(), await server.connect()
        first = OutboxRelay(store, first_nc, stream=settings)
        began = time.monotonic()
        await first.start()
        await _until(first, n)
        publish = time.monotonic() - began
        await asyncio.sleep(WINDOW + 0.2)  # past the window: JetStream forgot these ids
        late = OutboxRelay(store, late_nc, name="late", stream=settings)
        began = time.monotonic()
        await late.start()
        await _until(late, n)
        catch_up = time.monotonic() - began
        held = (await first_nc.jetstream().stream_info(STREAM)).state.messages
        await late.stop()
        await first.stop()
        for nc in (first_nc, late_nc):
            await nc.close()
        return publish, catch_up, held - n
    finally:
        await store.close()
        await server.stop()


async def bench(n: int, rounds: int) -> None:
    runs = []
    for i in range(rounds):
        with tempfile.TemporaryDirectory(prefix="cairn-relay-") as tmp:
            runs.append(await one_round(Path(tmp) / str(i), n))
    publish = statistics.median(r[0] for r in runs)
    catch_up = statistics.median(r[1] for r in runs)
    extra = max(r[2] for r in runs)
    print(f"relay, {n} stored events, {rounds} rounds, one nats-server, SQLite store")
    print(
        f"  baseline: publish them into an empty stream   median {publish * 1000:8.1f} ms"
        f"  ({n / publish:,.0f} events/s)"
    )
    print(
        f"  catch-up after a pause past the dup window    median {catch_up * 1000:8.1f} ms"
        f"  ({n / catch_up:,.0f} events/s), ratio {catch_up / publish:.2f}x"
    )
    print(f"  messages published twice by the catch-up: {extra} (target: 0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(bench(args.n, args.rounds))


if __name__ == "__main__":
    main()
