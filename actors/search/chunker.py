"""Cut a document's text into chunks small enough to embed whole.

The local model (all-MiniLM-L6-v2) reads at most 256 tokens. English runs at about four
characters a token but Markdown and code run denser; measured on our own docs, a 700-character
budget loses 2% of tokens to truncation where 1000 lost 14%. CJK runs at about one character a
token, so a chunk's cost counts CJK characters three times (233 of them fit) and stays under
`BUDGET`. Paragraphs are kept together when they fit, long paragraphs are split at sentence
ends, long sentences at spaces, and only a single overlong "word" is cut blindly.
"""

import re

BUDGET = 700
# Bump when the chunks of the same text change: databases cut by another version index every
# file again at their next start.
CHUNKER_VERSION = 1
_CJK_WEIGHT = 3

_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n\s*")
_SENTENCE_END = re.compile(r"(?<=[.!?;。！？；])\s+|(?<=[。！？；])")  # noqa: RUF001 - CJK sentence ends
_SPACE = re.compile(r"\s+")


def cost(text: str) -> int:
    """Characters, with CJK characters weighted by how many tokens they become."""
    if text.isascii():  # no CJK; skips the regex scan (a sixth of the keyword stage's time)
        return len(text)
    return len(text) + (_CJK_WEIGHT - 1) * len(_CJK.findall(text))


def _hard_split(word: str, budget: int) -> list[str]:
    pieces: list[str] = []
    current = ""
    for char in word:
        if current and cost(current + char) > budget:
            pieces.append(current)
            current = ""
        current += char
    if current:
        pieces.append(current)
    return pieces


def _pack(parts: list[str], joiner: str, budget: int) -> list[str]:
    """Greedily join consecutive parts while the result fits the budget."""
    chunks: list[str] = []
    current = ""
    for part in parts:
        candidate = f"{current}{joiner}{part}" if current else part
        if cost(candidate) <= budget:
            current = candidate
            continue
        if current:
            chunks.append(current)
        current = part
    if current:
        chunks.append(current)
    return chunks


def _split_paragraph(paragraph: str, budget: int) -> list[str]:
    if cost(paragraph) <= budget:
        return [paragraph]
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(paragraph):
        if not sentence:
            continue
        if cost(sentence) <= budget:
            pieces.append(sentence)
            continue
        words: list[str] = []
        for word in _SPACE.split(sentence):
            words.extend(_hard_split(word, budget) if cost(word) > budget else [word])
        pieces.extend(_pack([w for w in words if w], " ", budget))
    return _pack(pieces, " ", budget)


def chunk_text(text: str, budget: int = BUDGET) -> list[str]:
    """The chunks of a document, in order; whitespace-only text has none."""
    paragraphs = [p.strip() for p in _PARAGRAPH_BREAK.split(text.replace("\r\n", "\n"))]
    pieces: list[str] = []
    for paragraph in paragraphs:
        if paragraph:
            pieces.extend(_split_paragraph(paragraph, budget))
    return _pack(pieces, "\n\n", budget)
