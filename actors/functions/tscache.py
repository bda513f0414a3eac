"""The transpile cache's two bounded stores: one in memory for every body, one on disk for
stored versions (so a restart does not transpile them again). Each keeps at most so many
entries and so many bytes, and drops the least recently used first."""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from pathlib import Path

from actors.functions.limits import MIB
from events.files import SECRET, write_atomically

MEMORY_ENTRIES = 256
MEMORY_BYTES = 32 * MIB
DISK_ENTRIES = 1024
DISK_BYTES = 64 * MIB


class MemoryCache:
    def __init__(self, max_entries: int = MEMORY_ENTRIES, max_bytes: int = MEMORY_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, tuple[str, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> str | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: str, value: str) -> None:
        size = len(value.encode())
        if size > self.max_bytes or key in self._entries:
            return
        self._entries[key] = (value, size)
        self.bytes += size
        while len(self._entries) > self.max_entries or self.bytes > self.max_bytes:
            _, (_, dropped) = self._entries.popitem(last=False)
            self.bytes -= dropped


class DiskCache:
    """One file per entry under ``directory``; recency is the file's mtime, so the order
    survives a restart. The index is read from the directory on first use."""

    def __init__(
        self, directory: Path, max_entries: int = DISK_ENTRIES, max_bytes: int = DISK_BYTES
    ) -> None:
        self.directory = directory
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._sizes: OrderedDict[str, int] | None = None

    def _index(self) -> OrderedDict[str, int]:
        if self._sizes is None:
            found: list[tuple[float, str, int]] = []
            with contextlib.suppress(OSError):
                for path in self.directory.glob("*/*.js"):
                    with contextlib.suppress(OSError):
                        stat = path.stat()
                        found.append((stat.st_mtime, path.stem, stat.st_size))
            self._sizes = OrderedDict((key, size) for _, key, size in sorted(found))
            self.bytes = sum(self._sizes.values())
            self._evict()
        return self._sizes

    def __len__(self) -> int:
        return len(self._index())

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.js"

    def get(self, key: str) -> str | None:
        index = self._index()
        if key not in index:
            return None
        path = self._path(key)
        try:
            text = path.read_text(encoding="utf-8")
            os.utime(path)
        except OSError:
            self.bytes -= index.pop(key)
            return None
        index.move_to_end(key)
        return text

    def put(self, key: str, value: str) -> None:
        index = self._index()
        data = value.encode()
        if len(data) > self.max_bytes or key in index:
            return
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, data, mode=SECRET, durable=False)
        except OSError:
            return  # a cache that cannot write is only slower
        index[key] = len(data)
        self.bytes += len(data)
        self._evict()

    def _evict(self) -> None:
        assert self._sizes is not None
        while len(self._sizes) > self.max_entries or self.bytes > self.max_bytes:
            key, size = self._sizes.popitem(last=False)
            self.bytes -= size
            with contextlib.suppress(OSError):
                self._path(key).unlink()
