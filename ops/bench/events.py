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
``--replicas 3``, on a local three-server cluster (``tests.nats_cluster``).

Each run is made twice in the same process: on an open bus (no keys, no TLS, no signatures:
cairn before issue 26) and on the closed bus cairn runs on (role nkeys and permissions, events
signed and checked, an account per role, readers' consumers made by a host and delivered
across accounts; with ``--replicas 3`` also TLS to clients and between servers), so the price
of security is a ratio of the same hour's figures.

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
import attrs
from aiohttp import web
from nats.aio.client import Client
from nats.aio.msg import Msg

from events.access import NatsAccess
from events.consumers import ConsumerBroker
from events.follow import Follower
from events.jetstream import StreamSettings
from events.model import Event, domain_event
from events.nats_server import EmbeddedNats, free_port
from events.permissions import Role
from events.relay import OutboxRelay, wire_payload
from events.signing import EventSigner
from events.store import EventStore, Recorded, default_store_url
from events.subjects import subject_for
from gateway.console.feed import EventFeed
from tests.nats_cluster import NatsCluster

from .stats import ms_line


@domain_event("bench.ticked")
class Ticked(Event):
    n: int
    sent_at: float


def fmt_ms(values: list[float]) -> str:
    return ms_line(values, "7.3f")


@contextlib.asynccontextmanager
async def nats_access(root: Path, replicas: int, secure: bool) -> AsyncIterator[NatsAccess]:
    """How a cairn host reaches the bus: closed (``secure``) as cairn runs it, or open."""
    if replicas == 1:
        async with EmbeddedNats(root / "nats", secure=secure) as server:
            yield NatsAccess(server.url, server.keyring)
    else:
        async with NatsCluster(root / "cluster", replicas, secure=secure) as cluster:
            yield cluster.access


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


async def through_sse(
    store: EventStore, nc: Client, n: int, signer: EventSigner | None, name: str = "sse"
) -> list[float]:
    """Append → relay → JetStream → the console's event feed (``gateway/console/feed.py``,
    a real aiohttp server) → an HTTP client reading its SSE stream: what a browser, or a
    gateway on another host than the writer, sees."""
    app = web.Application()
    app.router.add_get("/console/events", EventFeed(nc, store, signer).stream)
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
                await store.append(f"{name}:{i % 50}", i // 50, [Ticked(i, t0)])
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
                subject = "cairn.evt.benchcore." + subject_for(record.stream)
                await nc.publish(subject, wire_payload(record))
            await nc.flush()

    store.add_listener(on_append)
    asyncio.get_running_loop().create_task(run())


async def bench(n: int, batch: int, batches: int, replicas: int, secure: bool) -> Figures:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with nats_access(root, replicas, secure) as access:
            # The relay on the host role's connection, followers on the gateway's, as in cairn.
            nc = await access.connect(Role.HOST)
            reader = await access.connect(Role.GATEWAY)
            signer = access.signer()
            store = await EventStore.open(default_store_url(root))

            arrivals: asyncio.Queue[float] = asyncio.Queue()

            async def on_msg(_: Msg) -> None:
                arrivals.put_nowait(time.perf_counter())

            async def on_event(_: int, __: Msg) -> None:
                arrivals.put_nowait(time.perf_counter())

            # Subjects a host may use; no stream takes them yet (the relay makes it below).
            raw_sub = await nc.subscribe("cairn.evt.benchraw", cb=on_msg)
            core_sub = await nc.subscribe("cairn.evt.benchcore.>", cb=on_msg)
            await nc.flush()

            # Baseline 1: bare NATS, publish to subscriber on the same connection.
            raw = []
            for i in range(n):
                t0 = time.perf_counter()
                await nc.publish("cairn.evt.benchraw", json.dumps({"n": i}).encode())
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
            relay = OutboxRelay(store, nc, stream=StreamSettings(replicas=replicas), signer=signer)
            await relay.start()
            # A reader's consumers are made by a host (events/consumers.py), as in cairn.
            broker = await ConsumerBroker(nc).start()

            async def following(via: Client, name: str) -> tuple[list[float], float, list[float]]:
                """append → relay → JetStream → a follower on ``via``, then → SSE."""
                follower = await Follower(
                    via, f"cairn.evt.{name}.>", on_event, signer=signer
                ).start()
                try:
                    latencies = await single(store, name, arrivals, n // 2)
                    rate = await batched(store, name, arrivals, batch, batches // 2)
                finally:
                    await follower.stop()
                return latencies, rate, await through_sse(store, via, n // 2, signer, name + "sse")

            # After: the gateway's follower (its consumer delivers across accounts), and, in
            # turns so that the machine's load weighs on both alike, a follower in the hosts'
            # own account: the path before each role had an account of its own.
            after: list[float] = []
            sse: list[float] = []
            rates: list[float] = []
            same: list[float] = []
            same_sse: list[float] = []
            same_rates: list[float] = []
            # Each goes first once: what runs later meets a bigger store.
            for turn, order in ((1, (reader, nc)), (2, (nc, reader))):
                for via in order:
                    name = f"bench{turn}" if via is reader else f"benchhost{turn}"
                    latencies, rate, through = await following(via, name)
                    mine = (after, rates, sse) if via is reader else (same, same_rates, same_sse)
                    mine[0].extend(latencies)
                    mine[1].append(rate)
                    mine[2].extend(through)
            after_rate = statistics.mean(rates)

            await raw_sub.unsubscribe()
            await broker.stop()
            await relay.stop()
            await store.close()
            await reader.close()
            await nc.close()
    return Figures(
        raw,
        bare,
        before,
        after,
        sse,
        before_rate,
        after_rate,
        same,
        same_sse,
        statistics.mean(same_rates),
    )


@attrs.frozen
class Figures:
    raw: list[float]
    bare: list[float]
    before: list[float]
    after: list[float]
    sse: list[float]
    before_rate: float
    after_rate: float
    # The same path with the follower in the hosts' account (no account crossing).
    same: list[float]
    same_sse: list[float]
    same_rate: float


def report(f: Figures, title: str, batch: int) -> None:
    print(f"  {title}")
    print(f"    bare NATS publish→subscribe             {fmt_ms(f.raw)}")
    print(f"    bare append (SQLite commit)             {fmt_ms(f.bare)}")
    print(f"    before: append→core NATS subscriber     {fmt_ms(f.before)}")
    print(f"    after:  append→JetStream follower       {fmt_ms(f.after)}")
    print(f"    after:  append→SSE client (feed, HTTP)  {fmt_ms(f.sse)}   (target: median <= 2 ms)")
    ratio = statistics.median(f.after) / statistics.median(f.before)
    print(f"      ratio after/before: {ratio:.2f}x")
    print(f"    batches of {batch}, before: {f.before_rate:,.0f} events/s")
    print(f"    batches of {batch}, after:  {f.after_rate:,.0f} events/s   (target: >= 5,000/s)")
    print("    a reader in the hosts' account (no account crossing, as before per-role accounts):")
    print(f"      append→JetStream follower           {fmt_ms(f.same)}")
    print(f"      append→SSE client (feed, HTTP)      {fmt_ms(f.same_sse)}")
    print(f"      batches of {batch}:                 {f.same_rate:,.0f} events/s")
    sse = statistics.median(f.sse) / statistics.median(f.same_sse)
    rate = f.after_rate / f.same_rate
    print(f"      a reader's own account: SSE median x{sse:.2f}, batched x{rate:.2f}")


async def compare(n: int, batch: int, batches: int, replicas: int) -> None:
    """The open bus, then the closed one, in this process."""
    open_bus = await bench(n, batch, batches, replicas, secure=False)
    closed = await bench(n, batch, batches, replicas, secure=True)
    print(
        f"events bench ({n} single events, {batches} batches of {batch}, "
        f"{replicas} replica{'s' if replicas > 1 else ''})"
    )
    report(open_bus, "open bus (no keys, no TLS, unsigned: the baseline)", batch)
    what = "role nkeys, permissions, signed events" + (", TLS" if replicas > 1 else "")
    report(closed, f"closed bus ({what}): as cairn runs", batch)
    sse = statistics.median(closed.sse) / statistics.median(open_bus.sse)
    rate = closed.after_rate / open_bus.after_rate
    print(f"  price of security: SSE median x{sse:.2f}, batched rate x{rate:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--replicas", type=int, default=1, choices=(1, 3))
    args = parser.parse_args()
    asyncio.run(compare(args.n, args.batch, args.batches, args.replicas))


if __name__ == "__main__":
    main()
