"""The keyword tokeniser: words, lowercased, deduplicated; CJK text as character bigrams.

A query is split into words, lowercased and deduplicated, so case and repeats do not count.
Chinese and Japanese have no spaces between words, so a "word" there would be a whole sentence
and never match a query; like Lucene's CJK analyser we cut runs of Han, Kana and Hangul into
overlapping bigrams (a run of one character stays a unigram). Documents also index every CJK
character alone, so a one-character query ("猫") finds the text "猫が好き" while longer
queries stay precise.

NFKC folds full-width Latin and half-width Katakana into their usual forms before lowercasing.
"""

import re
import unicodedata
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from actors.search.index._marks import MARK_RANGES

# Bump when the token stream for the same text changes: indexes built with another version
# are rebuilt at start-up.
TOKENIZER_VERSION = 1

_MARKS = "".join(
    f"{re.escape(chr(a))}-{re.escape(chr(b))}" if a != b else re.escape(chr(a))
    for a, b in MARK_RANGES
)
# Letters, digits and combining marks; `_normalise` turns underscores into spaces first because
# one character class keeps the scan on the regex engine's fast path.
_WORD = re.compile(f"[\\w{_MARKS}]+")

# ASCII text (most documents) takes a str.translate + split path, several times faster than the
# regex; both paths agree on ASCII input (a test checks this).
_ASCII_SEPARATORS = str.maketrans(
    {chr(c): " " for c in range(128) if not (chr(c).isalnum() and chr(c).isascii())}
)

# For many ASCII texts at once, joined by " NUL ": NUL is kept, so it stays a word of its own
# (mapping every character to one character keeps str.translate on its fast ASCII path).
_JOINED_SEPARATORS = {**_ASCII_SEPARATORS, 0: "\x00"}

_CJK_CLASS = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0003134f"  # CJK extensions B-G
)
_CJK_OR_NOT = re.compile(f"[{_CJK_CLASS}]+|[^{_CJK_CLASS}]+")
_CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower().replace("_", " ")


def _word_tokens(word: str, *, unigrams: bool) -> list[str]:
    if not _CJK_RUN.search(word):
        return [word]
    out: list[str] = []
    for part in _CJK_OR_NOT.findall(word):
        if not _CJK_RUN.fullmatch(part) or len(part) == 1:
            out.append(part)
        else:
            out.extend(part[i : i + 2] for i in range(len(part) - 1))
            if unigrams:
                out.extend(part)
    return out


def _tokens(text: str, *, unigrams: bool) -> list[str]:
    text = _normalise(text)
    if text.isascii():
        return list(dict.fromkeys(text.translate(_ASCII_SEPARATORS).split()))
    words = _WORD.findall(text)
    if not _CJK_RUN.search(text):
        # The common case, kept on the C path: indexing speed depends on it.
        return list(dict.fromkeys(words))
    tokens: dict[str, None] = {}
    for word in words:
        for token in _word_tokens(word, unigrams=unigrams):
            tokens[token] = None
    return list(tokens)


def _token_stream(text: str, *, unigrams: bool = True) -> list[str]:
    """`document_tokens` of `text` (`query_tokens` without `unigrams`), each as often as it
    occurs (the term frequencies BM25 reads)."""
    text = _normalise(text)
    if text.isascii():
        return text.translate(_ASCII_SEPARATORS).split()
    words = _WORD.findall(text)
    if not _CJK_RUN.search(text):
        return list(words)
    return [token for word in words for token in _word_tokens(word, unigrams=unigrams)]


def query_token_stream(text: str) -> list[str]:
    """The tokens of a query, each as often as it occurs, in order."""
    return _token_stream(text, unigrams=False)


def query_tokens(text: str) -> list[str]:
    """The distinct tokens of a query, in order of first appearance."""
    return _tokens(text, unigrams=False)


def document_tokens(text: str) -> list[str]:
    """The distinct tokens a chunk is indexed under: its query tokens plus CJK unigrams."""
    return _tokens(text, unigrams=True)


class Postings(NamedTuple):
    """The tokens of many texts: posting i is token `vocabulary[tokens[i]]` in text
    `owners[i]`."""

    owners: np.ndarray
    tokens: np.ndarray
    vocabulary: list[str]  # sorted, distinct


def document_postings(texts: Sequence[str]) -> Postings:
    """The tokens of many texts at once, numbered: the same tokens as `document_tokens` of
    each text, in any order, each as often as it occurs in the text (the keyword index
    stores each once, with its count).

    ASCII texts (most documents) are lowercased, translated and split as one joined string:
    per-text calls were a third of the keyword stage's time. NFKC leaves ASCII unchanged, so
    this is `_tokens`' ASCII path. Every text's words end with a NUL word, which no text has
    as a token and which sorts first: where the NULs are says whose each word is, without a
    pass over the words in Python. Numbering is one `dict.fromkeys` and one lookup per word,
    at C speed (a `setdefault` with a running count allocated an int per word: 20% slower)."""
    plain = [i for i, text in enumerate(texts) if text.isascii() and "\x00" not in text]
    words: list[str] = []
    if plain:
        joined = " \x00 ".join([texts[i] for i in plain]) + " \x00"
        words = joined.lower().translate(_JOINED_SEPARATORS).split()
    other: list[int] = []
    if len(plain) < len(texts):
        plain_set = set(plain)
        other = [i for i in range(len(texts)) if i not in plain_set]
    for i in other:
        words += _token_stream(texts[i])
        words.append("\x00")
    vocabulary = sorted(dict.fromkeys(words))
    if not vocabulary:
        return Postings(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), [])
    number = {word: n for n, word in enumerate(vocabulary)}
    numbered = np.fromiter(map(number.__getitem__, words), dtype=np.int64, count=len(words))
    ends = numbered == 0  # "\x00" is vocabulary[0]
    word = ~ends
    owners = np.asarray(plain + other, dtype=np.int64)[(np.cumsum(ends) - ends)[word]]
    return Postings(owners, numbered[word] - 1, vocabulary[1:])
