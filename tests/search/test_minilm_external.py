"""The default runtime's model file keeps no copy of the weights (issue 32: the install's
footprint): its initializers point into the bundled model.safetensors, and ONNX Runtime gives
exactly the vectors of the self-contained float32 file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from actors.search.embed import minilm, minilm_onnx


def batch(model: minilm.MiniLM, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    ids = model._ids(texts)
    ids_array = np.zeros((len(ids), max(map(len, ids))), np.int64)
    mask = np.zeros_like(ids_array)
    for row, seq in enumerate(ids):
        ids_array[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    return ids_array, mask


def test_the_referencing_file_is_small_and_gives_the_same_vectors(tmp_path: Path) -> None:
    directory = minilm.model_dir()
    referencing = minilm_onnx.referencing_model_file(directory, tmp_path)
    weights = (directory / "model.safetensors").stat().st_size
    # The position table (token type folded in, 0.8 MB) and small constants stay inside.
    assert referencing.stat().st_size < 1_500_000 < weights
    full = minilm_onnx.model_file(directory, tmp_path)
    assert full.stat().st_size > 0.9 * weights

    model = minilm.MiniLM.load(runtime="numpy")
    ids, mask = batch(model, ["A kitten resting on a rug", "x", "東京タワー", "Proxmox " * 200])
    got = minilm_onnx.session_runner(referencing, weights=directory)(ids, mask)
    want = minilm_onnx.session_runner(full)(ids, mask)
    assert np.array_equal(got, want)


def test_every_large_weight_points_into_the_safetensors_file(tmp_path: Path) -> None:
    directory = minilm.model_dir()
    graph = onnx.load(
        str(minilm_onnx.referencing_model_file(directory, tmp_path)), load_external_data=False
    ).graph
    external = [i for i in graph.initializer if i.data_location == onnx.TensorProto.EXTERNAL]
    inside = [i for i in graph.initializer if i.data_location != onnx.TensorProto.EXTERNAL]
    assert {e.value for i in external for e in i.external_data if e.key == "location"} == {
        "model.safetensors"
    }
    # The word table, and per layer its 6 matrices and the feed-forward's 1536-wide bias
    # (vectors under 1024 values stay inside, as does the position table).
    assert len(external) == 1 + 6 * 7
    assert all(np.prod(i.dims) < 512 * 384 + 1 for i in inside)
    # Each stored transpose is turned back by a node before anything reads it.
    transposes = [
        n for n in graph.node if n.op_type == "Transpose" and n.input[0].endswith(".stored")
    ]
    assert len(transposes) == 6 * 6
    nodes = list(graph.node)
    first_reader = min(i for i, n in enumerate(nodes) if any(x.endswith(".w") for x in n.input))
    assert all(nodes.index(n) < first_reader for n in transposes)


def test_built_once_per_key(tmp_path: Path) -> None:
    directory = minilm.model_dir()
    first = minilm_onnx.referencing_model_file(directory, tmp_path)
    stamp = first.stat().st_mtime_ns
    assert minilm_onnx.referencing_model_file(directory, tmp_path) == first
    assert first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]


def test_the_int8_file_keeps_only_its_int8_matrices(tmp_path: Path) -> None:
    """Its float32 products (word table, attention and feed-forward outputs) point into the
    weights too; its vectors agreeing with float32 is test_minilm_onnx's int8 test."""
    directory = minilm.model_dir()
    int8 = minilm_onnx.model_file(directory, tmp_path, int8=True)
    assert int8.stat().st_size < 10_000_000
    graph = onnx.load(str(int8), load_external_data=False).graph
    external = {i.name for i in graph.initializer if i.data_location == onnx.TensorProto.EXTERNAL}
    assert "word" in external
    assert {f"layer{i}.ffn_out.w.stored" for i in range(6)} <= external
