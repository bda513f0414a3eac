"""BM25 over the keyword index's pieces (`rank=bm25`).

score(chunk) = sum over the query's stems s matched by the chunk of
    qtf(s) * idf(s) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average length))
with idf(s) = ln(1 + (N - df + 0.5) / (df + 0.5)) (Lucene's), N the active chunks, df the
chunks holding any word of stem s and tf how often the chunk holds words of stem s ("backup"
twice and "backups" once: 3), qtf(s) how often the query has it. Lengths count every word,
stop words included.

Term frequencies matter: measured on Cranfield, BM25 with every tf taken as 1 scored
nDCG@10 0.311 against 0.365 (bm25s, same text), on CISI 0.331 against 0.386.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from actors.search.keyword import BLOCK


@attrs.frozen
class Params:
    """k1: how much a longer chunk is penalised at all; b: how fully length is normalised."""

    k1: float = 1.2
    b: float = 0.75


DEFAULT = Params()

# (block start, stem number, offsets, term frequencies): one piece of one word of that stem.
StemPiece = tuple[int, int, np.ndarray, np.ndarray]

# Ties at the cut are all returned (so the caller can order them by their place in their
# file), up to this many times the limit.
TIE_ROOM = 10


def rank(
    pieces: Sequence[StemPiece],
    weights: Sequence[float],
    lengths: Mapping[int, np.ndarray],
    chunks: int,
    total_length: int,
    limit: int,
    params: Params = DEFAULT,
) -> list[tuple[int, float]]:
    """(chunk id, score) of the best `limit` chunks, best first, then by id; chunks tied with
    the last one follow it (at most `TIE_ROOM` x `limit` in all)."""
    if not pieces or limit <= 0:
        return []
    blocks = sorted({piece[0] // BLOCK for piece in pieces})
    slot_of = {block: i * BLOCK for i, block in enumerate(blocks)}
    size = len(blocks) * BLOCK
    length = np.zeros(size, dtype=np.float64)
    for block, slot in slot_of.items():
        known = lengths.get(block * BLOCK)
        if known is not None:
            length[slot : slot + BLOCK] = known
    average = total_length / chunks if chunks > 0 and total_length > 0 else 1.0
    saturation = params.k1 * (1 - params.b + params.b * length / average)
    score = np.zeros(size, dtype=np.float64)
    by_stem: list[list[tuple[int, np.ndarray, np.ndarray]]] = [[] for _ in weights]
    for start, stem, offsets, tfs in pieces:
        by_stem[stem].append((start, offsets, tfs))
    for weight, stem_pieces in zip(weights, by_stem, strict=True):
        if not stem_pieces:
            continue
        tf = np.zeros(size, dtype=np.float64)
        for start, offsets, tfs in stem_pieces:
            # Offsets are distinct within a piece: a plain fancy-index increment adds right.
            tf[slot_of[start // BLOCK] + start % BLOCK + offsets.astype(np.intp)] += tfs
        hit = np.flatnonzero(tf)
        df = len(hit)
        n = max(chunks, df)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        counts = tf[hit]
        score[hit] += weight * idf * counts * (params.k1 + 1) / (counts + saturation[hit])
    found = np.flatnonzero(score > 0)
    if len(found) > limit:
        cut = np.partition(score[found], len(found) - limit)[len(found) - limit]
        found = found[score[found] >= cut]
    # Best score first, then id (ascending: `found` is in slot order, slots in id order).
    order = found[np.argsort(-score[found], kind="stable")][: limit * TIE_ROOM]
    ids = np.array(blocks, dtype=np.int64)[order // BLOCK] * BLOCK + order % BLOCK
    return list(zip(ids.tolist(), score[order].tolist(), strict=True))
