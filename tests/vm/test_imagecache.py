"""Cloud image download from a loopback mirror: HEAD, checksum, temp-then-rename, cache."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actors.vm.imagecache import ImageCache, ImageError
from actors.vm.osimages import OsImage, find_image
from tests.vm.mirror import IMAGE_BYTES, mirror_files, serve_mirror


def _image(os_name: str, version: str) -> OsImage:
    image = find_image(os_name, version)
    assert image is not None
    return image


DEBIAN = _image("debian", "12")
ROCKY = _image("rockylinux", "9")


async def test_download_verifies_and_caches(tmp_path: Path) -> None:
    async with serve_mirror(mirror_files()) as mirror:
        cache = ImageCache(tmp_path, mirror.base_url)
        await cache.head(DEBIAN)
        path = await cache.fetch(DEBIAN)
        assert path.read_bytes() == IMAGE_BYTES
        assert cache.cached(DEBIAN)
        again = await cache.fetch(DEBIAN)
        assert again == path
        assert mirror.hits[f"GET debian/12/{DEBIAN.filename}"] == 1
        assert mirror.hits["GET debian/12/SHA512SUMS"] == 1
        assert not any(p.name.endswith(".part") for p in cache.root.iterdir())


async def test_bsd_style_checksum_of_rocky(tmp_path: Path) -> None:
    async with serve_mirror(mirror_files()) as mirror:
        path = await ImageCache(tmp_path, mirror.base_url).fetch(ROCKY)
        assert path.read_bytes() == IMAGE_BYTES


async def test_checksum_mismatch_keeps_nothing(tmp_path: Path) -> None:
    async with serve_mirror(mirror_files(corrupt=DEBIAN.filename)) as mirror:
        cache = ImageCache(tmp_path, mirror.base_url)
        with pytest.raises(ImageError, match="sha512 checksum mismatch"):
            await cache.fetch(DEBIAN)
        assert not cache.cached(DEBIAN)
        assert not any(tmp_path.iterdir())  # noqa: ASYNC240


async def test_missing_image_and_head_failures(tmp_path: Path) -> None:
    files = mirror_files()
    del files[f"debian/12/{DEBIAN.filename}"]
    async with serve_mirror(files) as mirror:
        cache = ImageCache(tmp_path, mirror.base_url)
        with pytest.raises(ImageError, match="answered HTTP 404"):
            await cache.head(DEBIAN)
        with pytest.raises(ImageError, match="answered HTTP 404"):
            await cache.fetch(DEBIAN)
    with pytest.raises(ImageError, match="not reachable"):
        await ImageCache(tmp_path, "http://127.0.0.1:9/nothing").head(DEBIAN)


async def test_sums_file_not_listing_the_image_is_an_error(tmp_path: Path) -> None:
    files = mirror_files()
    files["debian/12/SHA512SUMS"] = b"00  something-else.qcow2\n"
    async with serve_mirror(files) as mirror:
        with pytest.raises(ImageError, match="lists no checksum"):
            await ImageCache(tmp_path, mirror.base_url).fetch(DEBIAN)


async def test_no_published_sums_downloads_unverified(tmp_path: Path) -> None:
    files = mirror_files()
    del files["debian/12/SHA512SUMS"]
    async with serve_mirror(files) as mirror:
        path = await ImageCache(tmp_path, mirror.base_url).fetch(DEBIAN)
        assert path.read_bytes() == IMAGE_BYTES


async def test_concurrent_installs_share_one_download(tmp_path: Path) -> None:
    async with serve_mirror(mirror_files()) as mirror:
        cache = ImageCache(tmp_path, mirror.base_url)
        paths = await asyncio.gather(*(cache.fetch(DEBIAN) for _ in range(5)))
        assert len(set(paths)) == 1
        assert mirror.hits[f"GET debian/12/{DEBIAN.filename}"] == 1
