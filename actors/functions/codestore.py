"""Function code, content-addressed: ``<root>/<sha[:2]>/<sha>``. Identical code is stored
once; a file is written to a temporary name and renamed, so a reader never sees half of it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from pathlib import Path
from typing import Protocol

from events.files import SECRET, write_atomically

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def digest(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


class CodeStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path_of(self, sha256: str) -> Path:
        if not _SHA256.match(sha256):
            raise ValueError(f"not a SHA-256: {sha256!r}")
        return self.root / sha256[:2] / sha256

    def put(self, code: str) -> str:
        """Store ``code`` (idempotent); returns its SHA-256. Raises OSError when it cannot."""
        sha = digest(code)
        target = self.path_of(sha)
        if target.is_file():
            return sha
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, code, mode=SECRET)
        return sha

    def get(self, sha256: str) -> str:
        return self.path_of(sha256).read_text(encoding="utf-8")

    def shas(self) -> list[str]:
        """Every code held here, by SHA-256."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.glob("??/*") if _SHA256.match(p.name))

    def remove(self, sha256: str) -> None:
        """Forget code no version uses any more (already gone: nothing to do)."""
        with contextlib.suppress(FileNotFoundError):
            self.path_of(sha256).unlink()


class Code(Protocol):
    """Where the registry keeps code, seen from the event loop."""

    async def put(self, code: str) -> str: ...

    async def get(self, sha256: str) -> str: ...

    async def remove(self, sha256: str) -> None: ...


class LocalCode:
    """A :class:`CodeStore` on this host's disk (one host)."""

    def __init__(self, files: CodeStore) -> None:
        self.files = files

    async def put(self, code: str) -> str:
        return await asyncio.to_thread(self.files.put, code)

    async def get(self, sha256: str) -> str:
        return await asyncio.to_thread(self.files.get, sha256)

    async def remove(self, sha256: str) -> None:
        await asyncio.to_thread(self.files.remove, sha256)
