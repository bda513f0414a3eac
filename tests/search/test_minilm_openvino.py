"""The local embedder on OpenVINO (bfloat16 products where the CPU has them, float32 elsewhere):
its vectors stay in the float32 space (cosine >= 0.999 with the numpy reference and with
sentence-transformers' own vectors), its rankings are the reference's, its work runs on the
calling thread (so the embedding threads' low priority applies), and it is the default only
where it is installed and the CPU multiplies in bfloat16 (ONNX Runtime int8 elsewhere)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from actors.search.embed import embedding, minilm, minilm_openvino
from actors.search.embed.embedding import LocalProvider, default_runtime
from actors.search.ingest.chunker import chunk_text
from tests.search.references import CALIBRATION, GOLDEN


@pytest.fixture(scope="module")
def provider() -> LocalProvider:
    # OpenVINO is an optional extra: without it only the choice of runtime is tested here.
    pytest.importorskip("openvino")
    return LocalProvider(runtime="openvino")


def test_documents_stay_in_the_float32_space(
    reference: minilm.MiniLM, provider: LocalProvider
) -> None:
    """Every calibration sentence and golden text, in batches over two threads and alone."""
    texts = CALIBRATION + [item["text"] for item in GOLDEN["items"]]
    want = reference.encode(texts)
    together = provider.model.encode(texts, workers=2)
    alone = np.concatenate([provider.model.encode([t]) for t in texts])
    assert (together * want).sum(axis=1).min() >= 0.999
    assert (alone * want).sum(axis=1).min() >= 0.999
    golden = np.array([item["embedding"] for item in GOLDEN["items"]], dtype=np.float32)
    got = provider.model.encode([item["text"] for item in GOLDEN["items"]])
    assert (got * golden).sum(axis=1).min() >= 0.999


def test_long_chunks_are_embedded_window_by_window(
    reference: minilm.MiniLM, provider: LocalProvider
) -> None:
    paragraphs = [" ".join(CALIBRATION[i : i + 6]) for i in range(0, len(CALIBRATION), 3)]
    chunks = chunk_text("\n\n".join(paragraphs * 3))
    got = provider.model.encode_windows(chunks, workers=2)
    want = reference.encode_windows(chunks)
    assert [len(g) for g in got] == [len(w) for w in want]
    assert min(float((g * w).sum(axis=1).min()) for g, w in zip(got, want, strict=True)) >= 0.999


def test_rankings_are_the_references(reference: minilm.MiniLM, provider: LocalProvider) -> None:
    """As the service ranks: documents by OpenVINO, queries by the query model (float32); the
    same ten best documents (as a set) in at least 95% of the queries."""
    corpus = CALIBRATION + [item["text"] for item in GOLDEN["items"]]
    queries = [" ".join(s.split()[:4]) for s in CALIBRATION] + ["paying invoices", "late trains"]
    want = np.argsort(-(reference.encode(queries) @ reference.encode(corpus).T), axis=1)[:, :10]
    scores = provider.query_model.encode(queries) @ provider.model.encode(corpus, workers=2).T
    got = np.argsort(-scores, axis=1)[:, :10]
    same = sum(set(a) == set(b) for a, b in zip(want, got, strict=True))
    assert same >= 0.95 * len(queries)


def test_it_shares_the_float32_fingerprint_and_embeds_queries_in_float32(
    provider: LocalProvider,
) -> None:
    assert provider.model.runtime == "openvino"
    assert provider.query_model.runtime == "onnx"
    assert provider.fingerprint == LocalProvider(runtime="onnx").fingerprint


def test_the_work_runs_on_the_calling_thread(provider: LocalProvider) -> None:
    """Nearly all the CPU time of a batch is the calling thread's own: nothing runs on a pool
    of OpenVINO's at the service's priority while the embedding threads are niced."""
    texts = CALIBRATION * 4
    provider.model.encode(texts[:4])  # a compiled model is ready, as in a running service
    spent: dict[str, float] = {}

    def embed() -> None:
        started = time.thread_time()
        provider.model.encode(texts)
        spent["thread"] = time.thread_time() - started

    process = time.process_time()
    worker = threading.Thread(target=embed)
    worker.start()
    worker.join()
    spent["process"] = time.process_time() - process
    assert spent["thread"] >= 0.8 * spent["process"], spent


def test_two_callers_run_at_once_and_get_the_same_vectors(provider: LocalProvider) -> None:
    """Each caller borrows its own compiled model: concurrent calls neither wait for each
    other's request nor mix up their outputs."""
    texts = [CALIBRATION[:20], CALIBRATION[20:40]]
    want = [provider.model.encode(t) for t in texts]
    got: dict[int, np.ndarray] = {}
    barrier = threading.Barrier(2)

    def embed(i: int) -> None:
        barrier.wait()
        for _ in range(3):
            got[i] = provider.model.encode(texts[i])

    threads = [threading.Thread(target=embed, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(2):
        assert np.allclose(got[i], want[i], atol=1e-6)


@pytest.mark.parametrize(
    ("openvino_bf16", "onnxruntime", "chosen"),
    [
        (True, True, "openvino"),
        (False, True, "onnx-int8"),
        (True, False, "numpy"),
        (False, False, "numpy"),
    ],
)
def test_the_default_is_bfloat16_else_int8_else_numpy(
    openvino_bf16: bool, onnxruntime: bool, chosen: str
) -> None:
    assert default_runtime(openvino_bf16=openvino_bf16, onnxruntime=onnxruntime) == chosen


def test_without_openvino_the_default_is_onnx_runtime_int8(monkeypatch: pytest.MonkeyPatch) -> None:
    real = embedding.importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "openvino" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(embedding.importlib.util, "find_spec", find_spec)
    assert LocalProvider().model.runtime == "onnx-int8"


def test_the_default_follows_the_cpu() -> None:
    """Where OpenVINO reports bfloat16 products the default is OpenVINO, elsewhere ONNX
    Runtime with int8 weights: what this machine's CPU has decides, not a setting."""
    expected = "openvino" if minilm_openvino.bf16_capable() else "onnx-int8"
    assert LocalProvider().model.runtime == expected


def test_a_broken_openvino_falls_back_to_onnx_runtime(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A runtime that imports but cannot compile on this machine costs a warning, not the
    semantic half of search: the same vectors come from ONNX Runtime."""

    def broken(model_file: Path) -> object:
        def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
            raise RuntimeError("Exception from src/inference/src/cpp/core.cpp: no CPU plugin")

        return run

    monkeypatch.setattr(minilm_openvino, "runner", broken)
    embedding._shared_minilm.cache_clear()
    try:
        with caplog.at_level(logging.WARNING):
            provider = LocalProvider(runtime="openvino")
    finally:
        embedding._shared_minilm.cache_clear()
    assert provider.model.runtime == "onnx"
    assert "EMBEDDING_RUNTIME=openvino unavailable (Exception from" in caplog.text
    assert provider.fingerprint == LocalProvider(runtime="onnx").fingerprint
