"""Word forms for `rank=bm25`: Snowball stemming and stop words, per database language.

The keyword index keeps the words as the tokeniser cut them (the spec's ranking matches them
exactly); BM25 reads the same postings through each word's stem (`kw_vocab`), so "backups"
finds "backup" and "running" finds "runs" without a second index.

Stems come from PyStemmer (the Snowball project's C stemmers: ~0.3 us a word, so stemming a
write's new vocabulary costs the keyword stage little). A language PyStemmer does not know
falls back to no stemming (every word is its own stem). Stop words are dropped from a query
only in English, whose list is below; words of other languages are all kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from functools import cache

import Stemmer

DEFAULT_LANGUAGE = "english"

# Lucene's English stop set (EnglishAnalyzer) plus the pronouns, auxiliaries and question
# words that carry no topic: "who owns the database server" keeps "owns", "database",
# "server". Kept short on purpose: a stop word is never searchable by BM25 (unless the query
# has nothing else, see `query_stems`).
_ENGLISH = """a an and are as at be but by for if in into is it no not of on or such that the
their then there these they this to was will with i me my we our you your he him his she her its
them what which who whom whose when where why how am been being have has had do does did can
could should would shall may might must from than so very s t just about"""
ENGLISH_STOP_WORDS = frozenset(_ENGLISH.split())


def language_for(env: Mapping[str, str], db: str) -> str:
    """A database's language: its entry in `SEARCH_LANGUAGES` (`notes=french,docs=german`),
    else `SEARCH_LANGUAGE`, else English. A language PyStemmer does not know is kept as
    named (and stems nothing)."""
    for entry in (env.get("SEARCH_LANGUAGES") or "").split(","):
        name, _, language = entry.partition("=")
        if name.strip() == db and language.strip():
            return language.strip().lower()
    return (env.get("SEARCH_LANGUAGE") or DEFAULT_LANGUAGE).strip().lower()


def languages() -> list[str]:
    """The languages a database can be stemmed in."""
    return sorted(Stemmer.algorithms())


@cache
def _stemmer(language: str) -> Stemmer.Stemmer | None:
    if language not in Stemmer.algorithms():
        return None
    # No cache: stemming a batch's distinct words is faster without PyStemmer's LRU.
    return Stemmer.Stemmer(language, 0)


def stems(words: Sequence[str], language: str) -> list[str]:
    """Each word's stem; the words themselves for an unknown language."""
    stemmer = _stemmer(language)
    if stemmer is None:
        return list(words)
    return list(stemmer.stemWords(list(words)))


def stop_words(language: str) -> frozenset[str]:
    return ENGLISH_STOP_WORDS if language == DEFAULT_LANGUAGE else frozenset()


def query_terms(tokens: Sequence[str], language: str) -> dict[str, int]:
    """The stems a BM25 query searches, in order, each with how often the query has it (a
    word said twice weighs twice, as in Lucene): stop words dropped, unless the query is only
    stop words ("to be or not to be"), which is then searched as it is."""
    stop = stop_words(language)
    kept = [token for token in tokens if token not in stop] or list(tokens)
    return dict(Counter(stems(kept, language)))


def query_stems(tokens: Sequence[str], language: str) -> list[str]:
    """The distinct stems of `query_terms`."""
    return list(query_terms(tokens, language))


# Query words this long or longer may be matched with one typo (`typo=1`): shorter ones have
# too many neighbours one edit away ("cat": bat, car, cut, at ...).
TYPO_MIN_LENGTH = 5
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def one_edit(word: str) -> set[str]:
    """Every word one edit from `word` (optimal string alignment: a deletion, an insertion, a
    replacement or two neighbours swapped), `word` itself excluded. Inserted and replacing
    letters are a-z and the word's own letters, so an accented word reaches its accented
    neighbours."""
    letters = sorted(set(_LETTERS) | set(word))
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    found = {left + right[1:] for left, right in splits if right}
    found |= {left + right[1] + right[0] + right[2:] for left, right in splits if len(right) > 1}
    found |= {left + c + right[1:] for left, right in splits if right for c in letters}
    found |= {left + c + right for left, right in splits for c in letters}
    found.discard(word)
    return found
