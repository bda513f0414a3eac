"""The durable registry of search databases, and where search keeps its files.

Only `cairn search add|remove` change it (HTTP never does). It is a small JSON file written
atomically (temp file, then rename) under an exclusive lock, in search's state root
(`state_root`: `$CAIRN_DATA/search/` unless `SEARCH_DATA` moves it), beside the query cache, the
model files (`model_cache`, unless `SEARCH_MODEL_CACHE` moves them) and one folder per
database: `rm -rf` of that folder resets search. Each database's folder records the inbox it
indexes (`bind_inbox`), so two checkouts never share an index by accident. Only the `endpoint`
file is elsewhere: in the user config directory (`config_dir`), where local clients look for it.
"""

import fcntl
import json
import re
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import attrs

from actors.config import data_dir
from events.files import write_atomically

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
    """The user config directory's `cairn/search/`, where the `endpoint` file is written
    (`$XDG_CONFIG_HOME`, default `~/.config`); search keeps nothing else there."""
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return (Path(base) / "cairn" / "search").absolute()


def state_root(env: Mapping[str, str]) -> Path:
    """Where search keeps its state (registry, query cache, indexes, model files): `SEARCH_DATA`,
    else `search/` under the data directory (`CAIRN_DATA`, default `./data`); absolute."""
    explicit = (env.get("SEARCH_DATA") or "").strip()
    return Path(explicit).absolute() if explicit else data_dir(env) / "search"


def model_cache(env: Mapping[str, str]) -> Path:
    """Where the local model's runtime files are built: `SEARCH_MODEL_CACHE`, else `models/`
    under the state root; absolute."""
    explicit = (env.get("SEARCH_MODEL_CACHE") or "").strip()
    return Path(explicit).absolute() if explicit else state_root(env) / "models"


# What versions before 0.2 kept in the config directory, the registry last (see adopt_legacy).
LEGACY_ITEMS = (
    "databases",
    "query_cache.sqlite",
    "query_cache.sqlite-wal",
    "query_cache.sqlite-shm",
    "registry.json",
)


def adopt_legacy(env: Mapping[str, str]) -> Path | None:
    """Move the state an earlier version kept in the config directory (registry, indexes, query
    cache) into the state root, once: when the config directory holds a registry and the root
    does not. Returns the directory it was moved from, or None. The registry moves last, so a
    move cut short is finished at the next call; the `endpoint` file stays."""
    old, new = config_dir(env), state_root(env)
    if old == new or not (old / "registry.json").is_file():
        return None
    registry = Registry(new)
    with registry._locked():
        if registry.file.exists():
            return None
        for name in LEGACY_ITEMS:
            if (old / name).exists() and not (new / name).exists():
                shutil.move(old / name, new / name)
    return old


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

    The indexes are per data directory, the inbox is given apart (``./inbox`` by default, or
    ``SEARCH_INBOX``): without this a service given another inbox with the same data directory
    would take over the index and re-index it from its own files. The first start records the
    inbox's absolute path in ``<index>/inbox-path``, symlinks resolved (an index from before
    this file adopts the inbox it is opened with, so nothing is lost); a later start whose
    inbox resolves elsewhere (another checkout, or a symlink pointed at another folder) raises
    `RegistryError` saying how to choose.
    """
    recorded = recorded_inbox(index_dir)
    if recorded is None:
        index_dir.mkdir(parents=True, exist_ok=True)
        file = index_dir / INBOX_FILE
        write_atomically(file, str(inbox.resolve()) + "\n")
        return
    if recorded != inbox.resolve():
        raise RegistryError(
            f"the index {index_dir} was built from the inbox {recorded}, not {inbox.absolute()}:"
            f" another checkout's? Run this one with SEARCH_INBOX={Path(recorded).parent}, give it"
            f" its own CAIRN_DATA, or remove {index_dir} to index {inbox.absolute()} afresh"
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
        write_atomically(
            self.file, json.dumps({"databases": [e.to_json() for e in entries]}, indent=2)
        )

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
