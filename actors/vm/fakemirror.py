"""A loopback image mirror for the simulated cluster (and the tests and the benchmark).

The simulator needs no real disk image, only a file whose qcow2 header gives a virtual size,
so a demo without Internet access can still run whole installs. It serves every image of the
OS matrix in the `IMAGE_BASE_URL` layout, each with its distribution's checksum file.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import struct
from collections import Counter
from collections.abc import AsyncIterator

import attrs
from aiohttp import web

from actors.vm.osimages import MATRIX

# qcow2 magic, version 3, then the virtual size (2 GiB) at byte 24, as qemu-img reads it.
IMAGE_BYTES = (
    b"QFI\xfb" + struct.pack(">I", 3) + bytes(16) + struct.pack(">Q", 2 * 1024**3)
) + b"cairn simulated cloud image " * 64


def mirror_files(payload: bytes = IMAGE_BYTES, *, corrupt: str | None = None) -> dict[str, bytes]:
    """`<os>/<version>/<file>` -> bytes; `corrupt` names an image whose published sum is wrong."""
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


_IMAGE_SUFFIXES = (".qcow2", ".img", ".raw")
_PIECE = 1 << 20


@attrs.define
class Mirror:
    base_url: str
    files: dict[str, bytes]
    hits: Counter[str] = attrs.field(factory=Counter)
    # Set to an unset Event to hold image downloads (not checksum files) until it is set.
    gate: asyncio.Event | None = None


@contextlib.asynccontextmanager
async def serve_mirror(files: dict[str, bytes] | None = None) -> AsyncIterator[Mirror]:
    """Serve `files` on a free loopback port; `Mirror.files` may be changed while it runs."""
    mirror = Mirror("", mirror_files() if files is None else files)

    async def handle(request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        mirror.hits[f"{request.method} {path}"] += 1
        body = mirror.files.get(path)
        if body is None:
            return web.Response(status=404)
        if request.method != "GET" or not path.endswith(_IMAGE_SUFFIXES):
            return web.Response(body=body, content_type="application/octet-stream")
        if mirror.gate is not None:
            await mirror.gate.wait()
        # In pieces with a length, as a real mirror sends a large file: a client can tell
        # how far it got.
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = len(body)
        await response.prepare(request)
        for at in range(0, len(body), _PIECE):
            await response.write(body[at : at + _PIECE])
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_route("*", "/mirror/{path:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    mirror.base_url = f"http://127.0.0.1:{runner.addresses[0][1]}/mirror"
    try:
        yield mirror
    finally:
        await runner.cleanup()
