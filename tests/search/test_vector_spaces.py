"""Two vector spaces are never mixed: a database embedded by float32 and opened with the int8
runtime (the default where OpenVINO is not used) drops its vectors and embeds everything again
in the new space before semantic search finds it again; queries are embedded (and cached) in
the space of the documents."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from actors.search.embed.embedding import LocalProvider
from actors.search.embed.query_cache import QueryCache
from actors.search.engine import Engine
from actors.search.index.store import DocumentState, Replace, vector_key
from tests.search.references import CALIBRATION


async def embed_all(engine: Engine) -> None:
    while await engine.embed_next() is not None:
        pass


def stored(engine: Engine) -> np.ndarray:
    """The stored vectors' 384 real dimensions (stored in half precision)."""
    _, vectors = engine.db.all_vectors()
    return np.asarray(vectors, dtype=np.float32)[:, :384]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1))


async def test_another_runtime_embeds_everything_again_in_its_own_space(tmp_path: Path) -> None:
    float32, int8 = LocalProvider(runtime="onnx"), LocalProvider(runtime="onnx-int8")
    assert int8.model.runtime == "onnx-int8"  # its agreement check passes on this CPU
    cache = QueryCache(tmp_path / "cache.sqlite")
    chunks = CALIBRATION[:12]

    def engine(provider: LocalProvider) -> Engine:
        opened = Engine("notes", tmp_path / "notes", tmp_path / "inbox", provider, cache)
        opened.open_vectors()
        return opened

    first = engine(float32)
    first.db.write([Replace("notes.txt", DocumentState(1, 1, "x"), chunks)])
    await embed_all(first)
    assert cosines(stored(first), float32.model.encode(chunks)).min() > 0.99999
    query = "the machine went down when its storage filled up"
    before = [row.content for row in await first.semantic(query, 3)]
    assert before and before[0] == chunks[10]  # "Our server crashed because the disk was full."
    first.close()

    second = engine(int8)
    progress = second.db.progress()
    assert (progress.embedded, progress.pending) == (0, len(chunks))  # float32's are gone
    assert await second.semantic(query, 3) == []  # nothing of the old space answers
    # What the embedder takes next, in its order: int8 activations share a scale per batch,
    # so the vectors to expect are those of the same call.
    batch = second.db.pending(128)
    texts = [text for _, text in batch]
    mine_want = np.concatenate(await int8.embed_chunks(texts))[:, :384]
    other_want = np.concatenate(await float32.embed_chunks(texts))[:, :384]
    await embed_all(second)
    keys, vectors = second.db.all_vectors()
    got = np.asarray(vectors, dtype=np.float32)[np.argsort(keys)][:, :384]
    order = np.argsort([vector_key(chunk_id, 0) for chunk_id, _ in batch])
    mine, other = cosines(got, mine_want[order]), cosines(got, other_want[order])
    assert mine.min() > 0.99999 and other.max() < 0.9999  # int8's vectors, not float32's
    # The query is embedded by int8 too (not taken from float32's cached vector).
    vector = (await second.query_vector(query))[None, :384]
    assert cosines(vector, int8.model.encode([query])) > cosines(
        vector, float32.model.encode([query])
    )
    after = [row.content for row in await second.semantic(query, 3)]
    assert after[0] == before[0]
    second.close()
    cache.close()
