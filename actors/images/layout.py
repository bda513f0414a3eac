"""Where the image service keeps things under ``CAIRN_DATA/images``.

Only ``store/`` is served. The trash, the variant cache and the upload temp files are its
siblings, so no URL path can reach them (a resolved path must stay under ``store/``), and the
temp dir is on the same file system as the store, so publishing an upload is one rename.

Each directory is resolved once, at start: ``store``, ``trash`` and ``tmp`` may be mount
points or symlinks into one shared filesystem (several image hosts, docs/images.md), and the
path checks compare against the resolved directory.
"""

from __future__ import annotations

from pathlib import Path

import attrs


@attrs.frozen
class StoreLayout:
    base: Path  # CAIRN_DATA/images
    store: Path
    trash: Path
    cache: Path
    tmp: Path

    @classmethod
    def create(cls, data_dir: Path) -> StoreLayout:
        base = data_dir / "images"
        paths = {}
        for name in ("store", "trash", "cache", "tmp"):
            (base / name).mkdir(parents=True, exist_ok=True)
            paths[name] = (base / name).resolve()
        return cls(base=base.resolve(), **paths)
