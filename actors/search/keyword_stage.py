"""The keyword stage: bring a batch of inbox files up to date in the database (index, re-index,
remove or dismiss each), chunks and keyword postings in as few transactions as memory allows.

It runs in the search service's writer process (`run_in_writer`, started by `Engine`), which
keeps one `Database` per file open across batches; it reports what it did, including the vector
keys of the chunks it retired, which the service then drops from its vector index. Everything
it reports can be derived again from the database after a restart.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import attrs

from actors.search import keyword, parsers
from actors.search.chunker import chunk_text
from actors.search.store import Change, Database, DocumentState, Progress, Remove, Replace, Touch

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


def _prepare(
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


def _write(
    db: Database, changes: list[Change], known: list[Outcome | None], dropped: list[int]
) -> list[Outcome]:
    written = db.write(changes)
    dropped.extend(k for w in written for k in w.dropped_keys)
    out: list[Outcome] = []
    for change, result, outcome in zip(changes, written, known, strict=True):
        if outcome is not None:
            out.append(outcome)
        elif isinstance(change, Replace):
            out.append(
                Indexed(change.source, change.state.sha256, len(change.chunks), len(result.retired))
            )
        elif result.known:
            out.append(Removed(change.source, len(result.retired)))
        else:
            out.append(Unchanged(change.source))
    return out


def _room(db: Database) -> int:
    """Chunks the next transaction may take: up to `FLUSH_CHUNKS`, ending at a block end."""
    return min(FLUSH_CHUNKS, keyword.BLOCK - db.next_chunk_id() % keyword.BLOCK)


def index_files(db: Database, inbox: Path, name: str, sources: Sequence[str]) -> IndexReport:
    """Bring `sources` up to date (index, re-index, remove or dismiss each) in one transaction,
    in order, until it holds the chunks left in the keyword index's current block or
    `FLUSH_BYTES` of text; the sources not reached are the report's `rest`. Blocking.

    One transaction per call, ending at a block end: a block written by several transactions
    holds a piece per token and write (and is merged later), which made a backlog drained in
    calls of 256 files 1.6x slower than the same files written a block at a time."""
    started = time.perf_counter()
    dropped: list[int] = []
    changes: list[Change] = []
    known: list[Outcome | None] = []
    chunks = size = 0
    room = _room(db)
    # One query for the batch: one per file was a tenth of the stage's time.
    states = db.documents_of(sources)
    for source in sources:
        try:
            change, outcome, text_size = _prepare(states.get(source), inbox, source)
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
    outcomes = _write(db, changes, known, dropped) if changes else []
    for outcome in outcomes:
        if isinstance(outcome, Dismissed):
            log.info("search %s: skipped %s: %s", name, outcome.source, outcome.reason)
    rest = tuple(sources[len(changes) :])
    elapsed = time.perf_counter() - started
    return IndexReport(outcomes, chunks, elapsed, db.progress(), dropped, rest)


_open: dict[str, Database] = {}


def run_in_writer(path: str, inbox: str, name: str, sources: tuple[str, ...]) -> IndexReport:
    """`index_files` in the writer process, on a database kept open between batches."""
    db = _open.get(path)
    if db is None:
        db = _open[path] = Database(Path(path))
    return index_files(db, Path(inbox), name, sources)
