"""The Pillow pipeline on real encoded files."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from actors.images.params import Variant
from actors.images.transform import (
    Cancelled,
    TooManyPixels,
    Undecodable,
    avif_supported,
    probe,
    render,
)
from tests.images.imagedata import decode, encoded, png_bomb, with_orientation

LIMIT = 64_000_000


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_this_pillow_writes_avif() -> None:
    # Pillow >= 11.3 wheels carry libavif; the service degrades to WebP without it
    assert avif_supported()


def test_probe_reports_kind_size_and_alpha(tmp_path: Path) -> None:
    info = probe(_write(tmp_path, "a.png", encoded("PNG", (30, 20), "RGBA")), LIMIT)
    assert (info.kind.name, info.width, info.height, info.has_alpha) == ("png", 30, 20, True)
    info = probe(_write(tmp_path, "a.jpg", encoded("JPEG", (30, 20))), LIMIT)
    assert (info.kind.name, info.width, info.height, info.has_alpha) == ("jpg", 30, 20, False)


def test_probe_applies_exif_rotation_to_the_size(tmp_path: Path) -> None:
    data = with_orientation(encoded("JPEG", (40, 10)), 6)
    info = probe(_write(tmp_path, "r.jpg", data), LIMIT)
    assert (info.width, info.height) == (10, 40)
    out = decode(render(tmp_path / "r.jpg", Variant(5, 20, "png", None, 0, 0), LIMIT))
    assert out.size == (5, 20)


@pytest.mark.parametrize("fmt", ["webp", "avif", "jpg", "png"])
def test_render_each_format(tmp_path: Path, fmt: str) -> None:
    src = _write(tmp_path, "s.jpg", encoded("JPEG", (640, 480)))
    data = render(src, Variant(320, 240, fmt, None if fmt == "png" else 70, 0, 0), LIMIT)
    im = decode(data)
    assert im.size == (320, 240)
    assert im.format == {"jpg": "JPEG", "png": "PNG", "webp": "WEBP", "avif": "AVIF"}[fmt]


def test_transparency_is_kept_for_png_and_flattened_for_jpeg(tmp_path: Path) -> None:
    src = _write(tmp_path, "t.png", encoded("PNG", (20, 20), "RGBA"))
    assert decode(render(src, Variant(20, 20, "png", None, 0, 0), LIMIT)).mode == "RGBA"
    flat = decode(render(src, Variant(20, 20, "jpg", 90, 0, 0), LIMIT))
    assert flat.mode == "RGB"


def test_blur_and_brightness_change_pixels(tmp_path: Path) -> None:
    src = _write(tmp_path, "g.png", encoded("PNG", (64, 64)))
    plain = decode(render(src, Variant(64, 64, "png", None, 0, 0), LIMIT)).convert("RGB")
    blurred = decode(render(src, Variant(64, 64, "png", None, 4.0, 0), LIMIT)).convert("RGB")
    darker = decode(render(src, Variant(64, 64, "png", None, 0, -50), LIMIT)).convert("RGB")
    assert plain.getpixel((1, 5)) == (200, 30, 30)
    assert blurred.getpixel((1, 5)) != plain.getpixel((1, 5))
    assert darker.getpixel((1, 5)) == (100, 15, 15)


def test_gif_first_frame(tmp_path: Path) -> None:
    src = _write(tmp_path, "a.gif", encoded("GIF", (50, 40)))
    assert decode(render(src, Variant(25, 20, "webp", 80, 0, 0), LIMIT)).size == (25, 20)


def test_decompression_bomb_is_refused_before_decoding(tmp_path: Path) -> None:
    bomb = _write(tmp_path, "bomb.png", png_bomb())
    with pytest.raises(TooManyPixels):
        probe(bomb, LIMIT)
    with pytest.raises(TooManyPixels):
        render(bomb, Variant(10, 10, "png", None, 0, 0), LIMIT)


def test_pixel_limit_is_configurable(tmp_path: Path) -> None:
    src = _write(tmp_path, "s.png", encoded("PNG", (100, 100)))
    with pytest.raises(TooManyPixels):
        probe(src, 9_999)
    assert probe(src, 10_000).width == 100


def test_truncated_image_is_undecodable(tmp_path: Path) -> None:
    data = encoded("JPEG", (640, 480), quality=95)
    src = _write(tmp_path, "cut.jpg", data[: len(data) // 2])
    with pytest.raises(Undecodable):
        render(src, Variant(320, 240, "webp", 80, 0, 0), LIMIT)


@pytest.mark.parametrize(
    "data", [b"", b"#!/bin/sh\necho hi\n", b"\xff\xd8\xff\xe0garbage", b"\x89PNG\r\n\x1a\nxx"]
)
def test_garbage_is_undecodable(tmp_path: Path, data: bytes) -> None:
    src = _write(tmp_path, "x.png", data)
    with pytest.raises(Undecodable):
        probe(src, LIMIT)


def test_other_pillow_formats_are_never_parsed(tmp_path: Path) -> None:
    bmp = tmp_path / "a.bmp"
    Image.new("RGB", (4, 4)).save(bmp, "BMP")
    with pytest.raises(Undecodable):
        probe(bmp, LIMIT)


def test_cancel_stops_before_work(tmp_path: Path) -> None:
    src = _write(tmp_path, "s.jpg", encoded("JPEG", (64, 64)))
    with pytest.raises(Cancelled):
        render(src, Variant(32, 32, "webp", 80, 0, 0), LIMIT, cancelled=lambda: True)
