"""The variant cache: rendered variants on disk under ``CAIRN_DATA``, outside the served tree.

Layout: ``<cache>/<hh>/<sha256(relpath)>/<stamp>-<variant key>``. One directory per source path
makes a purge one ``rmtree``; the stamp (source mtime and size) means a file replaced behind our
back (by hand, or while a purge event is still on its way) is never answered from a stale entry.
File names are built only from a hex digest, integers and the normalised variant key, never from
request text.

The disk cache is bounded (``IMAGES_DISK_CACHE`` bytes): once a store takes it past the bound,
the least recently used variants (by access or write time, whichever is later) are deleted down
to 90 % of it, so a burst of new variants does not prune on every write. A variant deleted under
a reader is simply rendered again.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

from actors.images.params import Variant


def source_stamp(st: os.stat_result) -> str:
    return f"{st.st_mtime_ns:x}-{st.st_size:x}"


TMP_PREFIX = ".tmp-"
PRUNE_TO = 0.9  # of the bound
WARN_EVERY_S = 60.0  # a full disk fails every render's store: say so once a minute

log = logging.getLogger(__name__)


class VariantCache:
    def __init__(self, root: Path, max_bytes: int = 0) -> None:
        """``max_bytes`` 0: unbounded."""
        self.root = root
        self.max_bytes = max_bytes
        self._lock = threading.Lock()  # stores come from the render pool's threads
        self._bytes: int | None = None  # measured at the first store, then counted
        self._warned_at = -WARN_EVERY_S

    def dir_for(self, relpath: str) -> Path:
        digest = hashlib.sha256(relpath.encode()).hexdigest()
        return self.root / digest[:2] / digest

    def path_for(self, relpath: str, stamp: str, variant: Variant) -> Path:
        return self.dir_for(relpath) / f"{stamp}-{variant.key}"

    def store(self, target: Path, data: bytes) -> None:
        """Write atomically: a reader sees the old state or the whole new file, never half."""
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=TMP_PREFIX)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        if self.max_bytes:
            self._account(len(data))

    def keep(self, target: Path, data: bytes) -> None:
        """:meth:`store` for a reader that already holds the bytes it will answer with.

        The cache is only a saving: a purge that removed the folder between ``mkdir`` and the
        write (the stored event of an upload arrives after its 201), a full disk or a damaged
        cache folder cost a render later, never the answer.
        """
        try:
            self.store(target, data)
        except OSError as exc:
            if exc.errno != errno.ENOENT:  # ENOENT: the purge race above, expected and harmless
                now = time.monotonic()
                with self._lock:
                    warn = now - self._warned_at >= WARN_EVERY_S
                    if warn:
                        self._warned_at = now
                if warn:
                    log.warning("variant served but not cached: %s", exc.strerror or exc)

    def _account(self, added: int) -> None:
        with self._lock:
            if self._bytes is None:
                self._bytes = sum(size for _, size, _ in self._entries())
            else:
                self._bytes += added
            if self._bytes > self.max_bytes:
                self._bytes = self._prune(int(self.max_bytes * PRUNE_TO))

    def _entries(self) -> list[tuple[float, int, str]]:
        """(last use, size, path) of every variant file; a purge racing the walk is fine."""
        found = []
        for folder, _, names in os.walk(self.root):
            for name in names:
                if name.startswith(TMP_PREFIX):
                    continue  # being written; counted once it is in place
                path = os.path.join(folder, name)
                with contextlib.suppress(FileNotFoundError):
                    st = os.stat(path)
                    found.append((max(st.st_atime, st.st_mtime), st.st_size, path))
        return found

    def _prune(self, target: int) -> int:
        """Delete the least recently used variants until at most ``target`` bytes remain."""
        entries = sorted(self._entries())
        total = sum(size for _, size, _ in entries)
        for _, size, path in entries:
            if total <= target:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            total -= size
            with contextlib.suppress(OSError):  # the source's folder, once it is empty
                os.rmdir(os.path.dirname(path))
        return total

    def purge(self, relpath: str) -> None:
        # The byte count is not lowered here: it runs high until the next prune measures anew.
        shutil.rmtree(self.dir_for(relpath), ignore_errors=True)


class HotCache:
    """A small in-memory LRU of recently served variant bytes, bounded by total size.

    A cached read then costs one ``stat`` of the source plus a dict lookup instead of an open,
    a stat and a sendfile; entries carry the source stamp so they go stale on their own.
    """

    def __init__(self, max_bytes: int, max_item: int) -> None:
        self.max_bytes = max_bytes
        self.max_item = max_item
        self._items: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._size = 0

    def get(self, relpath: str, name: str) -> bytes | None:
        key = (relpath, name)
        data = self._items.get(key)
        if data is not None:
            self._items.move_to_end(key)
        return data

    def put(self, relpath: str, name: str, data: bytes) -> None:
        if len(data) > self.max_item or len(data) > self.max_bytes:
            return
        key = (relpath, name)
        old = self._items.pop(key, None)
        if old is not None:
            self._size -= len(old)
        self._items[key] = data
        self._size += len(data)
        while self._size > self.max_bytes:
            _, dropped = self._items.popitem(last=False)
            self._size -= len(dropped)

    def purge(self, relpath: str) -> None:
        for key in [k for k in self._items if k[0] == relpath]:
            self._size -= len(self._items.pop(key))
