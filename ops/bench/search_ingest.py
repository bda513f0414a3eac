"""Ingestion benchmark of the search service: a backlog dropped before start, or files dropped
while it runs, measured through the running service itself (embedded NATS, the indexer actor,
HTTP), one scenario per child process so each peak RSS is its own.

Reported per scenario: seconds from start (or from the first file dropped) until every file is
searchable by keyword; the embedding rate while the backlog drains and the seconds until every
chunk has its vector (waited for with --wait-embedding, else projected from that rate and
labelled so); keyword query latency over HTTP while the backlog is being indexed, and uncached
semantic query latency (query embedding included) while it is being embedded; peak RSS.

The queries come from a client process of its own (as a user's would), one after another with
`PAUSE` between them; each is stamped with the seconds since the service started, and the
report names the slowest, so a stall can be placed (start-up, a batch, a commit). `--rounds`
repeats each scenario and pools the queries, so a p99 is not the one worst sample.

Run: .venv/bin/python -m ops.bench.search_ingest [--chunks 20000 100000] [--live 20000] (0: none)
     [--wait-embedding] [--embed-seconds 20] [--rounds 1] [--env KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from aiohttp.test_utils import TestServer

from actors.platform import open_runtime
from actors.search.ingest.keyword_pipeline import PREPARER, WRITER
from actors.search.registry import Registry, state_root
from events.nats_server import free_port
from gateway.apps import search
from gateway.main import settle_heap
from gateway.server import journal

from .stats import ms_line

PER_FILE = 10  # paragraphs per file; each paragraph is one chunk (500-680 characters)
PAUSE = 0.01  # seconds between one query's answer and the next query


def paragraphs(n: int, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """`n` paragraphs of 70-95 words over a Zipf-distributed vocabulary, and the vocabulary."""
    syllables = ["ka", "lo", "mi", "ten", "ra", "su", "vel", "dor", "an", "is"]
    syllables += ["pre", "com", "ter", "ion", "al", "ber", "ne", "qu", "ox", "ist"]
    words: dict[str, None] = {}
    while len(words) < 40_000:
        words["".join(rng.choice(syllables, size=int(rng.integers(1, 5))))] = None
    vocab = np.array(list(words))
    p = 1 / np.arange(1, len(vocab) + 1) ** 1.05
    p /= p.sum()
    lengths = rng.integers(70, 95, size=n)
    draws = vocab[rng.choice(len(vocab), size=int(lengths.sum()), p=p)]
    out, i = [], 0
    for length in lengths:
        text = " ".join(draws[i : i + length])
        out.append(text[:680])
        i += length
    return out, list(vocab[:2000])


def write_files(inbox: Path, texts: list[str]) -> int:
    inbox.mkdir(parents=True, exist_ok=True)
    files = 0
    for start in range(0, len(texts), PER_FILE):
        (inbox / f"doc{files:06d}.txt").write_text("\n\n".join(texts[start : start + PER_FILE]))
        files += 1
    return files


async def scenario(
    kind: str, chunks: int, wait_embedding: bool, embed_seconds: float, extra: dict[str, str]
) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    texts, vocab = paragraphs(chunks, rng)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {
            "CAIRN_DATA": str(root / "data"),
            "XDG_CONFIG_HOME": str(root / "config"),
            "SEARCH_INBOX": str(root / "inbox"),
            **extra,
        }
        Registry(state_root(env)).add("bench")
        inbox = root / "inbox" / "bench"
        if kind == "backlog":
            files = write_files(inbox, texts)
            texts.clear()  # on disk now: the service's memory is what we measure
        else:
            files = len(texts) // PER_FILE
        keyword_client = QueryClient("keyword", vocab)
        semantic_client = QueryClient("semantic", vocab[::-1])
        started = time.perf_counter()
        async with (
            open_runtime(env, journal=journal()) as runtime,
            aiohttp.ClientSession() as session,
        ):
            port = free_port()
            runtime.listen["search"] = ("127.0.0.1", port)
            app = await search.build(runtime)
            server = TestServer(app, host="127.0.0.1", port=port)
            await server.start_server()
            settle_heap()  # as `cairn serve` does once its services listen
            base = f"http://127.0.0.1:{port}"
            ready = time.perf_counter() - started
            if kind == "live":
                started = time.perf_counter()
                writer = asyncio.create_task(asyncio.to_thread(write_files, inbox, texts))

            async def status() -> dict[str, Any]:
                async with session.get(f"{base}/api/status", params={"db": "bench"}) as resp:
                    return dict(await resp.json())

            keyword_client.begin(base)
            while True:
                now = await status()
                if now["documents"] >= files and now["state"] != "indexing":
                    break
                await asyncio.sleep(0.02)
            keyword_s = time.perf_counter() - started
            latencies = await keyword_client.end(started)
            if kind == "live":
                await writer
            total_chunks = now["chunks"]
            first = await status()
            t0 = time.perf_counter()
            semantic_client.begin(base)
            if wait_embedding:
                now = await status()
                while now["pending"]:  # polling the route a user would poll
                    await asyncio.sleep(0.2)
                    now = await status()
                embedded_s = time.perf_counter() - started
                rate = (now["embedded"] - first["embedded"]) / (time.perf_counter() - t0)
                projected = False
            else:
                await asyncio.sleep(embed_seconds)
                now = await status()
                rate = (now["embedded"] - first["embedded"]) / (time.perf_counter() - t0)
                left = total_chunks - first["embedded"]
                embedded_s = keyword_s + left / rate if rate else float("nan")
                projected = True
            semantic = await semantic_client.end(started)
            stage_mb = stage_peak_rss_mb()
            await server.close()
    return {
        "kind": kind,
        "files": files,
        "chunks": total_chunks,
        "service_ready_s": ready,
        "keyword_searchable_s": keyword_s,
        "keyword_chunks_per_s": total_chunks / keyword_s,
        "embedded_at_keyword_done": first["embedded"],
        "embedding_chunks_per_s": rate,
        "fully_embedded_s": embedded_s,
        "fully_embedded_projected": projected,
        "query_latencies": latencies,
        "semantic_latencies": semantic,
        "peak_rss_mb": own_peak_rss_mb(),
        "writer_peak_rss_mb": stage_mb.get(WRITER, 0.0),
        "preparer_peak_rss_mb": stage_mb.get(PREPARER, 0.0),
    }


class QueryClient:
    """A process sending `target` queries of fresh words (never in the query cache) to a
    service, one after another, between `begin` and `end`: started before the service so its
    own start-up is not measured, and apart from it so its work is not on the service's loop.
    """

    def __init__(self, target: str, vocab: list[str]) -> None:
        argv = [sys.executable, "-m", "ops.bench.search_ingest", "--client", target]
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(vocab) + "\n")
        self.process.stdin.flush()
        # Its imports done and its session open: queries start the moment `begin` is called.
        said = self.process.stdout.readline().strip()
        if said != "ready":
            raise RuntimeError(f"the {target} query client did not start (it said {said!r})")

    def begin(self, base: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(base + "\n")
        self.process.stdin.flush()

    async def end(self, started: float) -> list[tuple[float, float]]:
        """(seconds since `started` when the query was sent, its latency) for every query."""
        out, _ = await asyncio.to_thread(self.process.communicate, "")
        return [(at - started, latency) for at, latency in json.loads(out)]


async def client(target: str) -> list[tuple[float, float]]:
    """The client process: vocabulary, then the base URL on stdin; queries until stdin ends."""
    loop = asyncio.get_running_loop()
    vocab = json.loads(await loop.run_in_executor(None, sys.stdin.readline))
    words = iter(vocab * 100)
    samples: list[tuple[float, float]] = []
    async with aiohttp.ClientSession() as session:
        print("ready", flush=True)
        base = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        ended = loop.run_in_executor(None, sys.stdin.read)
        while not ended.done():
            q = " ".join(next(words) for _ in range(3))
            at = time.perf_counter()  # CLOCK_MONOTONIC: the same clock in every process
            params = {"db": "bench", "q": q, "target": target}
            async with session.get(f"{base}/api/search", params=params) as resp:
                await resp.read()
            samples.append((at, time.perf_counter() - at))
            await asyncio.sleep(PAUSE)
    return samples


def own_peak_rss_mb() -> float:
    """Peak RSS (VmHWM) of this process since its exec. Not ru_maxrss, which keeps the RSS of
    the parent at the fork (1.6 GB when `ops/bench/search.py` starts the scenarios)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def stage_peak_rss_mb() -> dict[str, float]:
    """Peak RSS (VmHWM) of this process's keyword stage processes (multiprocessing children),
    by name. Not RUSAGE_CHILDREN: a child started by fork and exec carries this process's RSS
    at the fork in its ru_maxrss."""
    peaks: dict[str, float] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
            cmdline = (status.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields.get("PPid", "0")) == os.getpid() and b"multiprocessing" in cmdline:
            name = fields["Name"].strip()
            peaks[name] = max(peaks.get(name, 0.0), int(fields["VmHWM"].split()[0]) / 1024)
    return peaks


def run_child(
    kind: str,
    chunks: int,
    wait_embedding: bool,
    embed_seconds: float,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    argv = [sys.executable, "-m", "ops.bench.search_ingest", "--child", kind, str(chunks)]
    argv += ["--embed-seconds", str(embed_seconds)]
    argv += [f"--env={key}={value}" for key, value in (extra or {}).items()]
    if wait_embedding:
        argv.append("--wait-embedding")
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def run_rounds(
    kind: str,
    chunks: int,
    wait_embedding: bool,
    embed_seconds: float,
    rounds: int,
    extra: dict[str, str],
) -> dict[str, Any]:
    """The scenario `rounds` times: the last round's figures, every round's queries."""
    results = [run_child(kind, chunks, wait_embedding, embed_seconds, extra) for _ in range(rounds)]
    merged = dict(results[-1])
    for key in ("query_latencies", "semantic_latencies"):
        merged[key] = [sample for result in results for sample in result[key]]
    merged["rounds"] = rounds
    merged["keyword_searchable_all_s"] = [r["keyword_searchable_s"] for r in results]
    return merged


def report(result: dict[str, Any]) -> None:
    what = "dropped before start" if result["kind"] == "backlog" else "dropped live"
    full = "projected from that rate" if result["fully_embedded_projected"] else "measured"
    if result["fully_embedded_s"] != result["fully_embedded_s"]:  # NaN: no batch ended yet
        full = "no batch ended in the time given: raise --embed-seconds"
    print(
        f"{result['chunks']:,} chunks in {result['files']:,} files {what}: "
        f"keyword-searchable after {result['keyword_searchable_s']:.1f} s "
        f"({result['keyword_chunks_per_s']:,.0f} chunks/s end to end; service up in "
        f"{result['service_ready_s']:.1f} s); embedding {result['embedding_chunks_per_s']:,.1f} "
        f"chunks/s, fully embedded after {result['fully_embedded_s']:,.0f} s ({full}); "
        f"peak RSS {result['peak_rss_mb']:,.0f} MB, keyword writer process "
        f"{result['writer_peak_rss_mb']:,.0f} MB, preparer {result['preparer_peak_rss_mb']:,.0f} MB"
    )
    rounds = result.get("rounds", 1)
    if rounds > 1:
        each = ", ".join(f"{s:.1f}" for s in result["keyword_searchable_all_s"])
        print(f"  keyword-searchable after, each round: {each} s")
    over = f", {rounds} rounds" if rounds > 1 else ""
    for key, what in (
        ("query_latencies", "keyword queries over HTTP while indexing"),
        ("semantic_latencies", "semantic queries over HTTP while embedding, uncached"),
    ):
        samples = result.get(key) or []
        if samples:
            latencies = [latency for _, latency in samples]
            slowest = sorted(samples, key=lambda s: -s[1])[:3]
            where = ", ".join(f"{lat * 1e3:.1f} ms at {at:.2f} s" for at, lat in slowest)
            print(f"  {what} ({len(samples)}{over}): {ms_line(latencies)}; slowest {where}")


def main() -> None:
    parser = argparse.ArgumentParser()
    # One or more sizes each; 0 runs none of that kind (a bare `--live` used to mean that).
    parser.add_argument("--chunks", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--live", type=int, nargs="+", default=[20_000])
    parser.add_argument("--wait-embedding", action="store_true")
    parser.add_argument("--embed-seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="service setting for every scenario, e.g. EMBEDDING_RUNTIME=onnx-int8",
    )
    parser.add_argument("--child", nargs=2, metavar=("KIND", "CHUNKS"))
    parser.add_argument("--client", metavar="TARGET")
    args = parser.parse_args()
    if args.client:
        print(json.dumps(asyncio.run(client(args.client))))
        return
    extra = dict(item.split("=", 1) for item in args.env)
    if args.child:
        kind, chunks = args.child[0], int(args.child[1])
        result = asyncio.run(scenario(kind, chunks, args.wait_embedding, args.embed_seconds, extra))
        print(json.dumps(result))
        return
    for kind, sizes in (("backlog", args.chunks), ("live", args.live)):
        for chunks in filter(None, sizes):
            waited, seconds = args.wait_embedding, args.embed_seconds
            report(run_rounds(kind, chunks, waited, seconds, args.rounds, extra))


if __name__ == "__main__":
    main()
