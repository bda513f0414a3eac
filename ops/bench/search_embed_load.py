"""Document embedding while the machine is busy: chunks/s of the local model with and without a
process that keeps one core busy, and the latency of query embeddings meanwhile.

Run: .venv/bin/python -m ops.bench.search_embed_load [--rounds N] [--chunks N]

What it measures, in this one process: this repository's docs cut by the service's chunker
(real prose, ~600 characters, ~1.9 windows a chunk), embedded in calls of `EMBED_BATCH` chunks
as the indexer makes them, by `LocalProvider` on its low-priority threads (one per core, nice
+10), with ONNX Runtime float32 (the baseline: the previous default, `EMBEDDING_RUNTIME=onnx`)
and with int8 weights (`onnx-int8`, the default where OpenVINO's bfloat16 is not used).
The hog is one busy loop in a child process at the default priority (nice 0), started for the
hog rounds and stopped for the `idle` ones, in two places: `hog` is in this process's session,
so the embedder's nice +10 counts against it as it counts against the service's own threads
(the worst case); `hog-apart` is in a session of its own, as another service, a VM or a user's
job is for a cairn run by systemd: with the kernel's autogroups (or cgroups) the scheduler then
shares the CPU between the two groups first, and nice only orders the threads within cairn's.
While each configuration embeds, a thread at the service's priority embeds one uncached query
every 100 ms, as the service does for a semantic query: its latency is printed per
configuration (query latency must not suffer from what helps throughput).

The machine is shared: configurations and scenarios are interleaved round by round (baseline,
then the candidates, hog then idle, each round), medians over rounds are printed with each
candidate's ratio to the baseline of the same rounds, and the load average is printed with
every round. Targets (issue 28): >= 40 chunks/s with the hog, >= 70 idle, ONNX float32.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from actors.search.chunker import chunk_text
from actors.search.embedding import LocalProvider
from actors.search.engine import EMBED_BATCH

from .stats import ms_line

ROOT = Path(__file__).parents[2]
QUERIES = [
    "how do I restore the event store from a backup",
    "which port does the search service listen on",
    "what happens when the disk is full during an install",
    "rotate the keys of the cluster",
    "functions written in typescript",
    "why is the console showing a sign in page",
]


def doc_chunks(count: int) -> list[str]:
    chunks: list[str] = []
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        chunks.extend(chunk_text(path.read_text()))
    while len(chunks) < count:
        chunks += chunks
    return chunks[:count]


class QueryProbe:
    """Embeds an uncached query every 100 ms on a thread at the service's priority."""

    def __init__(self, provider: LocalProvider) -> None:
        self.model = provider.query_model
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.stop.wait(0.1):
            n += 1
            query = f"{QUERIES[n % len(QUERIES)]} {n}"  # a new text each time: nothing cached
            started = time.perf_counter()
            self.model.encode([query])
            self.samples.append(time.perf_counter() - started)

    def __enter__(self) -> QueryProbe:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()


async def embed_rate(provider: LocalProvider, chunks: list[str]) -> tuple[float, float]:
    """Chunks/s and CPU ms per chunk (every thread of this process, the probe's included)."""
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(chunks), EMBED_BATCH):
        await provider.embed_chunks(chunks[i : i + EMBED_BATCH])
    wall = time.perf_counter() - started
    return len(chunks) / wall, (time.process_time() - cpu) * 1000 / len(chunks)


def start_hog(own_session: bool) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "while True: pass"], start_new_session=own_session
    )


SCENARIOS = ("hog", "hog-apart", "idle")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=256)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    configs = {
        "float32 (baseline)": LocalProvider(runtime="onnx"),
        "int8": LocalProvider(runtime="onnx-int8"),
    }
    chunks = doc_chunks(args.chunks)
    for provider in configs.values():
        asyncio.run(provider.embed_chunks(chunks[:8]))  # load and warm up
    print(
        f"embedding {len(chunks)} doc chunks in calls of {EMBED_BATCH} by ONNX Runtime, "
        f"{cores} embedder threads at nice +10; a query embedded every "
        "100 ms at nice 0 meanwhile. Baseline and candidates interleaved in each round on a "
        "shared machine (load average printed): compare ratios within the run."
    )
    rates: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    latencies: dict[tuple[str, str], list[float]] = {}
    for round_no in range(args.rounds):
        for scenario in SCENARIOS:
            hog = start_hog(scenario == "hog-apart") if scenario != "idle" else None
            try:
                time.sleep(1)  # let the scheduler place the hog
                for name, provider in configs.items():
                    with QueryProbe(provider) as probe:
                        rate, ms = asyncio.run(embed_rate(provider, chunks))
                    key = (scenario, name)
                    rates.setdefault(key, []).append(rate)
                    cpu.setdefault(key, []).append(ms)
                    latencies.setdefault(key, []).extend(probe.samples)
                    print(
                        f"  round {round_no + 1} {scenario:9} {name}: {rate:.1f} chunks/s, "
                        f"{ms:.1f} ms CPU/chunk, load "
                        f"{os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
    base = next(iter(configs))
    for scenario in SCENARIOS:
        print(f"\n{scenario}: medians over {args.rounds} rounds")
        for name in configs:
            key = (scenario, name)
            rate = statistics.median(rates[key])
            # The median of each round's ratio: the baseline and this one ran minutes apart
            # at most, under the same load.
            ratio = statistics.median(
                mine / theirs
                for mine, theirs in zip(rates[key], rates[(scenario, base)], strict=True)
            )
            cpu_ratio = statistics.median(cpu[(scenario, base)]) / statistics.median(cpu[key])
            queries = ms_line(latencies[key], ".1f", sep=", ")
            print(
                f"  {name}: {rate:.1f} chunks/s (x{ratio:.2f} the baseline, median of the "
                f"rounds' ratios), {statistics.median(cpu[key]):.1f} ms CPU/chunk (x"
                f"{cpu_ratio:.2f} fewer); query embedding {queries}"
            )


if __name__ == "__main__":
    main()
