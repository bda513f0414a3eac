"""A loopback HTTP mirror laid out as IMAGE_BASE_URL expects: <base>/<os>/<version>/<file>."""

from __future__ import annotations

import hashlib
import struct
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
from aiohttp import web

from actors.vm.osimages import MATRIX

# A qcow2 header (magic, version 3, virtual size 2 GiB at offset 24) and some filler: enough
# for `qm disk import` to read the size the way qemu-img would.
IMAGE_BYTES = (
    b"QFI\xfb" + struct.pack(">I", 3) + bytes(16) + struct.pack(">Q", 2 * 1024**3)
) + b"cairn test image " * 64


@attrs.define
class Mirror:
    base_url: str
    files: dict[str, bytes]
    hits: Counter[str] = attrs.field(factory=Counter)


def mirror_files(payload: bytes = IMAGE_BYTES, *, corrupt: str | None = None) -> dict[str, bytes]:
    """Every image of the matrix plus its distribution's checksum file."""
    files: dict[str, bytes] = {}
    for versions in MATRIX.values():
        for image in versions.values():
            prefix = f"{image.os}/{image.version}"
            files[f"{prefix}/{image.filename}"] = payload
            digest = hashlib.new(image.algorithm, payload).hexdigest()
            if corrupt == image.filename:
                digest = "0" * len(digest)
            if image.sums_name == "CHECKSUM":
                line = f"SHA256 ({image.filename}) = {digest}\n"
            else:
                line = f"{digest} *{image.filename}\n"
            files[f"{prefix}/{image.sums_name}"] = line.encode()
    return files


@asynccontextmanager
async def serve_mirror(files: dict[str, bytes]) -> AsyncIterator[Mirror]:
    mirror = Mirror("", files)

    async def handle(request: web.Request) -> web.Response:
        path = request.match_info["path"]
        mirror.hits[f"{request.method} {path}"] += 1
        body = mirror.files.get(path)
        if body is None:
            return web.Response(status=404)
        return web.Response(body=body, content_type="application/octet-stream")

    app = web.Application()
    app.router.add_route("*", "/mirror/{path:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    mirror.base_url = f"http://127.0.0.1:{port}/mirror"
    try:
        yield mirror
    finally:
        await runner.cleanup()
