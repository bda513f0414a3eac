"""The variant cache on disk stays within IMAGES_DISK_CACHE, dropping the least recently used."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from actors.images.cache import VariantCache
from tests.images.conftest import ImagesFactory
from tests.images.imagedata import decode, encoded


def _size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _age(path: Path, seconds_ago: float) -> None:
    when = time.time() - seconds_ago
    os.utime(path, (when, when))


def test_the_least_recently_used_variants_go_first(tmp_path: Path) -> None:
    cache = VariantCache(tmp_path / "cache", max_bytes=10_000)
    paths = [cache.dir_for(f"img/{i}.png") / "stamp-w100" for i in range(9)]
    for i, path in enumerate(paths):
        cache.store(path, bytes(1000))
        _age(path, 1000 - i)  # written one after the other
    _age(paths[0], 1)  # the oldest was read a moment ago: it stays
    assert _size(tmp_path / "cache") == 9000

    newest = cache.dir_for("img/new.png") / "stamp-w100"
    cache.store(newest, bytes(2500))  # 11,500 > 10,000: down to 9,000
    kept = [i for i, p in enumerate(paths) if p.exists()]
    assert kept == [0, 4, 5, 6, 7, 8] and newest.exists()
    assert _size(tmp_path / "cache") == 8500
    assert not paths[1].parent.exists()  # an emptied source folder goes too


def test_variants_left_by_an_earlier_run_count_and_unbounded_keeps_everything(
    tmp_path: Path,
) -> None:
    root = tmp_path / "cache"
    earlier = VariantCache(root)  # max_bytes 0: no bound
    for i in range(20):
        path = earlier.dir_for(f"{i}.png") / "stamp-w1"
        earlier.store(path, bytes(1000))
        _age(path, 100 + i)
    assert _size(root) == 20_000

    VariantCache(root, max_bytes=5_000).store(earlier.dir_for("x.png") / "stamp-w1", bytes(10))
    assert _size(root) <= 4_500


async def test_over_http_the_cache_stays_bounded_and_evicted_variants_come_back(
    make_images: ImagesFactory,
) -> None:
    images = await make_images(IMAGES_DISK_CACHE="20000", IMAGES_HOT_CACHE="0")
    images.put("big.jpg", encoded("JPEG", (1200, 900)))
    bodies: dict[int, bytes] = {}
    for width in range(100, 400, 20):
        async with images.http.get(f"/c/img/big.jpg?w={width}&f=png") as resp:
            assert resp.status == 200
            bodies[width] = await resp.read()
    assert sum(len(b) for b in bodies.values()) > 20_000  # more than fits
    assert _size(images.layout.cache) <= 20_000
    async with images.http.get("/c/img/big.jpg?w=100&f=png") as resp:  # long evicted
        assert resp.status == 200
        assert await resp.read() == bodies[100]


async def test_a_cache_that_cannot_be_written_still_serves_every_variant(
    make_images: ImagesFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # The cache folder replaced by a file: every store fails (as on a full disk, or when a
    # purge removes a folder between its mkdir and the write). The answer must not.
    images = await make_images(IMAGES_HOT_CACHE="0")
    images.put("a.png", encoded("PNG", (40, 20)))
    shutil.rmtree(images.layout.cache, ignore_errors=True)
    images.layout.cache.write_bytes(b"not a folder")
    for width in (10, 20, 10):
        async with images.http.get(f"/c/img/a.png?w={width}&t=png") as resp:
            assert resp.status == 200
            assert decode(await resp.read()).size == (width, width // 2)
    warnings = [r for r in caplog.records if "not cached" in r.getMessage()]
    assert len(warnings) == 1  # once a minute, not once per render
