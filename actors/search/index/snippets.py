"""`highlight=1`: the part of a chunk that best shows why it matched, and where the query's
words are in it.

A snippet is a piece of the chunk's own text, unchanged (no `<mark>`, no ellipsis), at most
`WIDTH` characters, cut at word boundaries around the place where the most distinct query
words meet. `highlights` are `[start, end)` offsets into the snippet in characters (Unicode
code points, as Python counts them; a page in JavaScript counts UTF-16 units and must convert
for characters outside the Basic Multilingual Plane). A word is highlighted when it has the
stem of a query word (stop words only when the query has nothing else, as BM25 searches), so
"backups" lights up for "backup"; in CJK text every query bigram (or single character) found
is highlighted, overlapping ones merged.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

import attrs

from actors.search.index import stemming
from actors.search.index.tokenize import _CJK_CLASS, _MARKS, query_tokens

WIDTH = 240

_WORD = re.compile(f"[\\w{_MARKS}]+")
_CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")


@attrs.frozen
class Snippet:
    text: str
    highlights: list[tuple[int, int]]  # [start, end) in characters of `text`


@attrs.frozen
class Terms:
    """What a query highlights: its stems (words) and its CJK tokens (bigrams, characters)."""

    stems: frozenset[str]
    cjk: frozenset[str]
    language: str

    @classmethod
    def of(cls, query: str, language: str) -> Terms:
        stems = stemming.query_stems(query_tokens(query), language)
        cjk = frozenset(stem for stem in stems if _CJK_RUN.search(stem))
        return cls(frozenset(stems) - cjk, cjk, language)


def _normal(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def matches(text: str, terms: Terms) -> list[tuple[int, int, str]]:
    """(start, end, term) of every place in `text` a query term is found, in order."""
    found: list[tuple[int, int, str]] = []
    words: list[tuple[int, int, str]] = []
    for match in _WORD.finditer(text):
        # The tokeniser reads "_" as a space.
        offset = match.start()
        for part in match.group().split("_"):
            if part:
                words.append((offset, offset + len(part), part))
            offset += len(part) + 1
    latin = [(a, b, w) for a, b, w in words if not _CJK_RUN.search(w)]
    if terms.stems and latin:
        stems = stemming.stems([_normal(w) for _, _, w in latin], terms.language)
        found += [(a, b, s) for (a, b, _), s in zip(latin, stems, strict=True) if s in terms.stems]
    if terms.cjk:
        for a, _, word in words:
            for run in _CJK_RUN.finditer(word):
                found += _cjk_matches(run.group(), a + run.start(), terms.cjk)
    found.sort()
    return found


def _cjk_matches(run: str, offset: int, cjk: frozenset[str]) -> list[tuple[int, int, str]]:
    out = []
    for i in range(len(run)):
        for size in (2, 1):
            piece = _normal(run[i : i + size])
            if len(run[i : i + size]) == size and piece in cjk:
                out.append((offset + i, offset + i + size, piece))
    return out


def _merged(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def snippet(text: str, terms: Terms, width: int = WIDTH) -> Snippet:
    """The best window of `text` (all of it when short enough) and its highlights."""
    found = matches(text, terms)
    if len(text) <= width:
        return Snippet(text, _merged([(a, b) for a, b, _ in found]))
    start = _best_start(found, width)
    # Back to a word boundary, then forward to where the window's last word ends.
    begin = max(0, start - width // 6)
    while begin > 0 and not text[begin - 1].isspace() and begin > start - width // 3:
        begin -= 1
    end = min(len(text), begin + width)
    if end < len(text):
        cut = text.rfind(" ", begin, end)
        if cut > begin + width // 2:
            end = cut
    spans = [(a - begin, b - begin) for a, b, _ in found if a >= begin and b <= end]
    return Snippet(text[begin:end], _merged(spans))


def _best_start(found: Sequence[tuple[int, int, str]], width: int) -> int:
    """Where the window should start: at the match after which the most distinct terms fall
    within `width` (the first such match); 0 without matches."""
    best, best_count = 0, 0
    for i, (start, _, _) in enumerate(found):
        terms = {term for a, b, term in found[i:] if b <= start + width * 5 // 6}
        if len(terms) > best_count:
            best, best_count = start, len(terms)
    return best
