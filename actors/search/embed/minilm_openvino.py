"""all-MiniLM-L6-v2 run by OpenVINO with bfloat16 matrix products, on CPUs that have units for
them (Intel AMX or AVX512-BF16): the same float32 ONNX graph as `minilm_onnx.py`, read by
OpenVINO's ONNX front end.

Why a second runtime: in float32 both ONNX Runtime and OpenVINO run this model at the cores'
float32 peak (the same 78 chunks/s on a 2-core Sapphire Rapids); ONNX Runtime's CPU provider has
no bfloat16 kernels on x86, while OpenVINO runs the products on AMX tiles, ~2.2x the chunks per
CPU second. bfloat16 keeps float32's range and 8 bits of mantissa: document vectors move by a
cosine of less than 1e-4 and scores by less than 0.003, so they stay in the float32 space
(`embedding.LocalProvider` embeds queries in float32 and says why).

Each call runs on its caller's thread: one compiled model per concurrent caller (1 thread, 1
stream, no pinning), so the thread's nice value applies to the work (a shared compiled model
runs requests on OpenVINO's own threads, at the service's priority, measured) and the caller
decides the parallelism, as with `minilm_onnx.session_runner`.

Public surface: `bf16_capable()`, `runner(model_file)`.
"""

from __future__ import annotations

import functools
import queue
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["bf16_capable", "runner"]


@functools.cache
def _core() -> Any:
    import openvino

    return openvino.Core()


def bf16_capable() -> bool:
    """OpenVINO is installed and its CPU plugin has bfloat16 products on this CPU."""
    try:
        capabilities = _core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    except (ImportError, RuntimeError):
        return False
    return "BF16" in capabilities


def runner(model_file: Path) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A forward pass over `model_file`: (ids, mask) -> unit vectors, in bfloat16 where the CPU
    has it (float32 elsewhere). Compiled models are kept in a pool and compiled on demand, so
    memory follows the largest number of simultaneous callers (the embedding threads: queries
    run on ONNX Runtime), each ~60 MB and ~0.3 s to compile."""
    core = _core()
    model = core.read_model(str(model_file))
    config = {
        "INFERENCE_PRECISION_HINT": "bf16" if bf16_capable() else "f32",
        "INFERENCE_NUM_THREADS": 1,
        "NUM_STREAMS": 1,
        # Pinned, every compiled model's one stream took core 0 and two callers ran in turn.
        "ENABLE_CPU_PINNING": False,
    }
    idle: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        try:
            request = idle.get_nowait()
        except queue.Empty:
            request = core.compile_model(model, "CPU", config).create_infer_request()
        try:
            outputs = request.infer({"input_ids": ids, "attention_mask": mask})
            # The output tensor is the request's own buffer, reused by its next call.
            return np.array(outputs[0], dtype=np.float32)
        finally:
            idle.put(request)

    return run
