"""Search benchmark: 100,000 generated chunks, keyword vs a LIKE scan, semantic, the keyword
stage's writes, the embedding runtimes, and their rankings' agreement.

Run: .venv/bin/python -m ops.bench.search [--chunks N] [--embedding-only] [--agreement]
[--no-ingest] [--stage-only] [--queries-only].
Prints medians/p99 and ratios measured in this one process. Targets: keyword median <= 10 ms
and >= 20x faster than the LIKE scan; semantic median <= 10 ms with a cached query embedding;
keyword stage >= 20,000 chunks/s; embedding >= 150 chunks/s; query embedding < 10 ms; the
default runtime's top-10 the same as numpy's in >= 95% of queries; over HTTP, `rank=bm25`
median <= 3 ms and `target=hybrid` (cached query embedding) median <= 10 ms, p99 <= 25 ms,
beside the spec's keyword ranking in the same run. The service end to end
(backlogs, live drops, queries while indexing, peak RSS) is `ops/bench/search_ingest.py`,
whose default scenarios this run ends with.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path

import aiohttp
import numpy as np
from aiohttp.test_utils import TestServer

from actors.search.embed import minilm_openvino
from actors.search.embed.embedding import LocalProvider, Provider
from actors.search.embed.query_cache import QueryCache
from actors.search.engine import EMBED_BATCH, Engine
from actors.search.index.stemming import TYPO_MIN_LENGTH
from actors.search.index.store import Database, DocumentState, Replace, vector_key
from actors.search.index.tokenize import query_tokens
from actors.search.index.vectors import VectorIndex
from actors.search.indexer import KEYWORD_BATCH
from actors.search.ingest import keyword_pipeline, keyword_stage
from actors.search.ingest.chunker import chunk_text
from actors.search.ingest.keyword_stage import IndexReport
from actors.search.priority import EMBED_NICE
from actors.search.registry import Registry
from gateway.apps.search import build_app
from gateway.apps.search_query import SearchService

from . import search_ingest
from .stats import ms_line

STATE = DocumentState(size=1, mtime_ns=1, sha256="x")


def corpus(n: int, rng: np.random.Generator) -> list[str]:
    """Paragraph-sized chunks over a Zipf-distributed vocabulary (common words everywhere)."""
    syllables = ["ka", "lo", "mi", "ten", "ra", "su", "vel", "dor", "an", "is"]
    syllables += ["pre", "com", "ter", "ion", "al", "ber", "ne", "qu", "ox", "ist"]
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < 40_000:
        w = "".join(rng.choice(syllables, size=int(rng.integers(1, 5))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    vocab = np.array(words)
    p = 1 / np.arange(1, len(vocab) + 1) ** 1.05
    p /= p.sum()
    lengths = rng.integers(60, 140, size=n)
    draws = rng.choice(len(vocab), size=int(lengths.sum()), p=p)
    out, i = [], 0
    for length in lengths:
        out.append(" ".join(vocab[draws[i : i + length]]))
        i += length
    return out


def stats(samples: list[float]) -> str:
    return ms_line(samples, ".2f", sep=", ")


def like_scan(db: Database, query: str, limit: int) -> list[int]:
    """The original's method: LIKE '%token%' per token over every active row, same ranking."""
    tokens = query_tokens(query)
    hits = " + ".join("(content LIKE ?)" for _ in tokens)
    with db.snapshot() as conn:
        rows = conn.execute(
            f"SELECT id, ({hits}) AS h FROM chunks WHERE active = 1 AND h > 0"
            " ORDER BY h DESC, id LIMIT ?",
            [f"%{t}%" for t in tokens] + [limit],
        ).fetchall()
    return [r[0] for r in rows]


# English prose for the embedding figures: the generated corpus's syllable words split into many
# word pieces and would all be truncated at 256 tokens, which says nothing about real chunks.
_CALIBRATION = (Path(__file__).parents[2] / "actors/search/embed/calibration.txt").read_text()
# The file's English block: every line before its first non-ASCII one.
SENTENCES = list(itertools.takewhile(str.isascii, filter(str.strip, _CALIBRATION.splitlines())))


def prose_chunks(n: int, rng: np.random.Generator) -> list[str]:
    """`n` chunks as the chunker cuts English prose: documents of paragraphs of 3-8 random
    calibration sentences, through `chunk_text`."""
    chunks: list[str] = []
    while len(chunks) < n:
        paragraphs = [
            " ".join(SENTENCES[int(i)] for i in rng.integers(0, len(SENTENCES), size=int(k)))
            for k in rng.integers(3, 9, size=8)
        ]
        chunks.extend(chunk_text("\n\n".join(paragraphs)))
    return chunks[:n]


async def chunk_rate(
    provider: LocalProvider, chunks: list[str], batch: int, windows: bool
) -> tuple[float, float]:
    """Chunks per second embedded in batches of `batch`, and CPU seconds per chunk (all
    threads): the latter hardly moves when other processes compete for the cores. `windows`:
    every token embedded (today's path); otherwise cut at 256 tokens (the previous path)."""
    t, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(chunks), batch):
        part = chunks[i : i + batch]
        await (provider.embed_chunks(part) if windows else provider.embed_documents(part))
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    return len(chunks) / wall, cpu / len(chunks)


async def query_latencies(provider: Provider, queries: list[str]) -> list[float]:
    """Seconds per uncached query embedding, on one running loop as in the service."""
    samples = []
    for q in queries:
        t = time.perf_counter()
        await provider.embed_query(q)
        samples.append(time.perf_counter() - t)
    return samples


async def embedding_rates(rng: np.random.Generator, count: int = 192) -> None:
    """The local provider's runtimes on the same chunks, in this process: the previous path
    (numpy, batches of 16, cut at 256 tokens), ONNX Runtime float32 and int8, and OpenVINO
    bfloat16 where the CPU has it, as the indexer runs them (batches of EMBED_BATCH, every
    token in windows of 128)."""
    chunks = prose_chunks(count, rng)
    numpy_path = LocalProvider(runtime="numpy")
    tokens = [len(t) for t in numpy_path.model.tokenizer.encode_batch(chunks)]
    windows = sum(len(w) for w in numpy_path.model.windows(chunks))
    print(
        f"embedding {len(chunks)} chunks of English prose as chunk_text cuts them (median "
        f"{statistics.median(map(len, chunks)):.0f} characters, {statistics.median(tokens):.0f} "
        f"tokens; {windows / len(chunks):.2f} windows per chunk), 2 threads at nice {EMBED_NICE}:"
    )
    runs = [
        ("numpy, previous path (batches of 16, cut at 256 tokens)", numpy_path, 16, False),
        (f"numpy, every token (batches of {EMBED_BATCH})", numpy_path, EMBED_BATCH, True),
        ("ONNX Runtime float32", LocalProvider(runtime="onnx"), EMBED_BATCH, True),
        ("ONNX Runtime int8 (opt-in)", LocalProvider(runtime="onnx-int8"), EMBED_BATCH, True),
    ]
    if minilm_openvino.bf16_capable():
        openvino = ("OpenVINO bfloat16", LocalProvider(runtime="openvino"), EMBED_BATCH, True)
        runs.insert(3, openvino)
    default = LocalProvider()
    print(f"  the default runtime on this machine: {default.model.runtime}")
    rates = {}
    for name, provider, batch, whole in runs:
        await provider.embed_chunks(chunks[:8])  # warm up
        rate, cpu = await chunk_rate(provider, chunks, batch, whole)
        rates[name] = rate
        print(
            f"  {name}: {rate:,.1f} chunks/s ({rate * statistics.mean(tokens):,.0f} tokens/s), "
            f"{cpu * 1000:.1f} ms CPU per chunk"
        )
    base = rates[runs[0][0]]
    print(
        "  ratios to the previous path: "
        + ", ".join(
            f"{name.split(',')[0]} {rate / base:.2f}x" for name, rate in list(rates.items())[1:]
        )
    )
    queries = [" ".join(s.split()[:6]) for s in SENTENCES]
    for name, provider, _, _ in runs[1:]:
        if provider.query_model is not provider.model:
            continue  # its queries run on ONNX Runtime float32, measured above
        samples = await query_latencies(provider, queries * 3)
        print(
            f"  query embedding, {name.split(',')[0]} (uncached, {len(samples)}): {stats(samples)}"
        )


# A fair agreement check (printed next to the strict one): a query agrees when every
# chunk of its ten best scores, by the reference vectors, at least the reference's tenth-best
# score minus this, i.e. the two lists differ only by swaps among chunks tied within it.
TIE = 0.005


def agreement() -> None:
    """Rankings of the faster runtimes against the numpy vectors (the reference) over this
    repository's docs: queries are 6-word spans of every third chunk. Strict (the issue's): a
    query agrees when its ten best chunks are the same set. Fair: when they differ only among
    chunks whose reference scores are within `TIE` of the tenth best."""
    root = Path(__file__).parents[2]
    corpus: list[str] = []
    for path in [*sorted((root / "docs").glob("*.md")), root / "README.md"]:
        corpus.extend(chunk_text(path.read_text()))
    rng = np.random.default_rng(1)
    queries = []
    for chunk in corpus[::3]:
        words = chunk.split()
        at = int(rng.integers(0, max(1, len(words) - 6)))
        queries.append(" ".join(words[at : at + 6]))
    runtimes = ["numpy", "onnx", "onnx-int8"]
    if minilm_openvino.bf16_capable():
        runtimes.append("openvino")
    scores = {}
    for runtime in runtimes:
        # As the service does: documents by the runtime, queries by its query model.
        provider = LocalProvider(runtime=runtime)
        docs = np.stack([v[0] for v in provider.model.encode_windows(corpus, workers=2)])
        scores[runtime] = provider.query_model.encode(queries, workers=2) @ docs.T
    reference = scores["numpy"]
    best = np.argsort(-reference, axis=1)[:, :10]
    tenth = np.sort(reference, axis=1)[:, -10]
    print(f"agreement with numpy over {len(corpus)} chunks of the docs, {len(queries)} queries:")
    for runtime in runtimes[1:]:
        top = np.argsort(-scores[runtime], axis=1)[:, :10]
        same = [set(a) == set(b) for a, b in zip(best, top, strict=True)]
        overlap = [len(set(a) & set(b)) / 10 for a, b in zip(best, top, strict=True)]
        fair = [bool((reference[i, top[i]] >= tenth[i] - TIE).all()) for i in range(len(top))]
        drift = np.abs(scores[runtime] - reference).max()
        print(
            f"  {runtime}: same top-10 in {statistics.mean(same):.0%} of queries (strict, target "
            f">= 95%), {statistics.mean(fair):.0%} up to ties within {TIE} (fair); mean top-10 "
            f"overlap {statistics.mean(overlap):.1%}; largest score difference {drift:.4f}"
        )


def files_of(texts: list[str]) -> list[Replace]:
    return [Replace(f"doc{i}.txt", STATE, texts[i : i + 10]) for i in range(0, len(texts), 10)]


def stage_batches(db: Database, changes: list[Replace]) -> Iterator[list[Replace]]:
    """`changes` cut as the keyword stage cuts its transactions (`keyword_stage.room_from`)."""
    batch: list[Replace] = []
    chunks = 0
    room = keyword_stage.room_from(db.next_chunk_id())
    for change in changes:
        batch.append(change)
        chunks += len(change.chunks)
        if chunks >= room:
            yield batch
            batch, chunks = [], 0
            room = keyword_stage.room_from(db.next_chunk_id())
    if batch:
        yield batch


def keyword_stage_rates(texts: list[str], tmp: str) -> None:
    """The keyword stage's writes (tokenising, chunks, postings, queue, commit) alone, files of
    10 chunks: one transaction per file (the first indexer), batches of 400 files (the
    previous stage) and the stage's own transactions (up to a keyword block, 16,384 chunks,
    ending at block ends). Wall and CPU time of this one thread."""
    changes = files_of(texts)
    runs: list[tuple[str, Callable[[Database], Iterable[list[Replace]]]]] = [
        ("one file per transaction", lambda db: ([c] for c in changes[:200])),
        (
            "400 files per transaction",
            lambda db: (changes[i : i + 400] for i in range(0, len(changes), 400)),
        ),
        ("the stage's transactions", lambda db: stage_batches(db, changes)),
    ]
    for n, (name, batches) in enumerate(runs):
        db = Database(Path(tmp) / f"keyword-{n}.sqlite")
        write_all(db, name, batches)
        db.close()
    # Every file edited: the same sources with other text, so each chunk is also retired.
    db = Database(Path(tmp) / "keyword-edited.sqlite")
    for batch in stage_batches(db, changes):
        db.write(batch)
    edited = files_of(texts[1:] + texts[:1])
    write_all(db, "every file edited", lambda db: stage_batches(db, edited))
    db.close()


def whole_stage_rates(texts: list[str], tmp: str) -> None:
    """The whole keyword stage (read, parse, chunk, tokenise, write) on files of 10
    paragraphs, offered `KEYWORD_BATCH` at a time as the indexer actor offers them: each call
    is one transaction up to the block's end, the rest offered again. Twice, same files: in
    this one process (`keyword_stage.index_files`, the baseline), then as the service runs it
    (`keyword_pipeline.Pipeline`: the preparer and the writer processes, a batch apart)."""
    inbox = Path(tmp) / "stage-inbox"
    search_ingest.write_files(inbox, texts)
    every = sorted(p.name for p in inbox.iterdir())

    async def drain(
        index: Callable[[list[str]], Awaitable[IndexReport]],
    ) -> tuple[int, int, float]:
        """Every file, `KEYWORD_BATCH` per call, as the indexer offers them; timed from the
        first call (opening the database and starting processes are outside, as in a
        service that has indexed before)."""
        sources, chunks, calls = every, 0, 0
        started = time.perf_counter()
        while sources:
            report = await index(sources[:KEYWORD_BATCH])
            sources = [*report.rest, *sources[KEYWORD_BATCH:]]
            chunks, calls = chunks + report.chunks, calls + 1
        return chunks, calls, time.perf_counter() - started

    async def inline() -> tuple[int, int, float]:
        db = Database(Path(tmp) / "stage-inline" / "index.sqlite")

        async def index(batch: list[str]) -> IndexReport:
            return keyword_stage.index_files(db, inbox, "bench", batch)

        try:
            return await drain(index)
        finally:
            db.close()

    async def pipelined() -> tuple[int, int, float]:
        db = Database(Path(tmp) / "stage-pipelined" / "index.sqlite")
        pipeline = keyword_pipeline.Pipeline(db.path, inbox, "bench")
        await pipeline.start()
        try:
            return await drain(pipeline.index)
        finally:
            pipeline.close()
            db.close()

    (Path(tmp) / "stage-inline").mkdir()
    (Path(tmp) / "stage-pipelined").mkdir()
    chunks, calls, elapsed = asyncio.run(inline())
    one = chunks / elapsed
    print(
        f"keyword stage, whole, in one process (files read, parsed, chunked and written in "
        f"{calls} calls of the indexer): {one:,.0f} chunks/s of {chunks:,}"
    )
    chunks, calls, elapsed = asyncio.run(pipelined())
    two = chunks / elapsed
    print(
        f"keyword stage, whole, preparer and writer processes ({calls} calls): "
        f"{two:,.0f} chunks/s of {chunks:,} ({two / one:.2f}x; target >= 20,000)"
    )


def write_all(
    db: Database, name: str, batches: Callable[[Database], Iterable[list[Replace]]]
) -> None:
    start, cpu, count = time.perf_counter(), time.process_time(), 0
    for batch in batches(db):
        db.write(batch)
        count += sum(len(c.chunks) for c in batch)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(
        f"keyword stage, {name}: {count / elapsed:,.0f} chunks/s "
        f"({count / cpu:,.0f} per CPU second; target >= 20,000)"
    )


def misspelt(query: str) -> str:
    """`query` with its third and fourth letters swapped in every word of 5 or more."""
    return " ".join(
        w[:2] + w[3] + w[2] + w[4:] if len(w) >= TYPO_MIN_LENGTH else w for w in query.split()
    )


async def http_latencies(engine: Engine, queries: list[str]) -> None:
    """Keyword (the spec's ranking), `rank=bm25` and `target=hybrid` over HTTP on loopback,
    the same queries, interleaved so the machine's other work weighs on each alike. Every
    query's embedding is cached first (as a repeated query's is)."""
    assert engine.cache is not None and engine.provider is not None
    for q in queries:
        await engine.query_vector(q)
    app = build_app(SearchService(Registry(Path("/nonexistent")), {"b": engine}))
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    modes = {
        "keyword, the spec's ranking": {"target": "keyword"},
        "keyword rank=bm25": {"target": "keyword", "rank": "bm25"},
        "target=hybrid": {"target": "hybrid"},
        "target=hybrid&highlight=1": {"target": "hybrid", "highlight": "1"},
        "keyword rank=bm25&typo=1": {"target": "keyword", "rank": "bm25", "typo": "1"},
        # The same queries with two letters swapped in every word of 5+ letters: each such
        # word is looked up again as its neighbours one edit away.
        "keyword rank=bm25&typo=1, misspelt": {"target": "keyword", "rank": "bm25", "typo": "1"},
    }
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    base = f"http://127.0.0.1:{server.port}/api/search"
    async with aiohttp.ClientSession() as session:
        for q in queries:
            for mode, params in modes.items():
                text = misspelt(q) if mode.endswith("misspelt") else q
                started = time.perf_counter()
                async with session.get(base, params={"db": "b", "q": text, **params}) as resp:
                    assert resp.status == 200, await resp.text()
                    await resp.read()
                times[mode].append(time.perf_counter() - started)
    await server.close()
    spec = statistics.median(times["keyword, the spec's ranking"])
    for mode, samples in times.items():
        print(
            f"HTTP {mode} ({len(samples)} queries, {len(engine.vectors)} vectors): "
            f"{stats(samples)}; {statistics.median(samples) / spec:.2f}x the spec's median"
        )
    print("targets: bm25 median <= 3 ms; hybrid median <= 10 ms, p99 <= 25 ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--embedding-only", action="store_true", help="only the provider figures")
    parser.add_argument("--agreement", action="store_true", help="only the rankings' agreement")
    parser.add_argument(
        "--no-ingest", action="store_true", help="without the service's ingest scenarios"
    )
    parser.add_argument("--stage-only", action="store_true", help="only the keyword stage")
    parser.add_argument(
        "--queries-only", action="store_true", help="only the query latencies at --chunks"
    )
    args = parser.parse_args()
    if args.embedding_only:
        asyncio.run(embedding_rates(np.random.default_rng(7)))
        return
    if args.agreement:
        agreement()
        return
    rng = np.random.default_rng(7)
    texts = corpus(args.chunks, rng)
    with tempfile.TemporaryDirectory() as tmp:
        if not args.queries_only:
            keyword_stage_rates(texts[:20_000], tmp)
            whole_stage_rates(texts[:40_000], tmp)
        if args.stage_only:
            return
        provider = LocalProvider()
        cache = QueryCache(Path(tmp) / "cache.sqlite")
        engine = Engine("bench", Path(tmp) / "bench", Path(tmp) / "inbox", provider, cache)
        db = engine.db
        db.write(files_of(texts))

        queries = []
        for _ in range(300):
            words = texts[int(rng.integers(0, len(texts)))].split()
            queries.append(" ".join(rng.choice(words, size=int(rng.integers(1, 6)))))
        kw = []
        for q in queries:
            t = time.perf_counter()
            db.keyword_search(q, 10)
            kw.append(time.perf_counter() - t)
        like = []
        for q in queries[:15]:
            t = time.perf_counter()
            like_scan(db, q, 10)
            like.append(time.perf_counter() - t)
        ratio = statistics.median(like) / statistics.median(kw)
        print(f"keyword ({len(kw)} queries): {stats(kw)} (target median <= 10 ms)")
        print(f"LIKE '%token%' scan ({len(like)} queries): {stats(like)}")
        print(f"keyword vs scan: {ratio:.0f}x faster at the median (target >= 20x)")

        # Semantic: vectors for 100k chunks would take ~an hour to embed on 2 cores, so the
        # index holds clustered synthetic unit vectors; the query vector is a real cached one.
        query = "how do plants turn sunlight into energy"
        cache.put(provider.fingerprint, query, asyncio.run(provider.embed_query(query)))
        centres = rng.standard_normal((200, 512)).astype(np.float32)
        vectors = centres[rng.integers(0, 200, size=len(texts))]
        vectors += 0.5 * rng.standard_normal(vectors.shape).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        index = VectorIndex(Path(tmp) / "vectors.usearch")
        keys = np.arange(1, len(texts) + 1, dtype=np.uint64)
        index.load_or_rebuild("bench", keys, vectors)
        target = vectors[5]
        sem = []
        for _ in range(300):
            t = time.perf_counter()
            vector = cache.get(provider.fingerprint, query)
            assert vector is not None
            hits = index.search(target + 0 * vector, 20)
            db.fetch_active([k for k, _ in hits][:10])
            sem.append(time.perf_counter() - t)
        print(f"semantic, cached query embedding: {stats(sem)} (target median <= 10 ms)")

        # The same database behind the service's HTTP handler, its vectors the synthetic
        # ones (a chunk's key is its id's window 0).
        chunk_keys = np.array([vector_key(i, 0) for i in range(1, len(texts) + 1)], dtype=np.uint64)
        engine.vectors.load_or_rebuild("bench", chunk_keys, vectors)
        asyncio.run(http_latencies(engine, queries))
        engine.close()
        cache.close()
    if args.queries_only:
        return
    asyncio.run(embedding_rates(rng))
    agreement()
    if not args.no_ingest:
        # The service end to end, each scenario in a child process of its own (peak RSS).
        for kind, chunks in (("backlog", 20_000), ("backlog", 100_000), ("live", 20_000)):
            search_ingest.report(search_ingest.run_child(kind, chunks, False, 20.0))


if __name__ == "__main__":
    main()
