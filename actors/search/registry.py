"""The durable registry of search databases, and where their files live.

Only `cairn search add|remove` change it (HTTP never does). It is a small JSON file written
atomically (temp file, then rename) under an exclusive lock, under the user config directory
(`$XDG_CONFIG_HOME/cairn/search/`, default `~/.config/cairn/search/`), beside the `endpoint`
file and one folder per database: `rm -rf` of that folder resets search. Each database's folder
records the inbox it indexes (`bind_inbox`), so two checkouts never share an index by accident.
"""

import fcntl
import json
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import attrs

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


class RegistryError(Exception):
    pass


def validate_name(name: str) -> str:
    """A database name: lowercase letters, digits, `-` and `_`, starting with a letter or digit."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise RegistryError(
            f"invalid database name {name!r}: use 1-63 lowercase letters, digits, '-' or '_',"
            " starting with a letter or digit"
        )
    return name


@attrs.frozen
class Entry:
    db: str
    createAt: str

    def to_json(self) -> dict[str, str]:
        return {"db": self.db, "createAt": self.createAt}


def config_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return (Path(base) / "cairn" / "search").absolute()


def inbox_root(env: Mapping[str, str]) -> Path:
    return Path(env.get("SEARCH_INBOX") or "inbox").absolute()


INBOX_FILE = "inbox-path"


def recorded_inbox(index_dir: Path) -> Path | None:
    """The inbox an index was built from, or None before its first start."""
    try:
        return Path((index_dir / INBOX_FILE).read_text().strip())
    except FileNotFoundError:
        return None


def bind_inbox(index_dir: Path, inbox: Path) -> None:
    """Tie a database's index to the inbox it is built from, or refuse another inbox.

    The registry and the indexes are per user, the inbox is per checkout (``./inbox`` by
    default): without this a second checkout's service would take over the first one's index
    and re-index it from its own files. The first start records the inbox's absolute path in
    ``<index>/inbox-path``, symlinks resolved (an index from before this file adopts the inbox
    it is opened with, so nothing is lost); a later start whose inbox resolves elsewhere (another
    checkout, or a symlink pointed at another folder) raises `RegistryError` saying how to
    choose.
    """
    recorded = recorded_inbox(index_dir)
    if recorded is None:
        index_dir.mkdir(parents=True, exist_ok=True)
        file = index_dir / INBOX_FILE
        tmp = file.with_suffix(".tmp")
        tmp.write_text(str(inbox.resolve()) + "\n")
        os.replace(tmp, file)
        return
    if recorded != inbox.resolve():
        raise RegistryError(
            f"the index {index_dir} was built from the inbox {recorded}, not {inbox.absolute()}:"
            f" another checkout's? Run this one with SEARCH_INBOX={Path(recorded).parent}, give it"
            f" its own XDG_CONFIG_HOME, or remove {index_dir} to index {inbox.absolute()} afresh"
        )


class Registry:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.file = root / "registry.json"

    def database_dir(self, name: str) -> Path:
        return self.root / "databases" / validate_name(name)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "registry.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def entries(self) -> list[Entry]:
        try:
            raw = json.loads(self.file.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise RegistryError(f"registry {self.file} is unreadable: {exc}") from exc
        return [Entry(item["db"], item["createAt"]) for item in raw.get("databases", [])]

    def _write(self, entries: list[Entry]) -> None:
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"databases": [e.to_json() for e in entries]}, indent=2))
        os.replace(tmp, self.file)

    def add(self, name: str, now: datetime | None = None) -> Entry:
        validate_name(name)
        with self._locked():
            entries = self.entries()
            if any(e.db == name for e in entries):
                raise RegistryError(f"database {name!r} is already registered")
            stamp = (now or datetime.now(UTC)).isoformat().replace("+00:00", "Z")
            entry = Entry(name, stamp)
            self._write([*entries, entry])
            self.database_dir(name).mkdir(parents=True, exist_ok=True)
        return entry

    def remove(self, name: str) -> None:
        validate_name(name)
        with self._locked():
            entries = self.entries()
            if not any(e.db == name for e in entries):
                raise RegistryError(f"database {name!r} is not registered")
            self._write([e for e in entries if e.db != name])
