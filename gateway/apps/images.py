"""The image service: read, upload, delete, health; everything else 404.

Reads are served straight from the store's read model (the files, their cached variants); uploads
and deletes are commands to the image store actor over NATS; the actor's events come back over
NATS and purge this host's caches, so several gateway hosts stay coherent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import attrs
from aiohttp import BodyPartReader, hdrs, web
from aiohttp.helpers import ETAG_ANY
from aiohttp.http_exceptions import HttpProcessingError
from nats.aio.msg import Msg

from actors.images.cache import HotCache, source_stamp
from actors.images.commands import (
    DELETE_SUBJECT,
    EVENTS_SUBJECT,
    STORE_SUBJECT,
    leased_store,
    serve_store,
)
from actors.images.layout import StoreLayout
from actors.images.listing import NotAFolder, list_folder
from actors.images.params import ReadParams, negotiate, parse_params, plan_variant
from actors.images.paths import UnsafePath, clean_filename, clean_relpath, lookup
from actors.images.placeholder import placeholder_svg
from actors.images.pool import RenderPool
from actors.images.reads import ImageReader
from actors.images.settings import ImageSettings
from actors.images.sniff import SNIFF_BYTES, Kind, sniff
from actors.images.transform import TooManyPixels, Undecodable, avif_supported, probe
from actors.platform import Runtime
from events.bus import CommandFailed, CommandTimeout, NoResponders, command
from events.errors import disk_full, reason
from events.follow import Follower
from gateway.http.allow_ips import ClientFilter
from gateway.http.exposure import require_allow_ips_or_tokens
from gateway.http.health import add_health, quarantined
from gateway.http.identity import asked_by
from gateway.http.tokens import FILE_NAME
from gateway.openapi import add_openapi
from gateway.services import ServiceDef

log = logging.getLogger("cairn.images")

READ_PREFIX = "/c/img/"
# The rest of the path, every character: a "." would stop at an encoded newline (%0A), and
# that request would miss the route and get 404 `Not Found` instead of the path's answer.
REST = r"{path:[\s\S]*}"
SVG_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; sandbox"
OUTPUT_MIME = {"webp": "image/webp", "avif": "image/avif", "jpg": "image/jpeg", "png": "image/png"}
UPLOAD_CHUNK = 256 * 1024
MULTIPART_SLACK = 64 * 1024  # headers and boundaries around the file in a multipart body
OTHER_FIELD_LIMIT = 64 * 1024
STALE_TMP_SECONDS = 3600
HOT_ITEM_MAX = 1024 * 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Failure(Exception):
    """An upload or delete refused with ``status`` and a plain-text ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# Sources a read without parameters converts for a client that accepts AVIF/WebP. GIFs may be
# animated (a variant keeps the first frame) and WebP/AVIF are compact already: as uploaded.
NEGOTIATED_ORIGINALS = ("jpg", "png")


@web.middleware
async def not_found(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Any route or method not listed answers 404 ``Not Found``, the one answer the image
    service's clients expect for it."""
    try:
        return await handler(request)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
        return web.Response(status=404, text="Not Found")


def _peer(request: web.Request) -> str:
    return request.remote or "?"


def _fail(request: web.Request, action: str, status: int, message: str) -> web.Response:
    # two lines, so a log reader sees at once what failed, then who asked for what
    log.error("%s failed: %d %s", action, status, message)
    log.error("%s request from %s for %r", action, _peer(request), request.match_info.get("path"))
    return web.Response(status=status, text=message)


@attrs.define(eq=False)
class ImageService:
    runtime: Runtime
    settings: ImageSettings
    layout: StoreLayout
    reader: ImageReader
    # ALLOW_IPS and TRUSTED_PROXIES: who the client is, for the audit trail's `by`.
    clients: ClientFilter
    store_root: Path = attrs.field(init=False)
    avif: bool = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.store_root = self.layout.store.resolve()
        self.avif = avif_supported()
        if not self.avif:
            log.warning("this Pillow cannot write AVIF: clients asking for it get WebP")

    # -- helpers -------------------------------------------------------------------------------

    def timed(self, handler: Handler) -> Handler:
        """The handler time-out, so a stuck transform cannot hold a connection: 408
        ``timed out``, and the work is cancelled."""

        async def run(request: web.Request) -> web.StreamResponse:
            try:
                async with asyncio.timeout(self.settings.timeout):
                    return await handler(request)
            except TimeoutError:
                log.error("%s %s timed out", request.method, request.path)
                log.error("request from %s", _peer(request))
                return web.Response(status=408, text="timed out")

        return run

    def placeholder(self, params: ReadParams) -> web.Response:
        width = params.width or params.size
        height = params.height or params.size
        return web.Response(
            status=404,
            body=placeholder_svg(params.dark, width, height),
            headers={
                "Content-Type": "image/svg+xml",
                "Cache-Control": "no-cache",
                "Content-Security-Policy": SVG_CSP,
                "X-Content-Type-Options": "nosniff",
            },
        )

    def _cache_headers(self) -> dict[str, str]:
        return {
            "Cache-Control": f"public, max-age={self.settings.max_age}",
            "X-Content-Type-Options": "nosniff",
        }

    def _modern(self, accept: str, source: str) -> str | None:
        """AVIF or WebP if the client lists one (and this Pillow writes it); None: the source's
        own format is what the client gets."""
        fmt = negotiate(accept, source, False, self.avif)
        return None if fmt == source else fmt

    def original(self, target: Path, kind: Kind, *, vary: bool = False) -> web.StreamResponse:
        # FileResponse brings ETag, Last-Modified, 304, Range/206 and sendfile
        return web.FileResponse(target, headers=self._original_headers(kind, vary))

    def _original_headers(self, kind: Kind, vary: bool = False) -> dict[str, str]:
        headers = self._cache_headers()
        if vary:  # another Accept would have been given another format
            headers["Vary"] = "Accept"
        headers["Content-Type"] = kind.mime
        if kind.name == "svg":
            headers["Content-Security-Policy"] = SVG_CSP
        elif kind.name == "pdf":
            headers["Content-Disposition"] = "inline"
        return headers

    async def small_original(
        self,
        request: web.Request,
        rel: str,
        target: Path,
        st: os.stat_result,
        kind: Kind,
        *,
        vary: bool = False,
    ) -> web.StreamResponse:
        """A small original from memory: the same headers as :meth:`original` (and the same
        ETag), without the two thread hops and the sendfile that cost more than the bytes."""
        headers = self._original_headers(kind, vary)
        stamp = source_stamp(st)
        headers["ETag"] = f'"{stamp}"'
        headers["Last-Modified"] = _http_date(st.st_mtime)
        headers["Accept-Ranges"] = "bytes"
        if _not_modified(request, stamp, st.st_mtime):
            return web.Response(status=304, headers=headers)
        name = f"original-{stamp}"
        data = self.reader.hot.get(rel, name)
        if data is None:
            data = await asyncio.to_thread(target.read_bytes)
            if len(data) != st.st_size:  # replaced while we read: let sendfile handle it
                return self.original(target, kind, vary=vary)
            self.reader.hot.put(rel, name, data)
        return web.Response(body=data, headers=headers)

    # -- handlers ------------------------------------------------------------------------------

    async def read(self, request: web.Request) -> web.StreamResponse:
        params = parse_params(request.query)
        try:
            rel, target, st = lookup(self.store_root, request.match_info["path"])
        except (UnsafePath, OSError, ValueError):
            return self.placeholder(params)
        if not stat.S_ISREG(st.st_mode):
            return self.placeholder(params)
        try:
            probed = await self.reader.probe(rel, target, st)
        except (Undecodable, OSError):
            return self.placeholder(params)
        accept = request.headers.get("Accept", "")
        negotiated = not params.origin and probed.kind.name in NEGOTIATED_ORIGINALS
        fmt: str | None = params.fmt
        if not params.transforms or not probed.kind.raster:
            # No parameters: a JPEG or PNG goes out as AVIF/WebP to a client that lists them
            # (without `t` the smallest format the browser takes wins, and it says which in
            # Accept); `o` and other sources: as uploaded.
            fmt = self._modern(accept, probed.kind.name) if negotiated else None
            if fmt is None or probed.info is None:
                if st.st_size > HOT_ITEM_MAX or hdrs.RANGE in request.headers:
                    return self.original(target, probed.kind, vary=negotiated)
                return await self.small_original(
                    request, rel, target, st, probed.kind, vary=negotiated
                )
        info = probed.info
        if info is None:
            return self.placeholder(params)  # over the pixel limit: never decoded
        fmt = fmt or negotiate(accept, info.kind.name, info.has_alpha, self.avif)
        if fmt == "avif" and not self.avif:
            fmt = "webp"
        variant = plan_variant(params, info.width, info.height, fmt)
        etag = f"{source_stamp(st)}-{variant.key}"
        headers = self._cache_headers()
        headers["ETag"] = f'"{etag}"'
        headers["Last-Modified"] = _http_date(st.st_mtime)
        if params.fmt is None:
            headers["Vary"] = "Accept"
        if _not_modified(request, etag, st.st_mtime):
            return web.Response(status=304, headers=headers)
        try:
            data = await self.reader.variant(rel, target, st, variant)
        except (Undecodable, TooManyPixels, OSError):
            return self.placeholder(params)
        headers["Content-Type"] = OUTPUT_MIME[fmt]
        return web.Response(body=data, headers=headers)

    async def upload(self, request: web.Request) -> web.StreamResponse:
        tmp: Path | None = None
        try:
            raw_path = request.match_info.get("path", "")
            if not raw_path.strip("/"):
                raise Failure(400, "please assign a path first")  # as the original answers
            try:
                directory = clean_relpath(raw_path, allow_empty=True)
            except UnsafePath:
                raise Failure(400, "invalid path") from None
            limit = self.settings.max_upload
            if request.content_length is not None and request.content_length > limit + (
                MULTIPART_SLACK
            ):
                raise Failure(413, f"file too large (limit {limit} bytes)")
            part = await self._file_part(request)
            try:
                filename = clean_filename(part.filename)
                rel = clean_relpath(f"{directory}/{filename}" if directory else filename)
            except UnsafePath:
                raise Failure(400, "invalid file name") from None
            try:
                tmp, kind, size = await self._receive(part)
            except OSError as exc:
                if disk_full(exc):
                    raise Failure(507, "disk full: no space left to store the upload") from None
                raise Failure(500, f"cannot store the upload: {reason(exc)}") from None
            reply = await self._command(
                STORE_SUBJECT,
                {
                    "path": rel,
                    "tmp_name": tmp.name,
                    "type": kind.mime,
                    "size": size,
                    "by": asked_by(request, self.clients),  # recorded in the event
                },
            )
            stored = reply
            body = {
                "success": True,
                "filename": filename,
                "type": stored["type"],
                "size": stored["size"],
                "src": READ_PREFIX + quote(stored["path"], safe="/"),
            }
            return web.json_response(body, status=201)
        except Failure as exc:
            return _fail(request, "upload", exc.status, exc.message)
        finally:
            if tmp is not None:
                _unlink_quietly(tmp)

    async def _file_part(self, request: web.Request) -> BodyPartReader:
        try:
            reader = await request.multipart()
        except (ValueError, AssertionError, KeyError):
            raise Failure(
                400, 'expected multipart/form-data with a file field "filepath"'
            ) from None
        while True:
            try:
                part = await reader.next()
            except (ValueError, HttpProcessingError):
                raise Failure(400, "malformed multipart body") from None
            if part is None:
                raise Failure(400, 'missing file field "filepath"')
            if not isinstance(part, BodyPartReader):
                raise Failure(400, "nested multipart is not supported")
            if part.name == "filepath":
                if part.filename is None:
                    raise Failure(400, 'field "filepath" must be a file')
                return part
            # other fields are read past, never kept, and not read forever
            skipped = 0
            while chunk := await part.read_chunk(UPLOAD_CHUNK):
                skipped += len(chunk)
                if skipped > OTHER_FIELD_LIMIT:
                    raise Failure(400, "form field too large")

    async def _receive(self, part: BodyPartReader) -> tuple[Path, Kind, int]:
        """Stream the file to a temp file beside the store; refuse it as soon as its first
        bytes show it is not an image or PDF, or it grows past the cap."""
        limit = self.settings.max_upload
        fd, name = tempfile.mkstemp(dir=self.layout.tmp, prefix="up-")
        tmp = Path(name)
        size = 0
        head = b""
        kind: Kind | None = None
        try:
            with os.fdopen(fd, "wb") as fh:
                while chunk := await part.read_chunk(UPLOAD_CHUNK):
                    size += len(chunk)
                    if size > limit:
                        raise Failure(413, f"file too large (limit {limit} bytes)")
                    if kind is None and len(head) < SNIFF_BYTES:
                        head += chunk[: SNIFF_BYTES - len(head)]
                        if len(head) >= SNIFF_BYTES:
                            kind = _sniff_or_fail(head)
                    await asyncio.to_thread(fh.write, chunk)
                if size == 0:
                    raise Failure(400, "empty file")
                if kind is None:
                    kind = _sniff_or_fail(head)
                await asyncio.to_thread(_flush_and_sync, fh)
            if kind.raster:
                await asyncio.to_thread(self._check_raster, tmp)
            return tmp, kind, size
        except BaseException:
            _unlink_quietly(tmp)  # a cancelled upload leaves nothing behind
            raise

    def _check_raster(self, tmp: Path) -> None:
        try:
            probe(tmp, self.settings.max_pixels)
        except TooManyPixels:
            raise Failure(
                413, f"image too large (limit {self.settings.max_pixels} pixels)"
            ) from None
        except Undecodable:
            raise Failure(415, "unsupported file type") from None

    async def _command(self, subject: str, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            reply = await command(
                self.runtime.gateway_nc, subject, payload, timeout=self.settings.timeout
            )
        except (CommandTimeout, NoResponders):
            raise Failure(503, "image store unavailable") from None
        except CommandFailed as exc:
            raise Failure(exc.status, exc.message) from None
        if not isinstance(reply, dict):
            raise Failure(500, "malformed reply from the image store")
        return reply

    async def delete(self, request: web.Request) -> web.StreamResponse:
        try:
            try:
                rel = clean_relpath(request.match_info["path"])
            except UnsafePath:
                raise Failure(400, "invalid path") from None
            await self._command(
                DELETE_SUBJECT, {"path": rel, "by": asked_by(request, self.clients)}
            )
            return web.json_response({"success": True, "message": f"{rel} deleted"})
        except Failure as exc:
            return _fail(request, "delete", exc.status, exc.message)

    async def listing(self, request: web.Request) -> web.StreamResponse:
        """``GET /ls/<folder>``: the folder's entries as JSON (``GET /ls``: the store's top)."""
        raw = request.match_info.get("path", "")
        try:
            found = await asyncio.to_thread(list_folder, self.store_root, raw)
        except UnsafePath:
            return web.Response(status=400, text="invalid path")
        except NotAFolder as exc:
            return web.Response(status=409, text=f"{exc} is a file, not a folder")
        except FileNotFoundError:
            return web.Response(status=404, text=f"folder {raw.strip('/')} not found")
        except OSError as exc:
            return web.Response(status=500, text=f"cannot list the folder: {reason(exc)}")
        return web.json_response(found.to_json())

    async def state(self, _: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    async def on_event(self, _: int, msg: Msg) -> None:
        """Purge what this host cached for a path the store changed (stored or deleted)."""
        try:
            payload = json.loads(msg.data)
            path = payload["data"]["path"]
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring a malformed image event on %s", msg.subject)
            return
        if isinstance(path, str):
            await asyncio.to_thread(self.reader.purge, path)


IMAGES = web.AppKey("images", ImageService)


def _sniff_or_fail(head: bytes) -> Kind:
    kind = sniff(head)
    if kind is None:
        raise Failure(415, "unsupported file type")
    return kind


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _flush_and_sync(fh: Any) -> None:
    fh.flush()
    os.fsync(fh.fileno())


def _http_date(timestamp: float) -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(timestamp))


def _not_modified(request: web.Request, etag: str, mtime: float) -> bool:
    inm = request.if_none_match
    if inm is not None:
        return any(tag.value in (etag, ETAG_ANY) for tag in inm)
    ims = request.if_modified_since
    return ims is not None and int(mtime) <= ims.timestamp()


def _clear_stale_tmp(tmp_dir: Path) -> None:
    """Temp files of uploads cut short by a crash; recent ones may belong to a live upload
    on another host sharing the store."""
    cutoff = time.time() - STALE_TMP_SECONDS
    for entry in tmp_dir.iterdir():
        with contextlib.suppress(OSError):
            if entry.is_file() and entry.stat().st_mtime < cutoff:
                entry.unlink()


async def build(runtime: Runtime) -> web.Application:
    require_allow_ips_or_tokens(
        "the image service (IMAGES_HOST)",
        runtime.listen.get("images", ("127.0.0.1", 0))[0],
        runtime.env,
        "whoever reaches it uploads and deletes files",
        runtime.data_dir / FILE_NAME,
    )
    settings = ImageSettings.from_env(runtime.env)
    layout = StoreLayout.create(runtime.data_dir)
    await asyncio.to_thread(_clear_stale_tmp, layout.tmp)
    pool = RenderPool(settings.workers)
    reader = ImageReader(
        layout,
        pool,
        max_pixels=settings.max_pixels,
        hot=HotCache(settings.hot_cache, HOT_ITEM_MAX),
        disk_bytes=settings.disk_cache,
    )
    clients = ClientFilter.from_env(runtime.env)
    service = ImageService(runtime, settings, layout, reader, clients)
    leased = None
    if runtime.cluster is not None:
        leased = leased_store(runtime.nc, runtime.actors, layout, runtime.cluster)
        await leased.start()
    else:
        stop_store = await serve_store(runtime.nc, runtime.actors, layout)
    # From JetStream: a purge published while this host was cut off from NATS still arrives.
    purges = await Follower(
        runtime.gateway_nc, EVENTS_SUBJECT, service.on_event, signer=runtime.signer
    ).start()

    app = web.Application(middlewares=[not_found])
    app[IMAGES] = service
    app.router.add_get(READ_PREFIX + REST, service.timed(service.read))
    # ALLOW_IPS, as on the VM service: whatever stores or deletes.
    allowed = clients.gate
    app.router.add_post("/upload/" + REST, allowed(service.timed(service.upload)))
    app.router.add_post("/upload", allowed(service.timed(service.upload)))  # no path: the same 400
    app.router.add_delete("/del/" + REST, allowed(service.timed(service.delete)))
    app.router.add_get("/check/state", service.state)
    app.router.add_get("/ls", service.timed(service.listing))
    app.router.add_get("/ls/{path:.*}", service.timed(service.listing))
    add_health(
        app,
        "images",
        runtime,
        warnings=quarantined(runtime, "images"),
        details=lambda: {"lease": leased.facts()} if leased is not None else {},
    )
    add_openapi(app, "images", runtime.env)

    async def cleanup(_: web.Application) -> None:
        with contextlib.suppress(Exception):
            await purges.stop()
        if leased is not None:
            await leased.stop()
        else:
            await stop_store()
        pool.shutdown()

    app.on_cleanup.append(cleanup)
    return app


SERVICE = ServiceDef(
    name="images",
    port_env="IMAGES_PORT",
    default_port=8300,
    build=build,
    summary="serve, transform, upload and delete images and PDFs",
)
