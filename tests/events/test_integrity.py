"""events/integrity.py on real SQLite files: whole, overwritten pages, not a database, and a
check cut short by its time bound."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from events.integrity import damaged_file, quick_check, repair


def make_store(path: Path, rows: int = 2000) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE events (position INTEGER PRIMARY KEY, data TEXT)")
        conn.execute("CREATE INDEX by_data ON events (data)")
        conn.executemany(
            "INSERT INTO events (data) VALUES (?)", ((f"row {i} " * 20,) for i in range(rows))
        )


def test_a_whole_file_passes(tmp_path: Path) -> None:
    make_store(tmp_path / "a.sqlite3")
    verdict = quick_check(tmp_path / "a.sqlite3")
    assert verdict.ok and verdict.unchecked is None


def test_a_missing_file_is_nothing_to_check(tmp_path: Path) -> None:
    assert quick_check(tmp_path / "none.sqlite3").ok


def test_overwritten_pages_are_named_with_the_way_out(tmp_path: Path) -> None:
    db = tmp_path / "a.sqlite3"
    make_store(db)
    size = db.stat().st_size
    with db.open("r+b") as fh:
        fh.seek(size // 2 // 4096 * 4096)
        fh.write(os.urandom(3 * 4096))
    verdict = quick_check(db)
    assert not verdict.ok
    assert verdict.damage is not None and verdict.damage.startswith("PRAGMA quick_check: ")
    message = verdict.message()
    assert message.startswith(f"the SQLite file {db} is damaged (PRAGMA quick_check: ")
    assert message.endswith(repair(db))
    for way_out in ("cairn store backup", ".dump", "cairn store check"):
        assert way_out in message


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    db = tmp_path / "a.sqlite3"
    db.write_bytes(b"not sqlite at all" * 512)
    verdict = quick_check(db)
    assert verdict.damage == "PRAGMA quick_check: file is not a database"


def test_the_check_is_bounded_in_time(tmp_path: Path) -> None:
    db = tmp_path / "a.sqlite3"
    make_store(db, rows=20000)
    verdict = quick_check(db, timeout=0.0)
    assert verdict.ok and verdict.unchecked == "not checked within 0 s"


def test_damage_is_recognised_through_wrappers() -> None:
    try:
        try:
            raise sqlite3.DatabaseError("database disk image is malformed")
        except sqlite3.DatabaseError as inner:
            raise RuntimeError("reading vm:1 failed") from inner
    except RuntimeError as outer:
        assert damaged_file(outer) == "database disk image is malformed"
    assert damaged_file(sqlite3.OperationalError("database is locked")) is None
    assert damaged_file(ValueError("malformed")) is None
