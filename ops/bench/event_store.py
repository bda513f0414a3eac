"""Benchmark: the event store's appends and reads, against the store of an earlier revision.

The store reads each row's schema version and upcasts older rows (events/upcast.py), and
stamps its format at open (events/stamp.py). This measures what that costs on the hot paths,
with the earlier ``events/store.py`` (``--baseline``, read from git; the codec and everything
else are today's) on its own SQLite file, alternating rounds in one process:

* append: one event per ``append`` call, awaited, to 200 streams in turn;
* read_stream: one stream of 10 events, read whole (an actor's replay);
* read_all: pages of 1,000 events in global order (the relay, ``cairn store check``).

    .venv/bin/python -m ops.bench.event_store [--rounds 5] [--n 2000] [--baseline REV]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from events.model import Event, domain_event
from events.store import EventStore, default_store_url

from .stats import median_p99

# The last commit before the schema read and the stamp.
BASELINE = "8da9577"


@domain_event("bench.store_noted")
class Noted(Event):
    text: str
    n: int


def baseline_store(rev: str) -> Any:
    source = subprocess.run(
        ["git", "show", f"{rev}:events/store.py"], capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType("events._baseline_store")
    module.__file__ = f"<{rev}:events/store.py>"
    sys.modules[module.__name__] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module.EventStore


async def appends(store_class: Any, root: Path, n: int) -> list[float]:
    """``n`` single-event appends to 200 streams in turn, each awaited."""
    store = await store_class.open(default_store_url(root))
    times: list[float] = []
    try:
        versions: dict[str, int] = {}
        for i in range(n):
            stream = f"bench:{i % 200}"
            event = Noted(f"event {i} of the benchmark, a line of text", i)
            started = time.perf_counter()
            await store.append(stream, versions.get(stream, 0), [event])
            times.append(time.perf_counter() - started)
            versions[stream] = versions.get(stream, 0) + 1
    finally:
        await store.close()
    return times


async def reads(stores: dict[str, Any], samples: dict[str, dict[str, list[float]]]) -> None:
    """The same reads of one file by each store, alternating sample by sample."""

    async def timed(label: str, what: str, read: Any) -> Any:
        started = time.perf_counter()
        got = await read
        samples[label].setdefault(what, []).append(time.perf_counter() - started)
        return got

    for i in range(200):
        for label, store in stores.items():
            await timed(label, "read_stream", store.read_stream(f"bench:{i}"))
    for _ in range(10):
        for label, store in stores.items():
            after = 0
            while page := await timed(label, "read_all", store.read_all(after, 1000)):
                after = page[-1].position


async def main(rounds: int, n: int, rev: str) -> None:
    old = baseline_store(rev)
    samples: dict[str, dict[str, list[float]]] = {"now": {}, "baseline": {}}
    with tempfile.TemporaryDirectory(prefix="cairn-bench-store-") as tmp:
        for r in range(rounds):
            order = (("baseline", old), ("now", EventStore))[:: 1 if r % 2 else -1]
            for label, cls in order:
                times = await appends(cls, Path(tmp) / f"{label}-{r}", n)
                samples[label].setdefault("append", []).extend(times)
            url = default_store_url(Path(tmp) / f"now-{r}")
            opened = {label: await cls.open(url) for label, cls in order}
            try:
                await reads(opened, samples)
            finally:
                for store in opened.values():
                    await store.close()
    print(
        f"event store on SQLite, {rounds} rounds of {n} appends (200 streams) to a file of "
        f"each store's own, then 200 stream reads and 10 passes of read_all (pages of 1,000) "
        f"of one file by both stores in turn: today's store against {rev}'s"
    )
    for what in ("append", "read_stream", "read_all"):
        now_med, now_p99 = median_p99(samples["now"][what])
        old_med, old_p99 = median_p99(samples["baseline"][what])
        print(
            f"  {what:<12} now median {now_med * 1e3:.3f} ms (p99 {now_p99 * 1e3:.3f})   "
            f"baseline {old_med * 1e3:.3f} ms (p99 {old_p99 * 1e3:.3f})   "
            f"ratio {now_med / old_med:.2f}x"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--baseline", default=BASELINE)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.n, args.baseline))
