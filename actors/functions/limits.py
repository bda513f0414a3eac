"""What one sandboxed run may use. The defaults are published in docs/functions.md."""

from __future__ import annotations

import attrs

MIB = 1024 * 1024


@attrs.frozen
class SandboxLimits:
    # Wall-clock time of one run; the whole process tree is killed when it runs out.
    timeout_s: float = 30.0
    # CPU seconds (RLIMIT_CPU), a second line of defence behind the wall clock.
    cpu_seconds: int = 30
    # Memory of the whole run (cgroup memory.max / memory.limit_in_bytes; without one, RLIMIT_AS
    # (Python) or RLIMIT_DATA (node) per process and the run's processes added up).
    memory_bytes: int = 256 * MIB
    # Tasks (processes and threads) alive at once in the run (cgroup pids.max).
    processes: int = 64
    # Bytes of stdout plus stderr plus the return value; more kills the run.
    output_bytes: int = 1 * MIB
    # Size of each fresh tmpfs (/tmp and the home directory); its pages count as memory too.
    tmpfs_bytes: int = 16 * MIB
    # CPU share of one run in cores (cgroup cpu.cfs_quota_us / cfs_period_us).
    cpus: float = 1.0
    open_files: int = 256

    @property
    def tmpfs_files(self) -> int:
        """Files each tmpfs may hold: one per KiB of its size, so a tmpfs full of empty files
        costs the host's kernel about as much memory as one full of data."""
        return max(1, self.tmpfs_bytes // 1024)

    @property
    def memory_mib(self) -> int:
        return max(1, self.memory_bytes // MIB)
