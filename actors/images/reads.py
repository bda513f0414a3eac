"""The read model of the image store: what a path holds, and its variants, cached.

Reads never go through the actor: a file's bytes go from disk to the client with no hop
between, and only writes need the one actor's order. A source is
identified by its path plus a stamp (mtime and size), so every cache here (probe results, the
in-memory hot cache, the disk cache) is right even before a purge event arrives.
"""

from __future__ import annotations

import asyncio
import os
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import attrs

from actors.images.cache import HotCache, VariantCache, source_stamp
from actors.images.layout import StoreLayout
from actors.images.params import Variant
from actors.images.pool import RenderPool
from actors.images.sniff import Kind
from actors.images.transform import SourceInfo, TooManyPixels, probe, render, sniff_file


@attrs.frozen
class Probed:
    """What a source is: its kind always, its raster facts unless it is over the limit."""

    kind: Kind
    info: SourceInfo | None  # None: the header declares too many pixels


class ImageReader:
    def __init__(
        self,
        layout: StoreLayout,
        pool: RenderPool,
        *,
        max_pixels: int,
        hot: HotCache,
        disk_bytes: int = 0,
        probe_entries: int = 4096,
    ) -> None:
        self.layout = layout
        self.pool = pool
        self.max_pixels = max_pixels
        self.hot = hot
        self.disk = VariantCache(layout.cache, disk_bytes)
        self._probes: OrderedDict[str, tuple[str, Probed]] = OrderedDict()
        self._probe_entries = probe_entries

    async def probe(self, rel: str, target: Path, st: os.stat_result) -> Probed:
        """Raises :class:`~actors.images.transform.Undecodable` for files we never serve."""
        stamp = source_stamp(st)
        hit = self._probes.get(rel)
        if hit is not None and hit[0] == stamp:
            self._probes.move_to_end(rel)
            return hit[1]
        probed = await asyncio.to_thread(self._probe_blocking, target)
        self._probes[rel] = (stamp, probed)
        if len(self._probes) > self._probe_entries:
            self._probes.popitem(last=False)
        return probed

    def _probe_blocking(self, target: Path) -> Probed:
        kind = sniff_file(target)
        try:
            return Probed(kind, probe(target, self.max_pixels, kind))
        except TooManyPixels:
            return Probed(kind, None)

    async def variant(self, rel: str, target: Path, st: os.stat_result, variant: Variant) -> bytes:
        """The variant's bytes: from memory, from disk, or rendered once in the pool."""
        stamp = source_stamp(st)
        name = f"{stamp}-{variant.key}"
        data = self.hot.get(rel, name)
        if data is not None:
            return data
        cached = self.disk.path_for(rel, stamp, variant)
        # a disk hit must not queue behind renders in the pool
        data = await asyncio.to_thread(_read_or_none, cached)
        if data is None:
            data = await self.pool.run((rel, name), self._job(target, cached, variant))
        self.hot.put(rel, name, data)
        return data

    def _job(self, target: Path, cached: Path, variant: Variant) -> Callable[..., bytes]:
        def work(cancelled: Callable[[], bool]) -> bytes:
            data = _read_or_none(cached)
            if data is not None:
                return data
            data = render(target, variant, self.max_pixels, cancelled)
            self.disk.keep(cached, data)
            return data

        return work

    def purge(self, rel: str) -> None:
        """Forget every variant of ``rel`` (called for stored and deleted events)."""
        self._probes.pop(rel, None)
        self.hot.purge(rel)
        self.disk.purge(rel)


def _read_or_none(path: Path) -> bytes | None:
    """A cached variant's bytes, or None for a miss; a cache folder that cannot be read is a
    miss too (the variant is rendered from its source, which is what counts)."""
    try:
        return path.read_bytes()
    except OSError:
        return None
