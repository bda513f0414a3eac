"""One list from the keyword (BM25) and semantic lists of `target=hybrid`.

Two ways were measured (`ops/bench/search_relevance.py`, docs/search.md): reciprocal-rank
fusion, which reads only ranks, and a convex combination of the two scores, each scaled to
0-1 within its list (min-max), which also reads how far ahead a result is. The service uses
`convex` with `ALPHA`, chosen on the bench's collections (Cranfield, CISI): convex beat RRF on
both (nDCG@10 0.391 against 0.385, 0.453 against 0.426), and 0.6 had the best mean of the
weights tried (0.3-0.7) while passing both collections' targets.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

# Reciprocal-rank fusion's constant (Cormack et al. 2009; what qmd, Elastic and others use).
RRF_K = 60
# Weight of the semantic score in `convex` (the keyword score has 1 - ALPHA).
ALPHA = 0.6


def rrf(lists: Sequence[Sequence[K]], k: int = RRF_K) -> list[K]:
    """Items by the sum over lists of 1 / (k + rank), rank from 1; ties in first-seen order."""
    score: dict[K, float] = {}
    for ranked in lists:
        for rank, item in enumerate(ranked, start=1):
            score[item] = score.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(score, key=lambda item: -score[item])


def _scaled(scored: Sequence[tuple[K, float]]) -> dict[K, float]:
    """Scores mapped to 0-1 within their list (all 1 when they are equal)."""
    if not scored:
        return {}
    values = [score for _, score in scored]
    low, high = min(values), max(values)
    span = high - low
    return {item: (score - low) / span if span > 0 else 1.0 for item, score in scored}


def convex(
    keyword: Sequence[tuple[K, float]], semantic: Sequence[tuple[K, float]], alpha: float = ALPHA
) -> list[K]:
    """Items by alpha x scaled semantic score + (1 - alpha) x scaled keyword score (an item
    missing from a list scores 0 there); ties in first-seen order, keyword list first."""
    return [item for item, _ in convex_scored(keyword, semantic, alpha)]


def convex_scored(
    keyword: Sequence[tuple[K, float]], semantic: Sequence[tuple[K, float]], alpha: float = ALPHA
) -> list[tuple[K, float]]:
    """`convex`'s order with each item's fused score (0-1)."""
    kw, sem = _scaled(keyword), _scaled(semantic)
    items = list(dict.fromkeys([item for item, _ in keyword] + [item for item, _ in semantic]))
    fused = {item: alpha * sem.get(item, 0.0) + (1 - alpha) * kw.get(item, 0.0) for item in items}
    return [(item, fused[item]) for item in sorted(items, key=lambda item: -fused[item])]
