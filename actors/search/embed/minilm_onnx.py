"""all-MiniLM-L6-v2 as an ONNX graph, run by ONNX Runtime.

The graph is built here from the same bundled safetensors weights that `minilm.py` reads, with
the `onnx` package's helper API and standard operators only: it is the same BERT encoder, node
for node (embeddings and LayerNorm, six post-norm layers of 12-head attention with the padding
mask and an exact-GELU feed-forward, mean pooling over real tokens, L2 normalisation). No torch,
no export, nothing fetched. The float32 model gives the numpy forward pass's vectors (within
2e-5), about 1.3x faster on this CPU, whose float32 products already ran near peak in numpy.

An int8 variant (`EMBEDDING_RUNTIME=onnx-int8`) stores some weight matrices as int8, one scale
per output column, with ONNX Runtime's dynamic quantization (`quantize_dynamic`), whose
activations share one scale per product and batch. Only the products that read a LayerNorm's
output are quantized: query, key, value and the feed-forward's first matrix (`INT8_PRODUCTS`).
The two others read activations with large outliers, the attention's context and the GELU
output: measured alone in int8, the attention output product dropped the worst calibration
sentence to cosine 0.976 and the feed-forward's second one to 0.990, where the chosen four keep
it at 0.992 (all six: 0.960). Weights use 7 bits (`reduce_range`) so no CPU's int8 kernels
saturate, and `embedding` checks the agreement again on the machine that runs it. It runs ~1.4x
faster than float32 on this CPU (AVX2 without VNNI: int8 products are ~2x at best). It is not
the default because it does not keep rankings: on our own docs only ~35% of queries kept exactly
the same ten best chunks (see docs/search.md and `ops/bench/search.py --agreement`).

Both model files are derived data, built on first use (~2 s, int8 ~4 s) into a cache directory
(`$XDG_CACHE_HOME/cairn/models`) keyed by the weights' size and mtime, this builder's version
and the runtime's version, and written atomically.

The ONNX Runtime files do not copy the weights (87 MB) into the cache: `referencing_model_file`
keeps the same graph with every weight that is a checkpoint tensor (or its transpose) stored as
ONNX external data pointing into the bundled `model.safetensors` (raw little-endian float32 at
known offsets), a transpose becoming a node that ONNX Runtime folds at load. The file is ~1 MB
(the int8 one ~7 MB: its int8 matrices); `session_runner(..., weights=directory)` loads either
with the weights read from there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file

from actors.search.embed.minilm_weights import DIMENSION, Weights, load_weights

log = logging.getLogger(__name__)

# Bump when the graph or the quantization choices change: the cached file is then rebuilt.
BUILDER_VERSION = 3
# Weight products stored as int8, by the end of their name (see the module docstring).
INT8_PRODUCTS = (".query", ".key", ".value", ".ffn_in")
OPSET = 20


def build_graph(weights: Weights) -> object:
    """The float32 model: inputs `input_ids`, `attention_mask` (int64, batch x tokens); output
    `embedding` (float32, batch x 384, unit length)."""
    from onnx import TensorProto, helper, numpy_helper

    initializers: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(kind: str, *inputs: str, name: str | None = None, **attributes: Any) -> str:
        out = name or f"{kind}_{len(nodes)}"
        nodes.append(helper.make_node(kind, list(inputs), [out], name=out, **attributes))
        return out

    def linear(x: str, w: np.ndarray, b: np.ndarray, name: str) -> str:
        # Checkpoint matrices are (out, in); MatMul wants (in, out).
        product = op("MatMul", x, const(f"{name}.w", np.ascontiguousarray(w.T)), name=name)
        return op("Add", product, const(f"{name}.b", b))

    def layer_norm(x: str, g: np.ndarray, b: np.ndarray, name: str) -> str:
        return op(
            "LayerNormalization",
            x,
            const(f"{name}.g", g),
            const(f"{name}.b", b),
            axis=-1,
            epsilon=weights.eps,
        )

    heads = weights.heads
    head_dim = DIMENSION // heads
    one = const("one", np.array(1, np.int64))
    length = op("Gather", op("Shape", "input_ids"), one, axis=0)
    positions = op("Range", const("zero", np.array(0, np.int64)), length, one)
    # Every input is one segment, so token type 0 is folded into the position table.
    position_table = const("position", weights.position + weights.token_type0)
    x = op(
        "Add",
        op("Gather", const("word", weights.word), "input_ids", axis=0),
        op("Gather", position_table, positions, axis=0),
    )
    x = layer_norm(x, weights.ln_g, weights.ln_b, "embeddings.ln")

    mask = op("Cast", "attention_mask", to=TensorProto.FLOAT)
    # Padded keys get the most negative float, as in the reference, so they weigh exactly 0.
    padding = op("Sub", const("one_f", np.array(1.0, np.float32)), mask)
    lowest = const("lowest", np.array(np.finfo(np.float32).min, np.float32))
    key_bias = op("Unsqueeze", op("Mul", padding, lowest), const("axes_1_2", np.array([1, 2])))
    split_heads = const("split_heads", np.array([0, 0, heads, head_dim]))
    join_heads = const("join_heads", np.array([0, 0, DIMENSION]))
    scale = const("scale", np.array(np.sqrt(head_dim), np.float32))

    def heads_of(projection: str, perm: list[int]) -> str:
        return op("Transpose", op("Reshape", projection, split_heads), perm=perm)

    for i, layer in enumerate(weights.layers):
        p = f"layer{i}"
        w, b = layer.qkv_w, layer.qkv_b
        q = heads_of(linear(x, w[:DIMENSION], b[:DIMENSION], f"{p}.query"), [0, 2, 1, 3])
        k = heads_of(
            linear(x, w[DIMENSION:-DIMENSION], b[DIMENSION:-DIMENSION], f"{p}.key"), [0, 2, 3, 1]
        )
        v = heads_of(linear(x, w[-DIMENSION:], b[-DIMENSION:], f"{p}.value"), [0, 2, 1, 3])
        scores = op("Add", op("Div", op("MatMul", q, k), scale), key_bias)
        context = op("MatMul", op("Softmax", scores, axis=-1), v)
        context = op("Reshape", op("Transpose", context, perm=[0, 2, 1, 3]), join_heads)
        attended = linear(context, layer.out_w, layer.out_b, f"{p}.attention_out")
        x = layer_norm(op("Add", attended, x), layer.ln1_g, layer.ln1_b, f"{p}.ln1")
        hidden = op("Gelu", linear(x, layer.ffn_in_w, layer.ffn_in_b, f"{p}.ffn_in"))
        out = linear(hidden, layer.ffn_out_w, layer.ffn_out_b, f"{p}.ffn_out")
        x = layer_norm(op("Add", out, x), layer.ln2_g, layer.ln2_b, f"{p}.ln2")

    # Mean over real tokens, then unit length.
    weight = op("Unsqueeze", mask, const("axis_2", np.array([2])))
    axis_1 = const("axis_1", np.array([1]))
    total = op("ReduceSum", op("Mul", x, weight), axis_1, keepdims=0)
    count = op("ReduceSum", weight, axis_1, keepdims=0)
    count = op("Max", count, const("tiny", np.array(1e-9, np.float32)))
    op("LpNormalization", op("Div", total, count), axis=-1, p=2, name="embedding")

    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", DIMENSION])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9  # what current runtimes read
    return model


def quantized_products(model: object) -> list[str]:
    """Names of the weight products to store as int8: the MatMuls with a constant right-hand
    side named in `INT8_PRODUCTS`."""
    constants = {init.name for init in model.graph.initializer}  # type: ignore[attr-defined]
    return [
        node.name
        for node in model.graph.node  # type: ignore[attr-defined]
        if node.op_type == "MatMul"
        and node.input[1] in constants
        and node.name.endswith(INT8_PRODUCTS)
    ]


def cache_key(directory: Path) -> str:
    import onnxruntime

    stat = (directory / "model.safetensors").stat()
    raw = f"{BUILDER_VERSION}:{onnxruntime.__version__}:{stat.st_size}:{stat.st_mtime_ns}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cairn" / "models"


def model_file(directory: Path, cache_dir: Path | None = None, *, int8: bool = False) -> Path:
    """The float32 (or int8) model file for the weights in `directory`, built into `cache_dir`
    if missing. The float32 file holds every weight (OpenVINO reads it); the int8 one points
    into `directory` for the weights it keeps in float32 (`externalize`): run it with
    `session_runner(path, weights=directory)`. Loading a file costs a fraction of the memory
    of building in memory (peak RSS 196 MB against 426 MB, measured), and only the first start
    of a machine builds."""
    cache_dir = cache_dir or default_cache_dir()
    kind = "int8" if int8 else "float32"
    target = cache_dir / f"all-minilm-l6-v2.{cache_key(directory)}.{kind}.onnx"
    if target.is_file():
        return target
    import onnx

    log.info("building the %s ONNX model of all-MiniLM-L6-v2 into %s", kind, cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    model = build_graph(load_weights(directory))
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        built = Path(tmp) / "float32.onnx"
        onnx.save(model, str(built))  # type: ignore[arg-type]
        if int8:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            source, built = built, Path(tmp) / "int8.onnx"
            quantize_dynamic(
                source,
                built,
                weight_type=QuantType.QInt8,
                per_channel=True,
                # 7-bit weights: a u8 x s7 pair sum cannot saturate the 16-bit adds that AVX2
                # and AVX-512 without VNNI use, so the vectors do not depend on the CPU (with
                # 8 bits the same file gave cosine 0.96 on another machine of this kind).
                reduce_range=True,
                op_types_to_quantize=["MatMul"],
                nodes_to_quantize=quantized_products(model),
            )
            # The products left in float32 (the word table, attention output, feed-forward
            # output) stay in model.safetensors: 72 MB -> 7 MB.
            quantized = externalize(onnx.load(str(built)), directory)
            built.write_bytes(quantized.SerializeToString())
        built.replace(target)
    return target


def safetensors_index(path: Path) -> dict[str, tuple[str, list[int], int, int]]:
    """name -> (dtype, shape, offset, length) of every tensor in a safetensors file, offsets
    from the start of the file (an 8-byte little-endian header size, the JSON header, then the
    data)."""
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    start = 8 + size
    return {
        name: (
            entry["dtype"],
            list(entry["shape"]),
            start + entry["data_offsets"][0],
            entry["data_offsets"][1] - entry["data_offsets"][0],
        )
        for name, entry in header.items()
        if name != "__metadata__"
    }


def externalize(model: Any, directory: Path) -> Any:
    """`model` with each initializer that is a float32 tensor of `directory/model.safetensors`
    (or its transpose) replaced by external data pointing into that file (a transpose through
    a Transpose node). The others (the position table with the token type folded in, small
    constants) stay inside."""
    from onnx import TensorProto, helper, numpy_helper

    weights = directory / "model.safetensors"
    index = safetensors_index(weights)
    raw = load_file(str(weights))
    # The bytes of every float32 tensor and of its transpose -> (name, transposed).
    found: dict[bytes, tuple[str, bool]] = {}
    for name, array in raw.items():
        if index[name][0] != "F32" or array.size < 1024:
            continue
        found[hashlib.sha256(np.ascontiguousarray(array).tobytes()).digest()] = (name, False)
        if array.ndim == 2:
            digest = hashlib.sha256(np.ascontiguousarray(array.T).tobytes()).digest()
            found.setdefault(digest, (name, True))
    kept, transposes = [], []
    for init in model.graph.initializer:
        value = numpy_helper.to_array(init)
        hit = None
        if value.dtype == np.float32 and value.size >= 1024:
            hit = found.get(hashlib.sha256(np.ascontiguousarray(value).tobytes()).digest())
        if hit is None:
            kept.append(init)
            continue
        source, transposed = hit
        _, shape, offset, length = index[source]
        ref = TensorProto()
        ref.name = f"{init.name}.stored" if transposed else init.name
        ref.data_type = TensorProto.FLOAT
        ref.dims.extend(shape)
        ref.data_location = TensorProto.EXTERNAL
        for key, text in (("location", weights.name), ("offset", offset), ("length", length)):
            entry = ref.external_data.add()
            entry.key, entry.value = key, str(text)
        kept.append(ref)
        if transposed:
            transposes.append(helper.make_node("Transpose", [ref.name], [init.name], perm=[1, 0]))
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    nodes = transposes + list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def referencing_model_file(directory: Path, cache_dir: Path | None = None) -> Path:
    """The float32 model of `directory` with its weights left in `model.safetensors`
    (`externalize`), built into `cache_dir` if missing; run it with
    `session_runner(path, weights=directory)`."""
    cache_dir = cache_dir or default_cache_dir()
    target = cache_dir / f"all-minilm-l6-v2.{cache_key(directory)}.float32-ref.onnx"
    if target.is_file():
        return target
    log.info("building the float32 ONNX graph of all-MiniLM-L6-v2 into %s", cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    model = externalize(build_graph(load_weights(directory)), directory)
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        built = Path(tmp) / "float32-ref.onnx"
        built.write_bytes(model.SerializeToString())
        built.replace(target)
    return target


def float32_model(directory: Path) -> bytes:
    """The serialized float32 model of the weights in `directory`, built in memory."""
    return bytes(build_graph(load_weights(directory)).SerializeToString())  # type: ignore[attr-defined]


def session_runner(
    model: bytes | Path, *, weights: Path | None = None
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A forward pass over `path`: (ids, mask) -> unit vectors. One session serves any number
    of threads; each call runs on its caller's thread alone (intra-op threads 1), so callers
    decide the parallelism and a query never waits for a thread pool busy with a batch.
    `weights`: the folder the model's external data is in (`referencing_model_file`)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if weights is not None:
        # Loaded as bytes, with the external data read from `weights`: ONNX Runtime refuses a
        # path outside the model file's own folder.
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(weights)
        )
        model = Path(model).read_bytes() if not isinstance(model, bytes) else model
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # Fusing Add+LayerNormalization into SkipLayerNormalization made the int8 graph ~15%
    # slower here and the float32 one no faster (measured, ORT 1.32).
    session = ort.InferenceSession(
        model if isinstance(model, bytes) else str(model),
        options,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=["SkipLayerNormFusion"],
    )

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        (vectors,) = session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})
        return np.asarray(vectors, dtype=np.float32)

    return run
