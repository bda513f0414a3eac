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
_ANY_END = re.compile("[.!?;。！？；]")  # noqa: RUF001 - CJK sentence ends


def cost(text: str) -> int:
    """Characters, with CJK characters weighted by how many tokens they become."""
    if text.isascii():  # no CJK; skips the regex scan (a sixth of the keyword stage's time)
        return len(text)
    return len(text) + (_CJK_WEIGHT - 1) * len(_CJK.findall(text))


def _hard_split(word: str, budget: int) -> list[str]:
    pieces: list[str] = []
    start = used = 0
    for i, char in enumerate(word):
        weight = cost(char)
        if i > start and used + weight > budget:
            pieces.append(word[start:i])
            start, used = i, 0
        used += weight
    if start < len(word):
        pieces.append(word[start:])
    return pieces


def _pack(parts: list[str], joiner: str, budget: int) -> list[str]:
    """Greedily join consecutive (non-empty) parts while the result fits the budget.

    A cost is a sum over characters, so a joined chunk's is the sum of its parts' and
    joiners': each part is costed once and joined once. Building and costing every candidate
    string instead made long paragraphs quadratic (a chunk of 100 words was built 100 times):
    four fifths of the keyword stage's time on text with few sentence ends."""
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for part in parts:
        weight = cost(part)
        if current and used + len(joiner) + weight <= budget:
            current.append(part)
            used += len(joiner) + weight
            continue
        if current:
            chunks.append(joiner.join(current))
        current, used = [part], weight
    if current:
        chunks.append(joiner.join(current))
    return chunks


def _split_paragraph(paragraph: str, budget: int) -> list[str]:
    if cost(paragraph) <= budget:
        return [paragraph]
    pieces: list[str] = []
    # The look-behind pattern tries every position: most of the chunker's time on paragraphs
    # with no sentence end at all, which one plain scan finds out.
    sentences = _SENTENCE_END.split(paragraph) if _ANY_END.search(paragraph) else [paragraph]
    for sentence in sentences:
        if not sentence:
            continue
        if cost(sentence) <= budget:
            pieces.append(sentence)
            continue
        ascii_text = sentence.isascii()
        # str.split() splits at str.isspace(), as `\s` does: the same words, at C speed.
        words = sentence.split() if ascii_text else [w for w in _SPACE.split(sentence) if w]
        if ascii_text and max(map(len, words)) <= budget:
            pieces.extend(_pack_ascii_words(" ".join(words), budget))
            continue
        fitting: list[str] = []
        for word in words:
            fitting.extend(_hard_split(word, budget) if cost(word) > budget else [word])
        pieces.extend(_pack(fitting, " ", budget))
    return _pack(pieces, " ", budget)


def _pack_ascii_words(text: str, budget: int) -> list[str]:
    """`_pack(text.split(" "), " ", budget)` for ASCII words of at most `budget` characters
    joined by single spaces: each chunk ends at the last space that keeps it within the
    budget, found by `str.rfind` rather than word by word (a paragraph without sentence ends
    is 100 words a chunk)."""
    chunks: list[str] = []
    start = 0
    while len(text) - start > budget:
        cut = text.rfind(" ", start, start + budget + 1)
        chunks.append(text[start:cut])
        start = cut + 1
    if start < len(text):
        chunks.append(text[start:])
    return chunks


def chunk_text(text: str, budget: int = BUDGET) -> list[str]:
    """The chunks of a document, in order; whitespace-only text has none."""
    paragraphs = [p.strip() for p in _PARAGRAPH_BREAK.split(text.replace("\r\n", "\n"))]
    pieces: list[str] = []
    for paragraph in paragraphs:
        if paragraph:
            pieces.extend(_split_paragraph(paragraph, budget))
    return _pack(pieces, "\n\n", budget)
