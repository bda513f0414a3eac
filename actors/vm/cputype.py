"""The CPU model a new VM gets: the best built-in Proxmox model every node's CPU supports."""

from __future__ import annotations

# Instruction-set levels as QEMU defines its x86-64-vN models (flags from /proc/cpuinfo).
_V2 = {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}
_V3 = {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
_V4 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


def cpu_model_for_flags(flags: str) -> str:
    """The best built-in CPU model every flag set supports. `x86-64-v1` is not a Proxmox model
    (the original could emit it); below v2 we use `kvm64`."""
    have = set(flags.split())
    if not have >= _V2:
        return "kvm64"
    if not have >= _V3:
        return "x86-64-v2-AES" if "aes" in have else "x86-64-v2"
    if not have >= _V4:
        return "x86-64-v3"
    return "x86-64-v4"


_LEVELS = ["kvm64", "x86-64-v2", "x86-64-v2-AES", "x86-64-v3", "x86-64-v4"]


def lowest_cpu_model(models: list[str]) -> str:
    """The model every node can run: VMs migrate, so the weakest node decides."""
    if not models:
        return "kvm64"
    return min(models, key=lambda m: _LEVELS.index(m) if m in _LEVELS else 0)
