"""The local embedder on ONNX Runtime: the graph built from the bundled weights is the numpy
forward pass (the default runtime: same vectors, same rankings), the int8 variant stays within
cosine 0.99, long texts are embedded window by window, and the numpy path stays available."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from actors.search.embed import embedding, minilm, minilm_onnx
from actors.search.embed.embedding import LocalProvider
from actors.search.ingest.chunker import chunk_text
from tests.search.references import CALIBRATION, GOLDEN


@pytest.fixture(scope="module")
def onnx_model() -> minilm.MiniLM:
    return LocalProvider(runtime="onnx").model


@pytest.fixture(scope="module")
def quantized() -> minilm.MiniLM:
    # The int8 file itself, without the provider's check (which would fall back to float32).
    return minilm.MiniLM.load(runtime="onnx-int8")


def test_the_float32_graph_is_the_numpy_forward_pass(reference: minilm.MiniLM) -> None:
    model = minilm_onnx.float32_model(minilm.model_dir())
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    texts = ["A kitten resting on a rug", GOLDEN["items"][-1]["text"], "x", "東京タワー"]
    ids = reference._ids(texts)
    width = max(map(len, ids))
    batch = np.zeros((len(ids), width), np.int64)
    mask = np.zeros_like(batch)
    for row, seq in enumerate(ids):
        batch[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    (got,) = session.run(["embedding"], {"input_ids": batch, "attention_mask": mask})
    want = reference.encode(texts)
    assert np.allclose(got, want, atol=2e-5)


def test_onnx_float32_shares_the_numpy_vector_space(
    reference: minilm.MiniLM, onnx_model: minilm.MiniLM
) -> None:
    texts = CALIBRATION + [item["text"] for item in GOLDEN["items"]]
    assert np.allclose(onnx_model.encode(texts, workers=2), reference.encode(texts), atol=2e-5)
    assert LocalProvider(runtime="onnx").fingerprint == LocalProvider(runtime="numpy").fingerprint
    assert (
        LocalProvider(runtime="onnx-int8").fingerprint != LocalProvider(runtime="onnx").fingerprint
    )


def test_int8_vectors_agree_with_the_reference_in_any_batch(
    reference: minilm.MiniLM, quantized: minilm.MiniLM
) -> None:
    """Cosine >= 0.99 with the numpy (float32) vectors for every calibration sentence and
    golden text, alone and in shuffled batches (int8 activations share a scale per batch)."""
    texts = CALIBRATION + [item["text"] for item in GOLDEN["items"]]
    want = reference.encode(texts)
    rng = np.random.default_rng(3)
    worst = 1.0
    for _ in range(3):
        order = rng.permutation(len(texts))
        got = np.zeros_like(want)
        for start in range(0, len(texts), 16):
            members = order[start : start + 16]
            got[members] = quantized.encode([texts[i] for i in members])
        worst = min(worst, float((got * want).sum(axis=1).min()))
    alone = np.concatenate([quantized.encode([t]) for t in texts])
    worst = min(worst, float((alone * want).sum(axis=1).min()))
    assert worst >= 0.99
    # And against sentence-transformers itself.
    for item, vector in zip(GOLDEN["items"], alone[len(CALIBRATION) :], strict=True):
        assert float(vector @ np.asarray(item["embedding"])) >= 0.99, item["text"][:40]


def test_onnx_float32_finds_the_same_top_ten(
    reference: minilm.MiniLM, onnx_model: minilm.MiniLM
) -> None:
    """Queries over the calibration corpus: the same ten best documents (as a set) in at least
    95% of them (the int8 variant fails this: see docs/search.md)."""
    corpus = CALIBRATION + [item["text"] for item in GOLDEN["items"]]
    queries = [" ".join(s.split()[:4]) for s in CALIBRATION] + [
        "a kitten on a rug",
        "paying invoices",
        "the disk was full",
        "late trains",
    ]
    tops = [
        np.argsort(-(model.encode(queries) @ model.encode(corpus).T), axis=1)[:, :10]
        for model in (reference, onnx_model)
    ]
    same = sum(set(a) == set(b) for a, b in zip(*tops, strict=True))
    assert same >= 0.95 * len(queries)


def test_windows_cover_every_token_once(onnx_model: minilm.MiniLM) -> None:
    long_text = " ".join(item["text"] for item in GOLDEN["items"]) * 2
    (windows,) = onnx_model.windows([long_text])
    whole = onnx_model.tokenizer.encode(long_text, add_special_tokens=False).ids
    assert len(whole) > 3 * minilm.WINDOW
    assert all(len(w) <= minilm.WINDOW for w in windows)
    assert all(w[0] == onnx_model.cls_id and w[-1] == onnx_model.sep_id for w in windows)
    assert [i for w in windows for i in w[1:-1]] == whole
    # Windows are of even size, and cut between words.
    sizes = [len(w) for w in windows]
    assert max(sizes) - min(sizes) <= 24
    for w in windows[1:]:
        assert not str(onnx_model.tokenizer.id_to_token(w[1])).startswith("##")
    assert onnx_model.windows(["", "a cat"]) == [
        [[onnx_model.cls_id, onnx_model.sep_id]],
        [onnx_model._ids(["a cat"])[0]],
    ]


def test_a_chunk_is_embedded_window_by_window(onnx_model: minilm.MiniLM) -> None:
    short = "The cat sat on the mat and purred."
    long_text = " ".join(["Invoices must be paid within thirty days of receipt."] * 30)
    short_vectors, long_vectors = onnx_model.encode_windows([short, long_text])
    assert short_vectors.shape == (1, minilm.DIMENSION)
    assert np.allclose(short_vectors[0], onnx_model.encode([short])[0], atol=1e-5)
    assert len(long_vectors) == len(onnx_model.windows([long_text])[0]) > 1
    assert np.allclose(np.linalg.norm(long_vectors, axis=1), 1, atol=1e-5)


def test_the_model_files_are_built_once_per_key(tmp_path: Path) -> None:
    directory = minilm.model_dir()
    int8 = minilm_onnx.model_file(directory, tmp_path, int8=True)
    float32 = minilm_onnx.model_file(directory, tmp_path)
    stamps = [int8.stat().st_mtime_ns, float32.stat().st_mtime_ns]
    assert minilm_onnx.model_file(directory, tmp_path, int8=True) == int8
    assert minilm_onnx.model_file(directory, tmp_path) == float32
    assert [int8.stat().st_mtime_ns, float32.stat().st_mtime_ns] == stamps
    # No temporary left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([int8.name, float32.name])
    # Query, key, value and ffn_in of six layers (6.2 M weights) in one byte instead of four:
    # 18.6 MB less (the 47 MB word table and the other products stay float32).
    assert float32.stat().st_size - int8.stat().st_size > 18_000_000


def test_without_onnxruntime_the_numpy_path_is_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = embedding.importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "onnxruntime" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(embedding.importlib.util, "find_spec", find_spec)
    with caplog.at_level(logging.WARNING):
        provider = LocalProvider()
    assert provider.model.runtime == "numpy"
    assert "onnxruntime is not installed" in caplog.text
    # Same vectors as the default runtime: nothing is embedded again.
    assert provider.fingerprint == LocalProvider(runtime="onnx").fingerprint


def test_chunks_as_the_indexer_embeds_them_get_the_reference_vectors(
    reference: minilm.MiniLM, onnx_model: minilm.MiniLM
) -> None:
    """The indexer's path: chunker-cut documents, every token in windows, batches planned by
    length over two threads: the default runtime's vectors are the numpy pass's."""
    paragraphs = [" ".join(CALIBRATION[i : i + 6]) for i in range(0, len(CALIBRATION), 3)]
    chunks = chunk_text("\n\n".join(paragraphs * 3))
    assert len(chunks) > 8
    got = onnx_model.encode_windows(chunks, workers=2)
    want = reference.encode_windows(chunks)
    assert [len(g) for g in got] == [len(w) for w in want]
    assert all(np.allclose(g, w, atol=2e-5) for g, w in zip(got, want, strict=True))


def test_int8_quantizes_only_the_products_reading_a_layer_norm() -> None:
    model = minilm_onnx.build_graph(minilm.load_weights(minilm.model_dir()))
    chosen = minilm_onnx.quantized_products(model)
    assert len(chosen) == 6 * 4
    assert {name.split(".", 1)[1] for name in chosen} == {"query", "key", "value", "ffn_in"}


def test_the_provider_keeps_int8_only_where_it_agrees(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On this CPU int8 agrees, and the provider keeps it; where it would not (a bar no model
    can pass stands in for a CPU whose kernels drift), it embeds with float32 and says so."""
    embedding._shared_minilm.cache_clear()
    loaded: list[str] = []
    real_load = embedding._load

    def load(runtime: str) -> minilm.MiniLM:
        loaded.append(runtime)
        return real_load(runtime)

    monkeypatch.setattr(embedding, "_load", load)
    try:
        with caplog.at_level(logging.DEBUG):
            kept = LocalProvider(runtime="onnx-int8")
        assert kept.model.runtime == "onnx-int8"
        assert "agree with float32 on this CPU" in caplog.text
        # Checked against the stored float32 vectors: the float32 model is not loaded for it.
        assert loaded == ["onnx-int8"]
        embedding._shared_minilm.cache_clear()
        caplog.clear()
        monkeypatch.setattr(embedding, "INT8_AGREEMENT", 1.01)
        with caplog.at_level(logging.WARNING):
            refused = LocalProvider(runtime="onnx-int8")
        assert refused.model.runtime == "onnx"
        assert "onnx-int8 refused on this CPU" in caplog.text
        assert refused.fingerprint == LocalProvider(runtime="onnx").fingerprint
        assert refused.fingerprint != kept.fingerprint
    finally:
        embedding._shared_minilm.cache_clear()


def test_the_stored_calibration_vectors_are_float32s(onnx_model: minilm.MiniLM) -> None:
    """`calibration_f32.npy` (what int8 is checked against at start) is what the float32 model
    gives now; if this fails, regenerate it: python -m actors.search.embed.embedding reference."""
    stored = np.load(embedding.REFERENCE_FILE)
    assert np.allclose(stored, embedding.calibration_vectors(onnx_model), atol=2e-5)
