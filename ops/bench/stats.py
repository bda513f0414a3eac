"""The figures every benchmark prints: the median and p99 of samples taken in seconds."""

from __future__ import annotations

import statistics


def median_p99(samples: list[float]) -> tuple[float, float]:
    """Median and 99th percentile (the nearest-rank sample), in the samples' unit."""
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def ms_line(samples: list[float], spec: str = ".2f", sep: str = "   ") -> str:
    """`median <m> ms<sep>p99 <p> ms` for samples in seconds, numbers formatted with `spec`."""
    median, p99 = median_p99(samples)
    return f"median {median * 1e3:{spec}} ms{sep}p99 {p99 * 1e3:{spec}} ms"
