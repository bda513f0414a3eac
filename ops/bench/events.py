"""Benchmark: from ``EventStore.append`` to a subscriber receiving the event.

The path measured is the one SSE clients, the console feed and image purges take: the outbox
relay publishes into JetStream (async publishes, a batch's acks in flight at once, a
``Nats-Msg-Id`` on each) and a JetStream follower (``events.follow``) receives. Baselines
measured in the same process: a bare core-NATS publish→subscribe, a bare append with no relay,
and the path before JetStream (a store listener publishing on core NATS and flushing, as the
relay did, to a core subscriber), so the cost of each layer is visible.

The last figure goes on to an HTTP client: the console's event feed (a real aiohttp server)
follows JetStream and writes each event to its SSE stream, as a gateway on another host than
the writer does.

Prints median and p99 for single events and events per second for batches appended back to
back (time until the last one arrives), with the embedded server (1 replica) and, with
``--replicas 3``, on a local three-server cluster (``events.nats_cluster``).

    .venv/bin/python -m ops.bench.events [--n 2000] [--batch 100] [--batches 200] [--replicas 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp import web
from nats.aio.client import Client
from nats.aio.msg import Msg

from events.bus import connect
from events.follow import Follower
from events.jetstream import StreamSettings
from events.model import Event, domain_event
from events.nats_cluster import NatsCluster
from events.nats_server import EmbeddedNats, free_port
from events.relay import OutboxRelay, wire_payload
from events.store import EventStore, Recorded, default_store_url
from events.subjects import subject_for
from gateway.console.feed import EventFeed

from .stats import ms_line


@domain_event("bench.ticked")
class Ticked(Event):
    n: int
    sent_at: float


def fmt_ms(values: list[float]) -> str:
    return ms_line(values, "7.3f")


@contextlib.asynccontextmanager
async def nats_url(root: Path, replicas: int) -> AsyncIterator[str]:
    if replicas == 1:
        async with EmbeddedNats(root / "nats") as server:
            yield server.url
    else:
        async with NatsCluster(root / "cluster", replicas) as cluster:
            yield cluster.url


async def single(
    store: EventStore, stream: str, arrivals: asyncio.Queue[float], n: int
) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        await store.append(f"{stream}:{i % 50}", i // 50, [Ticked(i, t0)])
        out.append(await arrivals.get() - t0)
    return out


async def batched(
    store: EventStore, stream: str, arrivals: asyncio.Queue[float], batch: int, batches: int
) -> float:
    t0 = time.perf_counter()
    for b in range(batches):
        events = [Ticked(b * batch + k, 0.0) for k in range(batch)]
        await store.append(f"{stream}:batch{b % 10}", (b // 10) * batch, events)
    for _ in range(batch * batches):
        await arrivals.get()
    return batch * batches / (time.perf_counter() - t0)


async def through_sse(store: EventStore, nc: Client, n: int) -> list[float]:
    """Append → relay → JetStream → the console's event feed (``gateway/console/feed.py``,
    a real aiohttp server) → an HTTP client reading its SSE stream: what a browser, or a
    gateway on another host than the writer, sees."""
    app = web.Application()
    app.router.add_get("/console/events", EventFeed(nc, store).stream)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    out = []
    try:
        headers = {"Last-Event-ID": str(await store.last_position())}
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/console/events", headers=headers) as resp,
        ):
            for i in range(n):
                t0 = time.perf_counter()
                await store.append(f"sse:{i % 50}", i // 50, [Ticked(i, t0)])
                while not (await resp.content.readline()).startswith(b"data: "):
                    pass
                out.append(time.perf_counter() - t0)
    finally:
        await runner.cleanup()
    return out


def core_relay(store: EventStore, nc: Client) -> None:
    """The path before JetStream, as a baseline: each append published on core NATS and
    flushed (the relay's old round), without its cursor bookkeeping."""
    pending: list[Recorded] = []
    wake = asyncio.Event()

    def on_append(records: list[Recorded]) -> None:
        if records and records[0].stream.startswith("core"):
            pending.extend(records)
            wake.set()

    async def run() -> None:
        while True:
            await wake.wait()
            wake.clear()
            batch, pending[:] = list(pending), []
            for record in batch:
                await nc.publish("bench.core." + subject_for(record.stream), wire_payload(record))
            await nc.flush()

    store.add_listener(on_append)
    asyncio.get_running_loop().create_task(run())


async def bench(n: int, batch: int, batches: int, replicas: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with nats_url(root, replicas) as url:
            nc = await connect(url)
            store = await EventStore.open(default_store_url(root))

            arrivals: asyncio.Queue[float] = asyncio.Queue()

            async def on_msg(_: Msg) -> None:
                arrivals.put_nowait(time.perf_counter())

            async def on_event(_: int, __: Msg) -> None:
                arrivals.put_nowait(time.perf_counter())

            raw_sub = await nc.subscribe("bench.raw", cb=on_msg)
            core_sub = await nc.subscribe("bench.core.>", cb=on_msg)
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

            # Before: core NATS, no JetStream, no relay yet.
            core_relay(store, nc)
            before = await single(store, "core", arrivals, n)
            before_rate = await batched(store, "core", arrivals, batch, batches)
            await core_sub.unsubscribe()

            # The relay starts after what "before" stored, which nobody follows.
            await store.save_cursor("outbox", await store.last_position())
            relay = OutboxRelay(store, nc, stream=StreamSettings(replicas=replicas))
            await relay.start()
            follower = await Follower(nc, "cairn.evt.bench.>", on_event).start()

            # After: append → relay → JetStream → follower.
            after = await single(store, "bench", arrivals, n)
            after_rate = await batched(store, "bench", arrivals, batch, batches)

            sse = await through_sse(store, nc, n)

            await raw_sub.unsubscribe()
            await follower.stop()
            await relay.stop()
            await store.close()
            await nc.close()

    print(
        f"events bench ({n} single events, {batches} batches of {batch}, "
        f"{replicas} replica{'s' if replicas > 1 else ''})"
    )
    print(f"  bare NATS publish→subscribe             {fmt_ms(raw)}")
    print(f"  bare append (SQLite commit)             {fmt_ms(bare)}")
    print(f"  before: append→core NATS subscriber     {fmt_ms(before)}")
    print(f"  after:  append→JetStream follower       {fmt_ms(after)}")
    print(f"  after:  append→SSE client (feed, HTTP)  {fmt_ms(sse)}   (target: median <= 2 ms)")
    ratio = statistics.median(after) / statistics.median(before)
    print(f"    ratio after/before: {ratio:.2f}x")
    print(f"  batches of {batch}, before: {before_rate:,.0f} events/s")
    print(f"  batches of {batch}, after:  {after_rate:,.0f} events/s   (target: >= 5,000/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--replicas", type=int, default=1, choices=(1, 3))
    args = parser.parse_args()
    asyncio.run(bench(args.n, args.batch, args.batches, args.replicas))


if __name__ == "__main__":
    main()
