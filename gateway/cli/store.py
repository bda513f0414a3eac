"""`cairn store check` and `cairn store backup FILE`.

check first checks the SQLite file itself (PRAGMA quick_check: damaged pages, as a failing disk
leaves them; then it says so, and what to do, and stops), then reads every stored event back and
lists the rows that cannot be decoded. Such a row's
stream is quarantined when cairn starts (its VM, function registry, search database or image
store answers 503 naming the row); the others run. Exit status 1 when any row is damaged, so a
script or a timer can alert on it.

backup copies the SQLite event store consistently while cairn runs (SQLite's online backup,
which sees a committed state of the WAL), to a temporary file renamed into place, so FILE is
either the old backup or a whole new one. A PostgreSQL store is backed up with pg_dump.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import sqlite3
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from actors.config import data_dir, env_str
from events.integrity import quick_check
from events.store import EventStore, default_store_url


async def check(
    env: Mapping[str, str], load_events: Callable[[], object]
) -> tuple[int, list[dict[str, Any]]]:
    load_events()  # a row decodes only once its event type is registered
    url = env_str(env, "CAIRN_EVENT_STORE") or default_store_url(data_dir(env))
    store = await EventStore.open(url)
    try:
        count, damaged = await store.check()
    finally:
        await store.close()
    rows = [
        {
            "position": d.position,
            "stream": d.stream,
            "version": d.version,
            "type": d.type_name,
            "error": d.error,
        }
        for d in damaged
    ]
    return count, rows


def file_damage(env: Mapping[str, str]) -> str | None:
    """The SQLite store file's damage (events/integrity.py: its pages, not its rows); None
    when whole or not SQLite."""
    url = make_url(env_str(env, "CAIRN_EVENT_STORE") or default_store_url(data_dir(env)))
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    verdict = quick_check(Path(url.database), timeout=3600)
    return None if verdict.ok else verdict.message()


def cmd_check(args: Any, env: Mapping[str, str], load_events: Callable[[], object]) -> int:
    damage = file_damage(env)
    if damage is not None:
        # Rows cannot be read one by one past damaged pages: the file itself is the problem.
        if args.json:
            print(json.dumps({"file_damaged": damage}))
        else:
            print(damage)
        return 1
    count, rows = asyncio.run(check(env, load_events))
    if args.json:
        print(json.dumps({"rows": count, "damaged": rows}))
    else:
        for row in rows:
            print(
                f"position {row['position']}  stream {row['stream']}  version {row['version']}"
                f"  type {row['type']}: {row['error']}"
            )
        if rows:
            print(f"{len(rows)} damaged of {count} stored rows")
        else:
            print(f"no damaged rows ({count} checked)")
    return 1 if rows else 0


class BackupError(Exception):
    pass


def backup(env: Mapping[str, str], target: Path) -> int:
    """Copy the SQLite event store to ``target``; the number of events copied."""
    url = make_url(env_str(env, "CAIRN_EVENT_STORE") or default_store_url(data_dir(env)))
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        raise BackupError(
            f"the event store is {url.get_backend_name()}, not a SQLite file: "
            "back it up with that database's own tools (pg_dump for PostgreSQL)"
        )
    source_path = Path(url.database)
    if not source_path.is_file():
        raise BackupError(f"no event store at {source_path}")
    if target.resolve() == source_path.resolve():
        raise BackupError("the backup must not be the event store itself")
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        # Read-only: a backup never takes the store's write lock from cairn.
        with (
            contextlib.closing(sqlite3.connect(f"file:{source_path}?mode=ro", uri=True)) as src,
            contextlib.closing(sqlite3.connect(part)) as dst,
        ):
            src.backup(dst)
            (count,) = dst.execute("SELECT count(*) FROM events").fetchone()
        os.replace(part, target)
    except (sqlite3.Error, OSError) as exc:
        raise BackupError(f"backup to {target} failed: {exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            part.unlink()
    return int(count)


def cmd_backup(args: Any, env: Mapping[str, str]) -> int:
    target = Path(args.file).absolute()
    try:
        count = backup(env, target)
    except BackupError as exc:
        print(f"cairn: {exc}", file=sys.stderr)
        return 1
    print(f"backed up {count} events to {target}")
    return 0


def register(subparsers: Any, load_events: Callable[[], object]) -> None:
    """``load_events`` registers every served domain's event types (the composition root
    knows them; this module stays below it)."""
    store = subparsers.add_parser("store", help="the event store: check, backup")
    sub = store.add_subparsers(dest="store_command", required=True)
    checking = sub.add_parser("check", help="list stored events that cannot be read back")
    checking.add_argument("--json", action="store_true")
    checking.set_defaults(handler=functools.partial(cmd_check, load_events=load_events))
    saving = sub.add_parser("backup", help="copy the SQLite event store while cairn runs")
    saving.add_argument("file", help="where the copy goes (replaced whole, never half-written)")
    saving.set_defaults(handler=cmd_backup)
