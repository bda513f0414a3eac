"""Ingestion benchmark of the search service: a backlog dropped before start, or files dropped
while it runs, measured through the running service itself (embedded NATS, the indexer actor,
HTTP), one scenario per child process so each peak RSS is its own.

Reported per scenario: seconds from start (or from the first file dropped) until every file is
searchable by keyword; the embedding rate while the backlog drains and the seconds until every
chunk has its vector (waited for with --wait-embedding, else projected from that rate and
labelled so); keyword query latency over HTTP while the backlog is being indexed, and uncached
semantic query latency (query embedding included) while it is being embedded; peak RSS.

Run: .venv/bin/python -m ops.bench.search_ingest [--chunks 20000 100000] [--live 20000]
     [--wait-embedding] [--embed-seconds 20]
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
from actors.search.registry import Registry, config_dir
from events.nats_server import free_port
from gateway import search

from .stats import ms_line

PER_FILE = 10  # paragraphs per file; each paragraph is one chunk (500-680 characters)


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
    kind: str, chunks: int, wait_embedding: bool, embed_seconds: float
) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    texts, vocab = paragraphs(chunks, rng)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {
            "CAIRN_DATA": str(root / "data"),
            "XDG_CONFIG_HOME": str(root / "config"),
            "SEARCH_INBOX": str(root / "inbox"),
        }
        Registry(config_dir(env)).add("bench")
        inbox = root / "inbox" / "bench"
        if kind == "backlog":
            files = write_files(inbox, texts)
            texts.clear()  # on disk now: the service's memory is what we measure
        else:
            files = len(texts) // PER_FILE
        started = time.perf_counter()
        async with open_runtime(env) as runtime, aiohttp.ClientSession() as session:
            port = free_port()
            runtime.listen["search"] = ("127.0.0.1", port)
            app = await search.build(runtime)
            server = TestServer(app, host="127.0.0.1", port=port)
            await server.start_server()
            base = f"http://127.0.0.1:{port}"
            ready = time.perf_counter() - started
            if kind == "live":
                started = time.perf_counter()
                writer = asyncio.create_task(asyncio.to_thread(write_files, inbox, texts))
            latencies: list[float] = []

            async def status() -> dict[str, Any]:
                async with session.get(f"{base}/api/status", params={"db": "bench"}) as resp:
                    return dict(await resp.json())

            semantic: list[float] = []
            words = iter(vocab * 100)

            async def query_while(stop: asyncio.Event, target: str, into: list[float]) -> None:
                while not stop.is_set():
                    # Fresh words each time: a semantic query is never in the query cache.
                    q = " ".join(next(words) for _ in range(3))
                    t = time.perf_counter()
                    params = {"db": "bench", "q": q, "target": target}
                    async with session.get(f"{base}/api/search", params=params) as resp:
                        await resp.read()
                    into.append(time.perf_counter() - t)
                    await asyncio.sleep(0.02)

            stop = asyncio.Event()
            querier = asyncio.create_task(query_while(stop, "keyword", latencies))
            while True:
                now = await status()
                if now["documents"] >= files and now["state"] != "indexing":
                    break
                await asyncio.sleep(0.02)
            keyword_s = time.perf_counter() - started
            stop.set()
            await querier
            if kind == "live":
                await writer
            total_chunks = now["chunks"]
            first = await status()
            t0 = time.perf_counter()
            stop = asyncio.Event()
            querier = asyncio.create_task(query_while(stop, "semantic", semantic))
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
            stop.set()
            await querier
            writer_mb = writer_peak_rss_mb()
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
        "writer_peak_rss_mb": writer_mb,
    }


def own_peak_rss_mb() -> float:
    """Peak RSS (VmHWM) of this process since its exec. Not ru_maxrss, which keeps the RSS of
    the parent at the fork (1.6 GB when `ops/bench/search.py` starts the scenarios)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def writer_peak_rss_mb() -> float:
    """Peak RSS (VmHWM) of this process's keyword writer (a multiprocessing child). Not
    RUSAGE_CHILDREN: a child started by fork and exec carries this process's RSS at the fork
    in its ru_maxrss."""
    peak = 0.0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
            cmdline = (status.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields.get("PPid", "0")) == os.getpid() and b"multiprocessing" in cmdline:
            peak = max(peak, int(fields["VmHWM"].split()[0]) / 1024)
    return peak


def run_child(kind: str, chunks: int, wait_embedding: bool, embed_seconds: float) -> dict[str, Any]:
    argv = [sys.executable, "-m", "ops.bench.search_ingest", "--child", kind, str(chunks)]
    argv += ["--embed-seconds", str(embed_seconds)]
    if wait_embedding:
        argv.append("--wait-embedding")
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


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
        f"{result['writer_peak_rss_mb']:,.0f} MB"
    )
    samples = result["query_latencies"]
    if samples:
        print(f"  keyword queries over HTTP while indexing ({len(samples)}): {ms_line(samples)}")
    samples = result.get("semantic_latencies") or []
    if samples:
        print(
            f"  semantic queries over HTTP while embedding, uncached ({len(samples)}): "
            f"{ms_line(samples)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, nargs="*", default=[20_000, 100_000])
    parser.add_argument("--live", type=int, nargs="*", default=[20_000])
    parser.add_argument("--wait-embedding", action="store_true")
    parser.add_argument("--embed-seconds", type=float, default=20.0)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "CHUNKS"))
    args = parser.parse_args()
    if args.child:
        kind, chunks = args.child[0], int(args.child[1])
        result = asyncio.run(scenario(kind, chunks, args.wait_embedding, args.embed_seconds))
        print(json.dumps(result))
        return
    for chunks in args.chunks:
        report(run_child("backlog", chunks, args.wait_embedding, args.embed_seconds))
    for chunks in args.live:
        report(run_child("live", chunks, args.wait_embedding, args.embed_seconds))


if __name__ == "__main__":
    main()
