"""Where the image service keeps things under ``CAIRN_DATA/images``.

Only ``store/`` is served. The trash, the variant cache and the upload temp files are its
siblings, so no URL path can reach them (a resolved path must stay under ``store/``), and the
temp dir is on the same file system as the store, so publishing an upload is one rename.
"""

from __future__ import annotations

from pathlib import Path

import attrs


@attrs.frozen
class StoreLayout:
    base: Path

    @property
    def store(self) -> Path:
        return self.base / "store"

    @property
    def trash(self) -> Path:
        return self.base / "trash"

    @property
    def cache(self) -> Path:
        return self.base / "cache"

    @property
    def tmp(self) -> Path:
        return self.base / "tmp"

    @classmethod
    def create(cls, data_dir: Path) -> StoreLayout:
        layout = cls((data_dir / "images").resolve())
        for path in (layout.store, layout.trash, layout.cache, layout.tmp):
            path.mkdir(parents=True, exist_ok=True)
        return layout
