"""What a folder of the image store holds: the read model behind ``GET /ls/<folder>``.

Read straight from the files, as image reads are: the store's directory tree is the catalogue.
A file's type is sniffed from its first bytes (never its name), so a stray file that is not an
image or PDF shows as ``null`` and is not served. Symbolic links are listed only when they
resolve inside the store, so a listing never describes anything outside it.
"""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from actors.images.paths import UnsafePath, clean_relpath, resolve_under
from actors.images.sniff import SNIFF_BYTES, sniff

# Past this many entries a listing stops and says it was cut short.
MAX_ENTRIES = 5000


class NotAFolder(Exception):
    """The path names a file, not a folder."""


@attrs.frozen
class Entry:
    name: str
    is_dir: bool
    size: int
    modified: float
    type: str | None  # MIME type; "directory" for a folder; None: not a served type

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "size": self.size,
            "modified": datetime.fromtimestamp(self.modified, UTC)
            .isoformat(timespec="seconds")
            .replace("+00:00", "Z"),
            "is_dir": self.is_dir,
        }


@attrs.frozen
class Listing:
    path: str
    entries: list[Entry]
    truncated: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "entries": [e.to_json() for e in self.entries],
            "truncated": self.truncated,
        }


def folder_of(root: Path, raw: str) -> tuple[str, Path]:
    """The clean relative folder and its real path; ``""`` is the store itself. Raises
    :class:`UnsafePath`, ``FileNotFoundError`` or :class:`NotAFolder`."""
    rel = clean_relpath(raw, allow_empty=True)
    folder = resolve_under(root, rel) if rel else root
    st = os.stat(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise NotAFolder(rel)
    return rel, folder


def _kind(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            found = sniff(fh.read(SNIFF_BYTES))
    except OSError:
        return None
    return found.mime if found is not None else None


def _entry(root: Path, rel: str, item: os.DirEntry[str]) -> Entry | None:
    try:
        if item.is_symlink():
            resolve_under(root, f"{rel}/{item.name}" if rel else item.name)
        st = item.stat()
    except (OSError, UnsafePath):
        return None  # gone meanwhile, dangling, or pointing out of the store
    if stat.S_ISDIR(st.st_mode):
        return Entry(item.name, True, 0, st.st_mtime, "directory")
    if not stat.S_ISREG(st.st_mode):
        return None
    return Entry(item.name, False, st.st_size, st.st_mtime, _kind(Path(item.path)))


def list_folder(root: Path, raw: str) -> Listing:
    """Folders first, then files, each by name; at most ``MAX_ENTRIES``. Blocking: call it in
    a thread."""
    limit = MAX_ENTRIES
    rel, folder = folder_of(root, raw)
    entries: list[Entry] = []
    truncated = False
    with os.scandir(folder) as items:
        for item in items:
            if len(entries) >= limit:
                truncated = True
                break
            entry = _entry(root, rel, item)
            if entry is not None:
                entries.append(entry)
    entries.sort(key=lambda e: (not e.is_dir, e.name))
    return Listing(rel, entries, truncated)
