"""`cairn store backup FILE`: a whole, readable copy of the SQLite event store, taken while a
writer is using it, and a clear refusal for a store that is not a SQLite file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from actors.functions.events import version_stored
from events.store import EventStore, default_store_url


def cairn(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.main", *args], capture_output=True, text=True, env=env
    )


async def test_a_backup_holds_every_event_and_opens_as_a_store(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = await EventStore.open(default_store_url(data))
    try:
        for n in range(50):
            await store.append(
                "functions:registry", n, [version_stored(f"f{n}", n, "python", "00", 1)]
            )
        # The writer keeps its connection open (as cairn does) while the copy is taken.
        target = tmp_path / "backups" / "events.sqlite3"
        target.parent.mkdir()
        done = cairn("store", "backup", str(target), env={"CAIRN_DATA": str(data), "PATH": ""})
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"backed up 50 events to {target}\n"
    finally:
        await store.close()
    copy = await EventStore.open(default_store_url(tmp_path / "backups"))
    try:
        events = await copy.read_stream("functions:registry")
        assert [r.event.path for r in events] == [f"f{n}" for n in range(50)]  # type: ignore[attr-defined]
    finally:
        await copy.close()
    assert sorted(p.name for p in target.parent.iterdir()) == ["events.sqlite3"]  # no leftovers


def test_a_store_that_is_not_a_sqlite_file_is_refused_with_what_to_use(tmp_path: Path) -> None:
    env = {"CAIRN_EVENT_STORE": "postgresql+asyncpg://cairn@db/cairn", "PATH": ""}
    done = cairn("store", "backup", str(tmp_path / "x"), env=env)
    assert done.returncode == 1
    assert done.stderr == (
        "cairn: the event store is postgresql, not a SQLite file: back it up with that "
        "database's own tools (pg_dump for PostgreSQL)\n"
    )
    missing = cairn("store", "backup", str(tmp_path / "x"), env={"CAIRN_DATA": str(tmp_path / "d")})
    assert (missing.returncode, missing.stderr) == (
        1,
        f"cairn: no event store at {tmp_path / 'd' / 'events.sqlite3'}\n",
    )
    assert not (tmp_path / "x").exists()
