"""The keyword stage in its two real processes: the preparer works on the sources a call could
not take while the writer writes; the next call takes that work if it begins with those
sources, and drops it otherwise. Nothing is lost or written stale either way, and no handoff
file outlives its batch."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actors.search.index import keyword
from actors.search.index.store import Database
from actors.search.ingest import keyword_pipeline
from actors.search.ingest.keyword_pipeline import PREPARER, WRITER, Pipeline
from tests.conftest import wait_for
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


def stage_processes() -> list[str]:
    """This process's children that are keyword stage processes, by name."""
    names = []
    for entry in Path("/proc").iterdir():
        try:
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) != os.getpid():
                continue
            names.append((entry / "comm").read_text().strip())
        except (OSError, ValueError, IndexError):
            continue
    return sorted(n for n in names if n in (PREPARER, WRITER))


async def test_idle_processes_end_and_the_next_batch_starts_them_again(
    stage: tuple[Pipeline, Database, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline, db, inbox = stage
    monkeypatch.setattr(keyword_pipeline, "IDLE_SECONDS", 0.5)
    (inbox / "a.txt").write_text("first file")
    await pipeline.index(["a.txt"])
    assert stage_processes() == [PREPARER, WRITER]
    await wait_for(lambda: not stage_processes(), timeout=30, what="idle processes to end")
    (inbox / "b.txt").write_text("second file")
    report = await pipeline.index(["b.txt"])
    assert [o.source for o in report.outcomes] == ["b.txt"]
    assert found(db, "file") == ["a.txt", "b.txt"]
