"""The keyword stage: bring a batch of inbox files up to date in the database (index, re-index,
remove or dismiss each), chunks and keyword postings in one transaction per keyword block.

It has two halves, which the search service runs in two processes of their own, the first
working on the next batch while the second writes this one (`keyword_pipeline`):
- `prepare` reads, parses, chunks and tokenises files (most of the stage's CPU), reading but
  never writing the database;
- `write_prepared` checks that nothing it was given is out of date (a file changed, or its
  indexed state, since it was prepared: the batch is then prepared again on the spot) and
  writes it. It reports what it did, including the vector keys of the chunks it retired,
  which the service then drops from its vector index. Everything it reports can be derived
  again from the database after a restart.
`index_files` runs both halves in the caller's process.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from stat import S_ISREG
from typing import Protocol

import attrs

from actors.search.index import keyword
from actors.search.index.store import (
    Change,
    Database,
    DocumentState,
    Progress,
    Remove,
    Replace,
    Touch,
    Written,
)
from actors.search.index.tokenize import Postings, document_postings
from actors.search.ingest import parsers
from actors.search.ingest.chunker import chunk_text

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 50 * 1024 * 1024
# A transaction is written once this many chunks or this much parsed text wait, so a backlog's
# memory stays bounded and the first files are searchable early. Transactions also end at
# the keyword index's block boundaries: a block filled by one write holds one piece per token,
# where a block shared by two writes holds two (2.4 rows per chunk instead of 7.5 on the
# benchmark's corpus, and rows are most of the stage's SQLite time).
FLUSH_CHUNKS = keyword.BLOCK
FLUSH_BYTES = 16 * 1024 * 1024


@attrs.frozen
class Indexed:
    source: str
    sha256: str
    chunks: int
    retired: int


@attrs.frozen
class Removed:
    source: str
    retired: int


@attrs.frozen
class Dismissed:
    source: str
    reason: str


@attrs.frozen
class Unchanged:
    source: str


Outcome = Indexed | Removed | Dismissed | Unchanged


@attrs.frozen
class IndexReport:
    """A keyword job's outcome: one per source, the chunks written, the vector keys of the
    chunks retired, and the counts after its last commit."""

    outcomes: list[Outcome]
    chunks: int
    seconds: float
    progress: Progress
    dropped_keys: list[int]
    rest: tuple[str, ...] = ()  # sources not reached: the transaction was full


class StateReader(Protocol):
    """What preparing a batch reads of the database: `Database`, or a `Reader` elsewhere."""

    def documents_of(self, sources: Sequence[str]) -> dict[str, DocumentState]: ...

    def next_chunk_id(self) -> int: ...


# A file's (size, mtime_ns) when it was read; None when it was no regular file.
Stamp = tuple[int, int] | None


def stamp(path: Path) -> Stamp:
    try:
        stat = path.lstat()
    except OSError:
        return None
    return (stat.st_size, stat.st_mtime_ns) if S_ISREG(stat.st_mode) else None


@attrs.frozen
class Prepared:
    """Files read, parsed, chunked and tokenised for one transaction (`prepare`), with what
    the writer checks before it trusts them: each file's stamp and indexed state as they were
    when it was prepared."""

    sources: tuple[str, ...]
    changes: list[Change]
    known: list[Outcome | None]  # outcomes settled without writing anything new
    seen: list[DocumentState | None]
    stamps: list[Stamp]
    postings: Postings | None  # of the `Replace` changes' chunks, in order
    chunks: int
    next_id: int  # the first chunk id the batch was cut for (it ends at that id's block end)
    rest: tuple[str, ...]  # offered, not prepared: the transaction was full

    def fresh(self, inbox: Path, states: dict[str, DocumentState]) -> bool:
        """Whether every file and its indexed state are still what they were when prepared."""
        return all(
            states.get(source) == seen and stamp(inbox / source) == stamped
            for source, seen, stamped in zip(self.sources, self.seen, self.stamps, strict=True)
        )


def prepare_file(
    known: DocumentState | None, inbox: Path, source: str
) -> tuple[Change, Outcome | None, int]:
    """What to write for `source` (indexed as `known`), its outcome when already known, and
    its text size."""
    relative = PurePosixPath(source)
    path = inbox / source
    if parsers.is_ignored(relative) or path.is_symlink() or not path.is_file():
        return Remove(source), None, 0
    stat = path.stat()
    if stat.st_size > MAX_FILE_BYTES:
        return Remove(source), Dismissed(source, f"larger than {MAX_FILE_BYTES} bytes"), 0
    data = path.read_bytes()
    state = DocumentState(stat.st_size, stat.st_mtime_ns, hashlib.sha256(data).hexdigest())
    if known is not None and known.sha256 == state.sha256:
        return Touch(source, state), Unchanged(source), 0
    try:
        text = parsers.parse(path, data)
    except (parsers.UnsupportedFormat, parsers.ParseError) as exc:
        return Remove(source), Dismissed(source, str(exc)), 0
    return Replace(source, state, chunk_text(text)), None, len(text)


def room_from(next_id: int) -> int:
    """Chunks a transaction whose first chunk id is `next_id` may take: up to `FLUSH_CHUNKS`,
    ending at a block end."""
    return min(FLUSH_CHUNKS, keyword.BLOCK - next_id % keyword.BLOCK)


def prepare(
    reader: StateReader, inbox: Path, sources: Sequence[str], next_id: int | None = None
) -> Prepared:
    """Read, parse, chunk and tokenise `sources` in order until they fill the keyword index's
    block from `next_id` (the database's next chunk id if None) or `FLUSH_BYTES` of text; the
    sources not reached are the result's `rest`. Writes nothing. Blocking."""
    next_id = reader.next_chunk_id() if next_id is None else next_id
    room = room_from(next_id)
    # One query for the batch: one per file was a tenth of the stage's time.
    states = reader.documents_of(sources)
    changes: list[Change] = []
    known: list[Outcome | None] = []
    seen: list[DocumentState | None] = []
    stamps: list[Stamp] = []
    chunks = size = 0
    for source in sources:
        stamps.append(stamp(inbox / source))
        seen.append(states.get(source))
        try:
            change, outcome, text_size = prepare_file(seen[-1], inbox, source)
        except OSError as exc:
            change, outcome, text_size = (
                Remove(source),
                Dismissed(source, f"unreadable: {exc}"),
                0,
            )
        changes.append(change)
        known.append(outcome)
        if isinstance(change, Replace):
            chunks += len(change.chunks)
        size += text_size
        if chunks >= room or size >= FLUSH_BYTES:
            break
    prepared = tuple(sources[: len(changes)])
    postings = None
    if len(set(prepared)) == len(prepared):  # else the writer tokenises, flushing in between
        texts = [text for c in changes if isinstance(c, Replace) for text in c.chunks]
        postings = document_postings(texts)
    return Prepared(
        prepared,
        changes,
        known,
        seen,
        stamps,
        postings,
        chunks,
        next_id,
        tuple(sources[len(changes) :]),
    )


def write_prepared(db: Database, inbox: Path, name: str, prepared: Prepared) -> IndexReport:
    """Write a prepared batch in one transaction. If a file or its indexed state changed
    since it was prepared (the preparer works ahead of the writer), the batch is prepared
    again here first, so what is written is never older than what was read. Blocking."""
    started = time.perf_counter()
    rest = prepared.rest
    if not prepared.fresh(inbox, db.documents_of(prepared.sources)):
        log.debug("search %s: a file changed since it was prepared; preparing again", name)
        prepared = prepare(db, inbox, prepared.sources)
        rest = prepared.rest + rest
    dropped: list[int] = []
    outcomes: list[Outcome] = []
    if prepared.changes:
        written = db.write(prepared.changes, prepared.postings)
        dropped = [k for w in written for k in w.dropped_keys]
        outcomes = [
            _outcome(change, result, outcome)
            for change, result, outcome in zip(
                prepared.changes, written, prepared.known, strict=True
            )
        ]
    for outcome in outcomes:
        if isinstance(outcome, Dismissed):
            log.info("search %s: skipped %s: %s", name, outcome.source, outcome.reason)
    elapsed = time.perf_counter() - started
    return IndexReport(outcomes, prepared.chunks, elapsed, db.progress(), dropped, rest)


def _outcome(change: Change, result: Written, known: Outcome | None) -> Outcome:
    if known is not None:
        return known
    if isinstance(change, Replace):
        return Indexed(change.source, change.state.sha256, len(change.chunks), len(result.retired))
    if result.known:
        return Removed(change.source, len(result.retired))
    return Unchanged(change.source)


def index_files(db: Database, inbox: Path, name: str, sources: Sequence[str]) -> IndexReport:
    """Bring `sources` up to date (index, re-index, remove or dismiss each) in one transaction,
    in order, until it holds the chunks left in the keyword index's current block or
    `FLUSH_BYTES` of text; the sources not reached are the report's `rest`. Blocking: both
    halves of the stage (`prepare`, `write_prepared`) in this process.

    One transaction per call, ending at a block end: a block written by several transactions
    holds a piece per token and write (and is merged later), which made a backlog drained in
    calls of 256 files 1.6x slower than the same files written a block at a time."""
    started = time.perf_counter()
    report = write_prepared(db, inbox, name, prepare(db, inbox, sources))
    return attrs.evolve(report, seconds=time.perf_counter() - started)
