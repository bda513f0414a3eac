"""BM25 over the keyword index's pieces (`rank=bm25`).

score(chunk) = sum over the query's stems s matched by the chunk of
    idf(s) * (k1 + 1) / (1 + k1 * (1 - b + b * length / average length))
with idf(s) = ln(1 + (N - df + 0.5) / (df + 0.5)) (Lucene's), N the active chunks and df the
chunks holding any word of stem s. The index stores which words a chunk holds, not how often,
so the term frequency is 1: a chunk is at most ~700 characters, where repeats say little (the
length normalisation still favours the short chunk that holds the words over the long one
that mentions them in passing).
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

# (block start, stem number, offsets): one piece of one word of that stem.
StemPiece = tuple[int, int, np.ndarray]

# Ties at the cut are all returned (so the caller can order them by their place in their
# file), up to this many times the limit.
TIE_ROOM = 10


def rank(
    pieces: Sequence[StemPiece],
    stems: int,
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
    blocks = sorted({start // BLOCK for start, _, _ in pieces})
    slot_of = {block: i * BLOCK for i, block in enumerate(blocks)}
    size = len(blocks) * BLOCK
    length = np.zeros(size, dtype=np.float64)
    for block, slot in slot_of.items():
        known = lengths.get(block * BLOCK)
        if known is not None:
            length[slot : slot + BLOCK] = known
    average = total_length / chunks if chunks > 0 and total_length > 0 else 1.0
    norm = (params.k1 + 1) / (1 + params.k1 * (1 - params.b + params.b * length / average))
    score = np.zeros(size, dtype=np.float64)
    by_stem: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(stems)]
    for start, stem, offsets in pieces:
        by_stem[stem].append((start, offsets))
    for stem_pieces in by_stem:
        if not stem_pieces:
            continue
        # A chunk holding two words of one stem ("backup", "backups") matches the stem once.
        hit = np.zeros(size, dtype=bool)
        for start, offsets in stem_pieces:
            hit[slot_of[start // BLOCK] + start % BLOCK + offsets.astype(np.intp)] = True
        df = int(np.count_nonzero(hit))
        n = max(chunks, df)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        score[hit] += idf * norm[hit]
    found = np.flatnonzero(score > 0)
    if len(found) > limit:
        cut = np.partition(score[found], len(found) - limit)[len(found) - limit]
        found = found[score[found] >= cut]
    # Best score first, then id (ascending: `found` is in slot order, slots in id order).
    order = found[np.argsort(-score[found], kind="stable")][: limit * TIE_ROOM]
    ids = np.array(blocks, dtype=np.int64)[order // BLOCK] * BLOCK + order % BLOCK
    return list(zip(ids.tolist(), score[order].tolist(), strict=True))
