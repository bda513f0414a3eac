"""The keyword stage in its two real processes: the preparer works on the sources a call could
not take while the writer writes; the next call takes that work if it begins with those
sources, and drops it otherwise. Nothing is lost or written stale either way, and no handoff
file outlives its batch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actors.search import keyword
from actors.search.keyword_pipeline import Pipeline
from actors.search.store import Database
from tests.search.test_keyword_stage import found, rewrite


@pytest.fixture
async def stage(tmp_path: Path) -> AsyncIterator[tuple[Pipeline, Database, Path]]:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    # The preparer opens the database by URI: a directory's name must not be read as one.
    directory = tmp_path / "db ?mode=rwc#%20"
    directory.mkdir()
    db = Database(directory / "index.sqlite")
    pipeline = Pipeline(db.path, inbox, "t")
    yield pipeline, db, inbox
    pipeline.close()
    db.close()


async def test_work_prepared_ahead_is_taken_or_dropped_and_never_written_stale(
    stage: tuple[Pipeline, Database, Path],
) -> None:
    pipeline, db, inbox = stage
    # One file fills the first keyword block by itself (a chunk per paragraph).
    (inbox / "big.txt").write_text(
        "\n\n".join(f"para{i} " + "word " * 120 for i in range(keyword.BLOCK))
    )
    for name in ("b", "c", "d"):
        (inbox / f"{name}.txt").write_text(f"first {name}")

    first = await pipeline.index(["big.txt", "b.txt"])
    assert [o.source for o in first.outcomes] == ["big.txt"]
    assert first.rest == ("b.txt",)  # being prepared for the next call
    rewrite(inbox / "b.txt", "second b")

    # Begins with what was prepared: taken, and b's change since is caught by the writer.
    second = await pipeline.index(["b.txt", "c.txt"])
    assert [o.source for o in second.outcomes] == ["b.txt"]
    assert second.rest == ("c.txt",)  # the call writes what was prepared; c is next
    assert found(db, "second") == ["b.txt"] and found(db, "first") == []

    # Begins with something else: the work on c is dropped, d written, then c.
    third = await pipeline.index(["d.txt"])
    assert [o.source for o in third.outcomes] == ["d.txt"] and third.rest == ()
    fourth = await pipeline.index(["c.txt"])
    assert [o.source for o in fourth.outcomes] == ["c.txt"] and fourth.rest == ()

    assert found(db, "first") == ["c.txt", "d.txt"]
    assert db.stats() == (4, keyword.BLOCK + 3)
    assert list(pipeline.handoff_dir.iterdir()) == []
