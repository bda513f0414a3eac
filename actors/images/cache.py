"""The variant cache: rendered variants on disk under ``CAIRN_DATA``, outside the served tree.

Layout: ``<cache>/<hh>/<sha256(relpath)>/<stamp>-<variant key>``. One directory per source path
makes a purge one ``rmtree``; the stamp (source mtime and size) means a file replaced behind our
back (by hand, or while a purge event is still on its way) is never answered from a stale entry.
File names are built only from a hex digest, integers and the normalised variant key, never from
request text.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path

from actors.images.params import Variant


def source_stamp(st: os.stat_result) -> str:
    return f"{st.st_mtime_ns:x}-{st.st_size:x}"


class VariantCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def dir_for(self, relpath: str) -> Path:
        digest = hashlib.sha256(relpath.encode()).hexdigest()
        return self.root / digest[:2] / digest

    def path_for(self, relpath: str, stamp: str, variant: Variant) -> Path:
        return self.dir_for(relpath) / f"{stamp}-{variant.key}"

    def store(self, target: Path, data: bytes) -> None:
        """Write atomically: a reader sees the old state or the whole new file, never half."""
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def purge(self, relpath: str) -> None:
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
