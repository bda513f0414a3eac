"""Uploads and deletes over HTTP, their events, and the time-out."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import signal
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

from actors.images.events import ImageDeleted, ImageStored
from actors.platform import Runtime
from events.nats_server import EmbeddedNats
from events.relay import OutboxRelay
from events.signing import SIG_HEADER
from events.store import EventStore, default_store_url
from tests.conftest import wait_for
from tests.images.conftest import Images, ImagesFactory
from tests.images.imagedata import decode, encoded, png_bomb


async def test_upload_stores_and_answers_201(images: Images, runtime: Runtime) -> None:
    data = encoded("JPEG", (64, 48))
    async with await images.upload("photos/2026", "cat.jpg", data) as resp:
        assert resp.status == 201
        assert await resp.json() == {
            "success": True,
            "filename": "cat.jpg",
            "type": "image/jpeg",
            "size": len(data),
            "src": "/c/img/photos/2026/cat.jpg",
        }
    assert (images.layout.store / "photos/2026/cat.jpg").read_bytes() == data
    assert list(images.layout.tmp.iterdir()) == []
    async with images.http.get("/c/img/photos/2026/cat.jpg") as resp:
        assert await resp.read() == data
    recorded = await runtime.store.read_stream("images:store")
    assert [type(r.event) for r in recorded] == [ImageStored]
    event = recorded[0].event
    assert isinstance(event, ImageStored)
    assert (event.path, event.type, event.size) == ("photos/2026/cat.jpg", "image/jpeg", len(data))


async def test_src_is_url_encoded(images: Images) -> None:
    async with await images.upload("x", "a b#?.png", encoded("PNG", (4, 4))) as resp:
        assert resp.status == 201
        body = await resp.json()
    assert body["src"] == "/c/img/x/a%20b%23%3F.png"
    async with images.http.get(URL(body["src"], encoded=True)) as resp:
        assert resp.status == 200


@pytest.mark.parametrize("target", ["/upload/", "/upload", "/upload//", "/upload/%2F"])
async def test_an_upload_without_a_path_is_refused_as_the_original_does(
    images: Images, target: str
) -> None:
    form = aiohttp.FormData(quote_fields=False)
    form.add_field("filepath", encoded("PNG", (4, 4)), filename="a.png")
    async with images.http.post(URL(target, encoded=True), data=form) as resp:
        assert (resp.status, await resp.text()) == (400, "please assign a path first")
    assert list(images.layout.store.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "data", "mime"),
    [
        ("a.gif", encoded("GIF", (4, 4)), "image/gif"),
        ("a.webp", encoded("WEBP", (4, 4)), "image/webp"),
        ("a.avif", encoded("AVIF", (4, 4)), "image/avif"),
        ("a.svg", b'<svg xmlns="http://www.w3.org/2000/svg"/>', "image/svg+xml"),
        ("a.pdf", b"%PDF-1.4\n%%EOF\n", "application/pdf"),
        ("photo.png", encoded("JPEG", (4, 4)), "image/jpeg"),  # the bytes decide
    ],
)
async def test_upload_types_are_sniffed(images: Images, name: str, data: bytes, mime: str) -> None:
    async with await images.upload("t", name, data) as resp:
        assert resp.status == 201
        assert (await resp.json())["type"] == mime


@pytest.mark.parametrize(
    "data",
    [
        b"#!/bin/sh\nrm -rf ~\n",
        b"<html><script>alert(1)</script></html>",
        b"\x7fELF\x02\x01\x01" + b"\x00" * 2000,
        b"\xff\xd8\xff" + b"not really a jpeg" * 10,
    ],
)
async def test_a_script_named_png_is_refused(images: Images, data: bytes) -> None:
    async with await images.upload("x", "evil.png", data) as resp:
        assert resp.status == 415
        assert resp.headers["Content-Type"].startswith("text/plain")
        assert await resp.text() == "unsupported file type"
    assert not (images.layout.store / "x").exists()
    assert list(images.layout.tmp.iterdir()) == []


async def test_failures_log_two_error_lines(
    images: Images, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="cairn.images"):
        async with await images.upload("x", "evil.png", b"#!/bin/sh\n") as resp:
            assert resp.status == 415
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2
    assert "415 unsupported file type" in errors[0].getMessage()


async def test_size_cap(make_images: ImagesFactory) -> None:
    images = await make_images(IMAGES_MAX_UPLOAD="3000")
    small = encoded("PNG", (4, 4))
    padded = small + b"\x00" * (3000 - len(small))
    async with await images.upload("s", "ok.png", padded) as resp:
        assert resp.status == 201
    async with await images.upload("s", "big.png", padded + b"\x00") as resp:
        assert resp.status == 413
        assert await resp.text() == "file too large (limit 3000 bytes)"
    assert not (images.layout.store / "s/big.png").exists()
    assert list(images.layout.tmp.iterdir()) == []


async def test_size_cap_from_content_length_before_reading(make_images: ImagesFactory) -> None:
    images = await make_images(IMAGES_MAX_UPLOAD="1000")
    headers = {"Content-Type": "multipart/form-data; boundary=x", "Content-Length": "99999999"}
    async with images.http.post("/upload/a", data=b"--x--\r\n", headers=headers) as resp:
        assert resp.status == 413


async def test_pixel_bomb_upload_is_refused(images: Images) -> None:
    async with await images.upload("b", "bomb.png", png_bomb()) as resp:
        assert resp.status == 413
        assert (await resp.text()).startswith("image too large")
    assert not (images.layout.store / "b").exists()


@pytest.mark.parametrize(
    ("kwargs", "status", "message"),
    [
        ({"field": "file"}, 400, 'missing file field "filepath"'),
        ({"filename": "../up.png"}, 400, "invalid file name"),
        ({"filename": "a/b.png"}, 400, "invalid file name"),
        ({"filename": ".."}, 400, "invalid file name"),
        ({"filename": "a\\b.png"}, 400, "invalid file name"),
        ({"data": b""}, 400, "empty file"),
    ],
)
async def test_upload_errors(
    images: Images, kwargs: dict[str, object], status: int, message: str
) -> None:
    args: dict[str, object] = {"filename": "a.png", "data": encoded("PNG", (4, 4))} | kwargs
    async with await images.upload("u", **args) as resp:  # type: ignore[arg-type]
        assert resp.status == status
        assert await resp.text() == message
    assert not (images.layout.store / "u").exists()


async def test_upload_needs_multipart(images: Images) -> None:
    async with images.http.post("/upload/a", data=b"raw bytes") as resp:
        assert resp.status == 400
        assert "multipart/form-data" in await resp.text()


async def test_upload_onto_a_directory_conflicts(images: Images) -> None:
    images.put("d/x.png/inner.png", encoded("PNG", (4, 4)))
    async with await images.upload("d", "x.png", encoded("PNG", (4, 4))) as resp:
        assert (resp.status, await resp.text()) == (409, "a directory exists at this path")


async def test_an_upload_path_naming_a_file_is_told_the_path_is_the_folder(
    images: Images,
) -> None:
    async with await images.upload("cats", "a.png", encoded("PNG", (4, 4))) as resp:
        assert resp.status == 201
    # The classic slip: the file's own name in the path as well as in the upload.
    async with await images.upload("cats/a.png", "a.png", encoded("PNG", (4, 4))) as resp:
        assert (resp.status, await resp.text()) == (
            409,
            "a file is in the way of this path: cats/a.png is a file; the upload path is the "
            "folder the file goes into (its name comes from the upload)",
        )
    assert images.layout.store.joinpath("cats", "a.png").is_file()


async def cached_variants(images: Images, image: str, kind: str) -> Path:
    """The folder of ``image``'s cached variants, once one is on disk. The purge that the
    image's own upload event causes may come after the first answer (the event goes round the
    bus, late on a loaded machine) and take that variant with it: each try asks for a variant
    of a new width, which is rendered and written anew, until one stays."""
    widths = itertools.count(10)

    def found() -> list[Path]:
        return [p for p in images.layout.cache.glob("*/*") if p.is_dir() and any(p.iterdir())]

    async def served_and_cached() -> bool:
        async with images.http.get(f"/c/img/{image}?w={next(widths)}&t={kind}") as resp:
            assert resp.status == 200, await resp.text()
        return bool(found())

    await wait_for(served_and_cached, what="a cached variant")
    return found()[0]


async def test_reupload_replaces_and_purges_variants(images: Images) -> None:
    async with await images.upload("r", "a.png", encoded("PNG", (40, 40))) as resp:
        assert resp.status == 201
    async with images.http.get("/c/img/r/a.png?w=10&t=png") as resp:
        assert decode(await resp.read()).size == (10, 10)
    cache_dir = await cached_variants(images, "r/a.png", "png")
    async with await images.upload("r", "a.png", encoded("PNG", (80, 40))) as resp:
        assert resp.status == 201
    await wait_for(lambda: not cache_dir.exists(), what="variants purged")
    async with images.http.get("/c/img/r/a.png?w=10&t=png") as resp:
        assert decode(await resp.read()).size == (10, 5)


async def test_delete_moves_to_trash_and_purges(images: Images, runtime: Runtime) -> None:
    data = encoded("PNG", (40, 40))
    async with await images.upload("del", "a.png", data) as resp:
        assert resp.status == 201
    async with images.http.get("/c/img/del/a.png?w=10&t=webp") as resp:
        assert resp.status == 200
    cache_dir = await cached_variants(images, "del/a.png", "webp")
    async with images.http.delete("/del/del/a.png") as resp:
        assert resp.status == 200
        assert await resp.json() == {"success": True, "message": "del/a.png deleted"}
    assert not (images.layout.store / "del/a.png").exists()
    trashed = [p for p in images.layout.trash.rglob("a.png")]
    assert len(trashed) == 1 and trashed[0].read_bytes() == data
    await wait_for(lambda: not cache_dir.exists(), what="variants purged")
    async with images.http.get("/c/img/del/a.png?w=10&t=webp") as resp:
        assert resp.status == 404
    recorded = await runtime.store.read_stream("images:store")
    assert [type(r.event) for r in recorded] == [ImageStored, ImageDeleted]
    async with images.http.delete("/del/del/a.png") as resp:
        assert resp.status == 404
        assert await resp.text() == "file not found"


async def test_delete_unknown_and_invalid(images: Images) -> None:
    async with images.http.delete("/del/never/was.png") as resp:
        assert resp.status == 404
        assert await resp.text() == "file not found"
    async with images.http.delete("/del/") as resp:
        assert resp.status == 400
        assert await resp.text() == "invalid path"


async def test_delete_a_file_copied_in_by_hand(images: Images) -> None:
    images.put("manual.png", encoded("PNG", (4, 4)))
    async with images.http.delete("/del/manual.png") as resp:
        assert resp.status == 200


async def test_stalled_upload_times_out_with_408(make_images: ImagesFactory) -> None:
    images = await make_images(IMAGES_TIMEOUT="0.3")
    url = URL(images.base)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    head = (
        "POST /upload/slow HTTP/1.1\r\nHost: x\r\n"
        "Content-Type: multipart/form-data; boundary=BOUND\r\nContent-Length: 100000\r\n\r\n"
        '--BOUND\r\nContent-Disposition: form-data; name="filepath"; filename="a.png"\r\n\r\n'
    )
    writer.write(head.encode() + encoded("PNG", (4, 4))[:20])
    await writer.drain()
    # the client never sends the rest; the handler must give up on its own
    head_bytes = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    assert head_bytes.startswith(b"HTTP/1.1 408")
    assert b"Content-Length: 9\r\n" in head_bytes
    assert await reader.readexactly(9) == b"timed out"
    writer.close()
    # the cancelled upload left no temp file and wrote nothing
    await wait_for(lambda: list(images.layout.tmp.iterdir()) == [], what="temp file removed")
    assert not (images.layout.store / "slow").exists()


async def test_an_event_from_another_host_purges_this_hosts_cache(
    images: Images, runtime: Runtime
) -> None:
    images.put("shared/p.png", encoded("PNG", (40, 40)))
    async with images.http.get("/c/img/shared/p.png?w=10&t=png") as resp:
        assert resp.status == 200
    cache_dir = await cached_variants(images, "shared/p.png", "png")
    # what another host's store actor publishes after a delete
    payload = {
        "type": "images.deleted",
        "stream": "images:store",
        "version": 7,
        "position": 99,
        "data": {"path": "shared/p.png", "trashed_as": "x/shared/p.png"},
    }
    data, subject = json.dumps(payload).encode(), "cairn.evt.images.store"
    assert runtime.signer is not None  # signed with the hosts' events key, as a host does
    signed = {SIG_HEADER: runtime.signer.sign(subject, data)}
    await runtime.nc.publish(subject, data, headers=signed)
    await wait_for(lambda: not cache_dir.exists(), what="variants purged by the event")


async def test_a_purge_from_another_host_is_not_lost_across_a_nats_restart(
    images: Images, runtime: Runtime, nats_server: EmbeddedNats
) -> None:
    images.put("shared/q.png", encoded("PNG", (40, 40)))
    async with images.http.get("/c/img/shared/q.png?w=10&t=png") as resp:
        assert resp.status == 200
    cache_dir = await cached_variants(images, "shared/q.png", "png")
    # Another host on the same store, with its own relay and NATS connection.
    other = await EventStore.open(default_store_url(runtime.data_dir))
    other_nc = await nats_server.connect()
    relay = OutboxRelay(other, other_nc, retry_interval=0.05)
    await relay.start()
    try:
        assert nats_server.pid is not None
        os.kill(nats_server.pid, signal.SIGKILL)
        # Deleted there while this host is cut off from NATS: published once the bus is back.
        version = await other.stream_version("images:store")
        await other.append(
            "images:store", version, [ImageDeleted(path="shared/q.png", trashed_as="t/q.png")]
        )
        await wait_for(lambda: nats_server.restarts == 1, what="nats-server restarted")
        await wait_for(lambda: not cache_dir.exists(), timeout=15, what="variants purged")
    finally:
        await relay.stop()
        await other_nc.close()
        await other.close()
