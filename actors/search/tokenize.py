"""The keyword tokeniser: words, lowercased, deduplicated; CJK text as character bigrams.

The spec splits the query into words, lowercases and deduplicates them. Chinese and Japanese
have no spaces between words, so a "word" there would be a whole sentence and never match a
query; like Lucene's CJK analyser we cut runs of Han, Kana and Hangul into overlapping bigrams
(a run of one character stays a unigram). Documents also index every CJK character alone, so a
one-character query ("猫") finds the text "猫が好き" while longer queries stay precise.

NFKC folds full-width Latin and half-width Katakana into their usual forms before lowercasing.
"""

import re
import unicodedata
from collections.abc import Sequence

import numpy as np

from actors.search._marks import MARK_RANGES

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


def query_tokens(text: str) -> list[str]:
    """The distinct tokens of a query, in order of first appearance."""
    return _tokens(text, unigrams=False)


def document_tokens(text: str) -> list[str]:
    """The distinct tokens a chunk is indexed under: its query tokens plus CJK unigrams."""
    return _tokens(text, unigrams=True)


def document_postings(texts: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """The tokens of many texts at once: (index of the text of each token, tokens), the same
    tokens as `document_tokens` of each text, in any order and possibly repeated within a text
    (the keyword index sorts and deduplicates them anyway).

    ASCII texts (most documents) are lowercased, translated and split as one joined string,
    NUL-separated: per-text calls and per-text deduplication were a third of the keyword
    stage's time. NFKC leaves ASCII unchanged, so this is `_tokens`' ASCII path."""
    plain = [i for i, text in enumerate(texts) if text.isascii() and "\x00" not in text]
    owners: list[np.ndarray] = []
    tokens: list[str] = []
    if plain:
        joined = " \x00 ".join([texts[i] for i in plain]) + " \x00"
        words = joined.lower().translate(_JOINED_SEPARATORS).split()
        counts = []
        start = 0
        for _ in plain:
            stop = words.index("\x00", start)
            tokens += words[start:stop]
            counts.append(stop - start)
            start = stop + 1
        owners.append(np.repeat(np.asarray(plain, dtype=np.int64), counts))
    if len(plain) < len(texts):
        plain_set = set(plain)
        other = [i for i in range(len(texts)) if i not in plain_set]
        per_text = [document_tokens(texts[i]) for i in other]
        for words_of_text in per_text:
            tokens += words_of_text
        owners.append(np.repeat(np.asarray(other, dtype=np.int64), [len(t) for t in per_text]))
    if not owners:
        return np.zeros(0, dtype=np.int64), tokens
    return np.concatenate(owners), tokens
