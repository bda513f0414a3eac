"""The keyword stage's calls: each is one transaction that ends at the keyword index's block end
(or after `FLUSH_BYTES` of text); the sources it did not reach come back untouched, in order, as
the report's `rest`, and the next call starts the next block."""

import os
from pathlib import Path

import pytest

from actors.search.index import keyword
from actors.search.index.store import Database
from actors.search.ingest import keyword_stage
from actors.search.ingest.keyword_stage import Indexed, Removed

SOURCES = [f"f{i:02}.txt" for i in range(14)]


def three_chunks(i: int) -> str:
    """Three paragraphs too long to share a chunk: three chunks."""
    return "\n\n".join(f"file{i} part{p} " + "word " * 120 for p in range(3))


@pytest.fixture
def inbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(keyword, "BLOCK", 16)
    monkeypatch.setattr(keyword_stage, "FLUSH_CHUNKS", 16)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for i, source in enumerate(SOURCES):
        (inbox / source).write_text(three_chunks(i))
    return inbox


def most_pieces_of_a_token(db: Database) -> dict[int, int]:
    """Per block start: the most pieces one token has in it."""
    with db.snapshot() as conn:
        rows = conn.execute(
            "SELECT start, max(n) FROM"
            " (SELECT start, count(*) AS n FROM kw_piece GROUP BY start, token) GROUP BY start"
        ).fetchall()
    return dict(rows)


def test_a_call_stops_at_the_block_end_and_hands_back_the_rest(inbox: Path, tmp_path: Path) -> None:
    db = Database(tmp_path / "db.sqlite")
    # Ids start at 1: 15 chunks fill the first block, five files of three.
    first = keyword_stage.index_files(db, inbox, "t", SOURCES)
    assert [o.source for o in first.outcomes] == SOURCES[:5]
    assert all(isinstance(o, Indexed) and o.chunks == 3 for o in first.outcomes)
    assert first.chunks == 15
    assert first.rest == tuple(SOURCES[5:])
    assert set(db.documents()) == set(SOURCES[:5])
    assert first.progress.chunks == 15

    # The next block has room for 16: a file's chunks are never split, so six files (18).
    second = keyword_stage.index_files(db, inbox, "t", first.rest)
    assert [o.source for o in second.outcomes] == SOURCES[5:11]
    assert second.rest == tuple(SOURCES[11:])
    assert db.next_chunk_id() == 34

    third = keyword_stage.index_files(db, inbox, "t", second.rest)
    assert third.rest == ()
    assert set(db.documents()) == set(SOURCES)
    # The blocks the first two calls filled hold one piece per token (nothing to merge); the
    # second call's last file began the third block, which the third call went on with.
    assert most_pieces_of_a_token(db) == {0: 1, 16: 1, 32: 2}
    for i, source in enumerate(SOURCES):
        hits = db.keyword_search(f"file{i}", 10)
        assert {row.source for row in hits} == {source}
        assert len(hits) == 3


def test_a_call_of_removals_takes_them_all(inbox: Path, tmp_path: Path) -> None:
    db = Database(tmp_path / "db.sqlite")
    rest = tuple(SOURCES)
    while rest:
        rest = keyword_stage.index_files(db, inbox, "t", rest).rest
    for source in SOURCES:
        (inbox / source).unlink()
    report = keyword_stage.index_files(db, inbox, "t", SOURCES)
    assert [o.source for o in report.outcomes] == SOURCES
    assert all(isinstance(o, Removed) and o.retired == 3 for o in report.outcomes)
    assert report.rest == ()
    assert db.documents() == {}
    assert db.keyword_search("word", 10) == []


def test_a_call_stops_after_flush_bytes_of_text(
    inbox: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyword, "BLOCK", 4096)
    monkeypatch.setattr(keyword_stage, "FLUSH_CHUNKS", 4096)
    size = len(three_chunks(0))
    monkeypatch.setattr(keyword_stage, "FLUSH_BYTES", 2 * size + 1)
    db = Database(tmp_path / "db.sqlite")
    report = keyword_stage.index_files(db, inbox, "t", SOURCES)
    # The third file reaches the limit: it is written, the rest waits for the next call.
    assert [o.source for o in report.outcomes] == SOURCES[:3]
    assert report.rest == tuple(SOURCES[3:])


def rewrite(path: Path, text: str, *, later_by_ns: int = 10**9) -> None:
    """Give `path` new text and an mtime that differs from its last (filesystems' clocks are
    coarser than a test)."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + later_by_ns, before + later_by_ns))


def found(db: Database, word: str) -> list[str]:
    return sorted({row.source for row in db.keyword_search(word, 50)})


def test_a_file_changed_after_it_was_prepared_is_written_as_it_is_now(
    inbox: Path, tmp_path: Path
) -> None:
    db = Database(tmp_path / "db.sqlite")
    prepared = keyword_stage.prepare(db, inbox, SOURCES[:2])
    rewrite(inbox / SOURCES[0], "rewritten meanwhile")
    report = keyword_stage.write_prepared(db, inbox, "t", prepared)
    assert [o.source for o in report.outcomes] == SOURCES[:2]
    assert found(db, "meanwhile") == [SOURCES[0]]
    assert found(db, "file0") == []
    assert db.stats() == (2, 1 + 3)


def test_a_file_indexed_meanwhile_is_not_left_as_the_preparer_saw_it(
    inbox: Path, tmp_path: Path
) -> None:
    """The preparer saw the file as indexed and unchanged; before its batch was written, the
    file changed, was indexed, and changed back. Trusting the preparer would keep the
    in-between text."""
    db = Database(tmp_path / "db.sqlite")
    source = SOURCES[0]
    keyword_stage.index_files(db, inbox, "t", [source])
    original = (inbox / source).read_text()
    prepared = keyword_stage.prepare(db, inbox, [source])
    assert prepared.known[0] is not None  # unchanged, as far as the preparer knew
    rewrite(inbox / source, "an interim version")
    keyword_stage.index_files(db, inbox, "t", [source])
    rewrite(inbox / source, original)
    keyword_stage.write_prepared(db, inbox, "t", prepared)
    assert found(db, "interim") == []
    assert found(db, "file0") == [source]
    assert db.stats() == (1, 3)
