"""Cloud images on local disk: HEAD check, download to a temporary file, checksum, rename.

A cached file is only ever a complete, verified one: the download goes to `<name>.part`, is
hashed while it streams, and is renamed into place only if the digest matches what the
distribution publishes. Concurrent installs of the same image share one download.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import aiohttp

from actors.vm.osimages import OsImage, checksum_for

_CHUNK = 1 << 20

# (bytes so far, bytes in all or None when the server did not say)
DownloadProgress = Callable[[int, int | None], None]


class ImageError(Exception):
    """The image cannot be had; the message says which URL and why."""


class ImageCache:
    def __init__(self, root: Path, base_url: str | None, timeout: float = 3600.0) -> None:
        self.root = root
        self.base_url = base_url
        self._timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=15)
        self._inflight: dict[str, asyncio.Future[Path]] = {}

    def path_for(self, image: OsImage) -> Path:
        return self.root / image.cache_name

    def cached(self, image: OsImage) -> bool:
        return self.path_for(image).is_file()

    async def head(self, image: OsImage) -> None:
        url = image.image_url(self.base_url)
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
                session.head(url, allow_redirects=True) as resp,
            ):
                if resp.status != 200:
                    raise ImageError(f"{url} answered HTTP {resp.status}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ImageError(f"{url} is not reachable: {exc}") from None

    async def fetch(self, image: OsImage, progress: DownloadProgress | None = None) -> Path:
        """The verified local file, downloading it if it is not cached yet. ``progress`` hears
        about every piece of a download this call makes (not of one it waits for)."""
        target = self.path_for(image)
        if target.is_file():
            return target
        key = image.cache_name
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Path] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            path = await self._download(image, target, progress)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it, nobody else must log it
            raise
        else:
            future.set_result(path)
            return path
        finally:
            self._inflight.pop(key, None)

    async def _expected_digest(self, session: aiohttp.ClientSession, image: OsImage) -> str | None:
        url = image.sums_url(self.base_url)
        try:
            async with session.get(url) as resp:
                if resp.status == 404:
                    return None  # this source publishes no sums: nothing to verify against
                if resp.status != 200:
                    raise ImageError(f"{url} answered HTTP {resp.status}")
                text = await resp.text(errors="replace")
        except aiohttp.ClientError as exc:
            raise ImageError(f"{url} is not reachable: {exc}") from None
        digest = checksum_for(text, image.filename)
        if digest is None:
            raise ImageError(f"{url} lists no checksum for {image.filename}")
        return digest

    async def _download(
        self, image: OsImage, target: Path, progress: DownloadProgress | None
    ) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        url = image.image_url(self.base_url)
        part = target.with_name(f"{target.name}.{os.getpid()}.part")
        hasher = hashlib.new(image.algorithm)
        try:
            async with aiohttp.ClientSession(timeout=self._timeout) as session:
                expected = await self._expected_digest(session, image)
                async with session.get(url) as resp:
                    if resp.status != 200:
                        raise ImageError(f"{url} answered HTTP {resp.status}")
                    total, done = resp.content_length, 0
                    with part.open("wb") as fh:
                        async for chunk in resp.content.iter_chunked(_CHUNK):
                            hasher.update(chunk)
                            fh.write(chunk)
                            done += len(chunk)
                            if progress is not None:
                                progress(done, total)
            if expected is not None and hasher.hexdigest() != expected:
                raise ImageError(
                    f"{url}: {image.algorithm} checksum mismatch "
                    f"(got {hasher.hexdigest()[:16]}..., published {expected[:16]}...)"
                )
            os.replace(part, target)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ImageError(f"download of {url} failed: {exc}") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()
        return target
