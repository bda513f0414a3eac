"""Test images made on the spot: real encodings of known content, and hostile files."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image


def encoded(
    fmt: str = "JPEG", size: tuple[int, int] = (640, 480), mode: str = "RGB", **save: object
) -> bytes:
    color: object = (200, 30, 30, 128) if mode == "RGBA" else (200, 30, 30)
    im = Image.new(mode, size, color)  # type: ignore[arg-type]
    # a gradient so resizing and blurring change real content
    for x in range(0, size[0], max(1, size[0] // 16)):
        for y in range(size[1]):
            im.putpixel((x, y), (0, 0, 255, 255) if mode == "RGBA" else (0, 0, 255))
    out = io.BytesIO()
    im.save(out, fmt, **save)
    return out.getvalue()


def with_orientation(data: bytes, orientation: int) -> bytes:
    im = Image.open(io.BytesIO(data))
    exif = im.getexif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    im.save(out, "JPEG", exif=exif)
    return out.getvalue()


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_bomb(width: int = 100_000, height: int = 100_000) -> bytes:
    """A PNG header claiming ``width`` x ``height`` pixels with a tiny body."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 1024)
    return (
        b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")
    )


def decode(data: bytes) -> Image.Image:
    im = Image.open(io.BytesIO(data))
    im.load()
    return im
