"""A start-up look at a SQLite file: is it whole? (``PRAGMA quick_check``, bounded in time).

A file whose pages were overwritten (a failing disk, a copy made while it was written) gives
``database disk image is malformed`` only when a read reaches a damaged page: without a check,
the first service to read there fails in the middle of its start. The check reads every page
once, read-only, and says in one sentence which file, what SQLite found damaged, and what to
run. It is bounded: a large file is checked for at most ``timeout`` seconds (``CAIRN_STORE_CHECK``,
default 10 s); past that it is reported unchecked, never held against the start.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import attrs

# Lines of quick_check's report kept in the message (it can list thousands).
SHOWN = 3
# SQLite calls the progress handler every this many virtual-machine steps.
_STEPS = 10_000


@attrs.frozen
class Verdict:
    """What the check found. ``damage`` None: the file is whole (or was not checked: then
    ``unchecked`` says why)."""

    path: Path
    damage: str | None = None
    unchecked: str | None = None

    @property
    def ok(self) -> bool:
        return self.damage is None

    def message(self) -> str:
        """One sentence for the log and /status: the file, what is damaged, what to run."""
        assert self.damage is not None
        return f"the SQLite file {self.path} is damaged ({self.damage}); {repair(self.path)}"


def repair(path: Path) -> str:
    """What an operator runs about a damaged event store file, in the order to try it. The
    salvage is `.dump` with its final ROLLBACK turned into a COMMIT (it keeps every row it
    could read): the sqlite3 shell's `.recover` prints no rows at all in Debian 12's 3.40.1."""
    return (
        f"with cairn stopped, restore the last backup made by `cairn store backup FILE` (copy "
        f"it over {path}), or keep every event SQLite can still read: `sqlite3 {path} .dump | "
        f"sed 's/^ROLLBACK; -- due to errors$/COMMIT;/' | sqlite3 {path}.recovered`, then move "
        f"{path}.recovered to {path}; `cairn store check` then says whether the file and every "
        "event in it read back whole"
    )


def quick_check(path: Path, *, timeout: float = 10.0) -> Verdict:
    """``PRAGMA quick_check`` of ``path``, opened read-only, for at most ``timeout`` s."""
    if not path.exists():
        return Verdict(path)
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout)
    except sqlite3.Error as exc:
        return Verdict(path, damage=f"PRAGMA quick_check: {exc}")
    deadline = time.monotonic() + timeout
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), _STEPS)
    try:
        rows = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):
            return Verdict(path, unchecked=f"not checked within {timeout:g} s")
        if "locked" in str(exc) or "busy" in str(exc):
            return Verdict(path, unchecked=f"not checked: {exc}")
        return Verdict(path, damage=f"PRAGMA quick_check: {exc}")
    except sqlite3.DatabaseError as exc:  # "file is not a database", "malformed"
        return Verdict(path, damage=f"PRAGMA quick_check: {exc}")
    finally:
        conn.close()
    if rows == ["ok"]:
        return Verdict(path)
    shown = "; ".join(rows[:SHOWN])
    more = f"; and {len(rows) - SHOWN} more problem(s)" if len(rows) > SHOWN else ""
    return Verdict(path, damage=f"PRAGMA quick_check: {shown}{more}")


def damaged_file(exc: BaseException) -> str | None:
    """SQLite's words if ``exc`` (or what caused it, SQLAlchemy's wrapping included) says a
    file is damaged; None for any other error."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        inner = getattr(seen, "orig", None)  # sqlalchemy.exc.DBAPIError
        for candidate in (seen, inner):
            if isinstance(candidate, sqlite3.DatabaseError) and any(
                words in str(candidate) for words in DAMAGE_WORDS
            ):
                return str(candidate)
        seen = seen.__cause__ or seen.__context__
    return None


# How SQLite says a file is damaged (SQLITE_CORRUPT, SQLITE_NOTADB).
DAMAGE_WORDS = ("malformed", "not a database", "database corruption")
