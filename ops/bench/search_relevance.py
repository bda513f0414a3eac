"""Does search find the right documents? nDCG@10, Recall@100 and MRR@10 of every search mode
on public IR test collections with human relevance judgements, beside `bm25s` (BM25 with an
English stemmer and stop words) on the same text in the same run.

    .venv/bin/python -m ops.bench.search_relevance cranfield=DIR cisi=DIR [beir=DIR ...]

Each DIR holds a collection's files, or is a git repository (a bare mirror too) whose HEAD
holds them; they are checked against the SHA-256 sums below before use (no collection is
shipped in this repository):
- `cranfield`: Cranfield 1400 (1,398 aeronautics abstracts, 225 queries, graded judgements:
  Cleverdon's codes 1 (a complete answer) to 4 (minimum interest) scored 4 to 1, -1 as 0),
  files `cran.all.1400`, `cran.qry`, `cranqrel` (e.g. github noramtboraas/information-retrieval,
  commit 4ea1b8e0). Its queries are numbered 1-225 in the qrels, in file order.
- `cisi`: CISI (1,460 library-science abstracts, 76 judged queries, binary judgements), files
  `CISI.ALL`, `CISI.QRY`, `CISI.REL` (e.g. github Shakiba-Alipour/Information-Retrieval-on-CISI,
  commit 7a23c346).
- `beir`: any folder in BEIR's format (`corpus.jsonl`, `queries.jsonl`, `qrels/test.tsv`),
  unchecked; name it `beir:NAME=DIR`.

Every document is chunked by the service's chunker and written to a real search database;
chunks are embedded by the local model (all-MiniLM-L6-v2, the service's default runtime) once
and the vectors kept under `$XDG_CACHE_HOME/cairn/relevance/` for later runs. Each mode is asked for
100 chunks (the API's most) through the engine's own calls; documents rank by their best
chunk (the answer's groups), so nDCG@10 reads the first ten groups and R@100 at most 100.
The hybrid variants (RRF, convex at several weights) are printed so the service's choice
(`fusion.ALPHA`) can be read off; tuning on these collections, never on a held-out one.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import attrs
import numpy as np

from actors.search.embed.embedding import RUNTIMES, LocalProvider
from actors.search.engine import Engine
from actors.search.index import fusion
from actors.search.index.store import ChunkRow, DocumentState, Replace
from actors.search.ingest.chunker import chunk_text

LIMIT = 100  # chunks asked of each mode: the API's most


@attrs.frozen
class Collection:
    name: str
    docs: dict[str, str]  # id -> text
    queries: dict[str, str]  # id -> text (judged ones only)
    qrels: dict[str, dict[str, int]]  # query id -> doc id -> gain (> 0 relevant)


CHECKSUMS = {
    "cranfield": {
        "cran.all.1400": "fbb8935a93263ab6c9fadefb507fd7cd5e101e7fbeb31c12e6bff6dd501315e8",
        "cran.qry": "99578ceb88941ef89c14faf7c63c23776a376d8fba319b990f01d0c601d8b03f",
        "cranqrel": "a90f56082cd44db70bf2c21ebca39a1a34e37c82ccb5ddf1bcc64f18795234c7",
    },
    "cisi": {
        "CISI.ALL": "c13934ad921234b571e7b424af3461fe39dccb16757cb21954b3aea5250d072e",
        "CISI.QRY": "b72de0e0cb8aa5c93ac988e5be0400cc18949d0a94913a248783a37dd97d5470",
        "CISI.REL": "f7396c92586c61953ccb7ae99ad8d3ac749ac3b989041fc93a9e311568f58997",
    },
}


def read_source(folder: Path, name: str) -> str:
    """A file of the collection: from the folder, or from the HEAD of the git repository."""
    if (folder / name).is_file():
        return (folder / name).read_text(encoding="latin-1")
    out = subprocess.run(
        ["git", "--git-dir", str(folder), "show", f"HEAD:{name}"],
        check=True,
        capture_output=True,
    ).stdout
    return out.decode("latin-1")


def checked(collection: str, folder: Path) -> dict[str, str]:
    files = {}
    for name, digest in CHECKSUMS[collection].items():
        text = read_source(folder, name)
        actual = hashlib.sha256(text.encode("latin-1")).hexdigest()
        if actual != digest:
            raise SystemExit(f"{collection}: {name} has SHA-256 {actual}, expected {digest}")
        files[name] = text
    return files


def smart_records(text: str) -> Iterator[tuple[str, dict[str, str]]]:
    """The SMART format's records: `.I id` then fields `.X` (a line) and their text."""
    for block in re.split(r"^\.I ", text, flags=re.M)[1:]:
        head, _, rest = block.partition("\n")
        fields: dict[str, str] = {}
        for part in re.split(r"^\.(?=[A-Z]\s*$)", rest, flags=re.M):
            key, _, value = part.partition("\n")
            if key.strip():
                fields[key.strip()] = value.strip()
        yield head.strip(), fields


def load_cranfield(folder: Path) -> Collection:
    files = checked("cranfield", folder)
    # .W repeats the title; it is the document's text.
    docs = {i: " ".join(f.get("W", "").split()) for i, f in smart_records(files["cran.all.1400"])}
    queries_in_order = [" ".join(f["W"].split()) for _, f in smart_records(files["cran.qry"])]
    qrels: dict[str, dict[str, int]] = {}
    for line in files["cranqrel"].splitlines():
        if line.strip():
            q, d, code = line.split()[:3]
            gain = 5 - int(code) if int(code) > 0 else 0
            qrels.setdefault(q, {})[d] = gain
    queries = {str(n): text for n, text in enumerate(queries_in_order, start=1)}
    docs = {i: text for i, text in docs.items() if text}
    return _judged("cranfield", docs, queries, qrels)


def load_cisi(folder: Path) -> Collection:
    files = checked("cisi", folder)
    docs = {
        i: " ".join((f.get("T", "") + "\n" + f.get("W", "")).split())
        for i, f in smart_records(files["CISI.ALL"])
    }
    queries = {i: " ".join(f.get("W", "").split()) for i, f in smart_records(files["CISI.QRY"])}
    qrels: dict[str, dict[str, int]] = {}
    for line in files["CISI.REL"].splitlines():
        if line.strip():
            q, d = line.split()[:2]
            qrels.setdefault(q, {})[d] = 1
    return _judged("cisi", docs, queries, qrels)


def load_beir(name: str, folder: Path) -> Collection:
    docs = {}
    with (folder / "corpus.jsonl").open() as f:
        for line in f:
            d = json.loads(line)
            docs[str(d["_id"])] = (d.get("title", "") + "\n" + d.get("text", "")).strip()
    with (folder / "queries.jsonl").open() as f:
        queries = {str(q["_id"]): q["text"] for q in map(json.loads, f)}
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, score = line.split("\t")[:3]
        qrels.setdefault(q, {})[d] = int(score)
    return _judged(name, docs, queries, qrels)


def _judged(
    name: str, docs: dict[str, str], queries: dict[str, str], qrels: dict[str, dict[str, int]]
) -> Collection:
    keep = {
        q: rels
        for q, rels in qrels.items()
        if q in queries and queries[q] and any(g > 0 for d, g in rels.items() if d in docs)
    }
    return Collection(name, docs, {q: queries[q] for q in keep}, keep)


# -- metrics --------------------------------------------------------------------------------------


def ndcg_at(ranked: list[str], rels: dict[str, int], k: int = 10) -> float:
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in rels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: list[str], rels: dict[str, int], k: int = 100) -> float:
    relevant = {d for d, g in rels.items() if g > 0}
    return len(relevant & set(ranked[:k])) / len(relevant)


def mrr_at(ranked: list[str], rels: dict[str, int], k: int = 10) -> float:
    for i, d in enumerate(ranked[:k]):
        if rels.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def documents(rows: list[ChunkRow]) -> list[str]:
    """Document ids in the order of their best chunk (the answer's groups)."""
    return list(dict.fromkeys(row.source for row in rows))


# -- the run --------------------------------------------------------------------------------------


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cairn" / "relevance"


async def build(collection: Collection, provider: LocalProvider, tmp: Path) -> Engine:
    """A real search database of the collection, every chunk with its vectors."""
    engine = Engine(collection.name, tmp / collection.name, tmp / "inbox", provider, None)
    engine.open_vectors()
    state = DocumentState(0, 0, "")
    changes = [Replace(d, state, chunk_text(text)) for d, text in collection.docs.items()]
    written = engine.db.write(changes)
    ids = [i for w in written for i in w.new_ids]
    texts = [t for c in changes for t in c.chunks]
    digest = hashlib.sha256(
        json.dumps([provider.fingerprint, texts], ensure_ascii=False).encode()
    ).hexdigest()[:16]
    cached = cache_dir() / f"{collection.name}-{digest}.npz"
    if cached.exists():
        saved = np.load(cached)
        windows = np.split(saved["vectors"], np.cumsum(saved["counts"])[:-1])
    else:
        started = time.perf_counter()
        windows = []
        for i in range(0, len(texts), 128):
            windows += await provider.embed_chunks(texts[i : i + 128])
        print(
            f"{collection.name}: embedded {len(texts)} chunks in "
            f"{time.perf_counter() - started:.0f} s (cached in {cached})"
        )
        cached.parent.mkdir(parents=True, exist_ok=True)
        np.savez(
            cached, vectors=np.concatenate(windows), counts=np.array([len(w) for w in windows])
        )
    engine._store(list(zip(ids, windows, strict=True)), [])
    return engine


Ranker = Callable[[str], Awaitable[list[str]]]
Fuse = Callable[[list[tuple[int, float]], list[tuple[int, float]]], list[int]]


def rankers(engine: Engine, collection: Collection) -> dict[str, Ranker]:
    import bm25s  # a benchmark's reference only: not a dependency of the service

    doc_ids = list(collection.docs)
    retriever = bm25s.BM25()
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    retriever.index(
        bm25s.tokenize(
            list(collection.docs.values()), stopwords="en", stemmer=stemmer, show_progress=False
        ),
        show_progress=False,
    )

    async def bm25s_rank(q: str) -> list[str]:
        tokens = bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False)
        if not tokens.vocab:
            return []
        found, _ = retriever.retrieve(tokens, k=min(LIMIT, len(doc_ids)), show_progress=False)
        return [doc_ids[int(i)] for i in found[0]]

    async def of(rows: Awaitable[list[ChunkRow]]) -> list[str]:
        return documents(await rows)

    async def fused(q: str, how: Fuse) -> list[str]:
        keyword, semantic = await asyncio.gather(
            engine.bm25_scored(q, LIMIT), engine.semantic_scored(q, LIMIT)
        )
        rows = {row.id: row for row, _ in [*keyword, *semantic]}
        kw = [(row.id, s) for row, s in keyword]
        sem = [(row.id, s) for row, s in semantic]
        return documents([rows[i] for i in how(kw, sem)[:LIMIT]])

    modes: dict[str, Ranker] = {
        "keyword (spec ranking)": lambda q: of(engine.keyword(q, LIMIT)),
        "keyword rank=bm25": lambda q: of(engine.bm25(q, LIMIT)),
        "bm25s (reference)": bm25s_rank,
        "semantic": lambda q: of(engine.semantic(q, LIMIT)),
        "hybrid (service)": lambda q: of(engine.hybrid(q, LIMIT)),
        "hybrid RRF k=60": lambda q: fused(
            q, lambda kw, sem: fusion.rrf([[i for i, _ in kw], [i for i, _ in sem]])
        ),
    }

    def convex_at(alpha: float) -> Ranker:
        return lambda q: fused(q, lambda kw, sem: fusion.convex(kw, sem, alpha))

    for alpha in (0.3, 0.4, 0.5, 0.6, 0.7):
        modes[f"hybrid convex a={alpha}"] = convex_at(alpha)
    return modes


async def measure(collection: Collection, provider: LocalProvider, tmp: Path) -> None:
    engine = await build(collection, provider, tmp)
    chunks = engine.db.stats()[1]
    print(
        f"\n{collection.name}: {len(collection.docs)} documents ({chunks} chunks), "
        f"{len(collection.queries)} judged queries"
    )
    print("| mode | nDCG@10 | R@100 | MRR@10 | median ms/query |\n|---|---|---|---|---|")
    for mode, rank in rankers(engine, collection).items():
        ndcg, recall, mrr, times = [], [], [], []
        for q, text in collection.queries.items():
            started = time.perf_counter()
            ranked = await rank(text)
            times.append((time.perf_counter() - started) * 1000)
            ndcg.append(ndcg_at(ranked, collection.qrels[q]))
            recall.append(recall_at(ranked, collection.qrels[q]))
            mrr.append(mrr_at(ranked, collection.qrels[q]))
        print(
            f"| {mode} | {np.mean(ndcg):.3f} | {np.mean(recall):.3f} | {np.mean(mrr):.3f} "
            f"| {np.median(times):.1f} |"
        )
    engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("collections", nargs="+", help="NAME=DIR (cranfield, cisi, beir:NAME)")
    parser.add_argument(
        "--runtime",
        choices=RUNTIMES,
        help="the local model's runtime (EMBEDDING_RUNTIME); default: the service's default",
    )
    args = parser.parse_args()
    loaded = []
    for spec in args.collections:
        name, _, folder = spec.partition("=")
        if name == "cranfield":
            loaded.append(load_cranfield(Path(folder)))
        elif name == "cisi":
            loaded.append(load_cisi(Path(folder)))
        elif name.startswith("beir:"):
            loaded.append(load_beir(name[5:], Path(folder)))
        else:
            raise SystemExit(f"unknown collection {name!r}")
    provider = LocalProvider(runtime=args.runtime)
    print(
        "search relevance: every mode asked for 100 chunks through the engine, documents by "
        f"their best chunk; local model all-MiniLM-L6-v2 ({provider.model.runtime}, vector "
        f"space {provider.fingerprint})"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for collection in loaded:
            asyncio.run(measure(collection, provider, Path(tmp)))


if __name__ == "__main__":
    main()
