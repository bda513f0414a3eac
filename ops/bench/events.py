"""Benchmark: from ``EventStore.append`` to a NATS subscriber receiving the event.

Prints the median and p99 latency for single events, sustained events per second for batches,
and, as baselines measured in the same process, a bare NATS publish→subscribe round and a bare
append with no relay, so the cost of each layer is visible.

    .venv/bin/python -m ops.bench.events [--n 2000] [--batch 100] [--batches 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from nats.aio.msg import Msg

from events.bus import connect
from events.model import Event, domain_event
from events.nats_server import EmbeddedNats
from events.relay import OutboxRelay
from events.store import EventStore, default_store_url

from .stats import ms_line


@domain_event("bench.ticked")
class Ticked(Event):
    n: int
    sent_at: float


def fmt_ms(values: list[float]) -> str:
    return ms_line(values, "7.3f")


async def bench(n: int, batch: int, batches: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with EmbeddedNats(root / "nats") as server:
            nc = await connect(server.url)
            store = await EventStore.open(default_store_url(root))
            relay = OutboxRelay(store, nc)
            await relay.start()

            arrivals: asyncio.Queue[float] = asyncio.Queue()

            async def on_msg(_: Msg) -> None:
                arrivals.put_nowait(time.perf_counter())

            sub = await nc.subscribe("cairn.evt.>", cb=on_msg)
            raw_sub = await nc.subscribe("bench.raw", cb=on_msg)
            await nc.flush()

            # Baseline 1: bare NATS, publish to subscriber on the same connection.
            raw = []
            for i in range(n):
                t0 = time.perf_counter()
                await nc.publish("bench.raw", json.dumps({"n": i}).encode())
                raw.append(await arrivals.get() - t0)

            # Baseline 2: the append alone, on a second store file nobody relays.
            bare_store = await EventStore.open(default_store_url(root / "bare"))
            bare = []
            for i in range(n):
                t0 = time.perf_counter()
                await bare_store.append(f"bare:{i % 50}", i // 50, [Ticked(i, t0)])
                bare.append(time.perf_counter() - t0)
            await bare_store.close()

            # Append to subscriber, single events.
            single = []
            for i in range(n):
                t0 = time.perf_counter()
                await store.append(f"bench:{i % 50}", i // 50, [Ticked(i, t0)])
                single.append(await arrivals.get() - t0)

            # Sustained: batches appended back to back; time until the last one arrives.
            t0 = time.perf_counter()
            for b in range(batches):
                events = [Ticked(b * batch + k, 0.0) for k in range(batch)]
                await store.append(f"bench:batch{b % 10}", (b // 10) * batch, events)
            for _ in range(batch * batches):
                await arrivals.get()
            sustained = batch * batches / (time.perf_counter() - t0)

            await sub.unsubscribe()
            await raw_sub.unsubscribe()
            await relay.stop()
            await store.close()
            await nc.close()

    print(f"events bench ({n} single events, {batches} batches of {batch})")
    print(f"  bare NATS publish→subscribe      {fmt_ms(raw)}")
    print(f"  bare append (SQLite commit)      {fmt_ms(bare)}")
    print(f"  append→subscriber, single event  {fmt_ms(single)}")
    ratio = statistics.median(single) / statistics.median(bare)
    print(f"    ratio to the bare append: {ratio:.2f}x   (target: median <= 2 ms)")
    print(f"  sustained, batches of {batch}: {sustained:,.0f} events/s   (target: >= 5,000/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(bench(args.n, args.batch, args.batches))


if __name__ == "__main__":
    main()
