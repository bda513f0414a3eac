"""The Pillow pipeline: probe a source, render one variant. Blocking code, run in the pool.

Only the decoders of the formats we sniff are ever handed a file (``Image.open(formats=...)``),
so a file that Pillow could otherwise route to a risky plugin (EPS through Ghostscript, say) is
never parsed. The pixel count is checked from the header before anything is decoded.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import attrs
from PIL import Image, ImageEnhance, ImageFilter, ImageOps, features

from actors.images.params import Variant
from actors.images.sniff import SNIFF_BYTES, Kind, sniff

PIL_FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "AVIF")
_EXIF_ORIENTATION = 0x0112
_SWAPS_AXES = {5, 6, 7, 8}
# thumbnail()'s trick: a JPEG is decoded at the smallest DCT scale that still leaves twice the
# target size, then LANCZOS finishes the job; quality is indistinguishable, decoding is 3-4x faster.
REDUCING_GAP = 2.0
AVIF_SPEED = 8  # libavif's 0-10 scale; the default 6 is ~3x slower for a barely smaller file


def avif_supported() -> bool:
    return bool(features.check("avif"))


class Undecodable(Exception):
    """The file is not an image we can decode (unknown type, truncated, corrupt)."""


class TooManyPixels(Exception):
    """The header declares more pixels than the configured limit (decompression bomb)."""


class Cancelled(Exception):
    """The request that wanted this variant went away (time-out or disconnect)."""


@attrs.frozen
class SourceInfo:
    kind: Kind
    width: int = 0  # as displayed, i.e. after the EXIF orientation is applied
    height: int = 0
    has_alpha: bool = False


def _has_alpha(im: Image.Image) -> bool:
    return im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info


def _orientation(im: Image.Image) -> int:
    try:
        value = im.getexif().get(_EXIF_ORIENTATION, 1)
    except Exception:  # a broken EXIF block must not make the image unreadable
        return 1
    return value if isinstance(value, int) else 1


def _open_checked(path: Path, max_pixels: int) -> Image.Image:
    try:
        im = Image.open(path, formats=PIL_FORMATS)
    except Image.DecompressionBombError as exc:
        raise TooManyPixels(str(exc)) from exc
    except (OSError, ValueError, SyntaxError) as exc:
        raise Undecodable(str(exc)) from exc
    width, height = im.size
    if width <= 0 or height <= 0:
        im.close()
        raise Undecodable("empty image")
    if width * height > max_pixels:
        im.close()
        raise TooManyPixels(f"{width}x{height} exceeds {max_pixels} pixels")
    return im


def sniff_file(path: Path) -> Kind:
    with open(path, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
    kind = sniff(head)
    if kind is None:
        raise Undecodable("unknown file type")
    return kind


def probe(path: Path, max_pixels: int, kind: Kind | None = None) -> SourceInfo:
    """Kind (from the bytes) and, for raster images, displayed size and transparency."""
    if kind is None:
        kind = sniff_file(path)
    if not kind.raster:
        return SourceInfo(kind)
    with _open_checked(path, max_pixels) as im:
        width, height = im.size
        if _orientation(im) in _SWAPS_AXES:
            width, height = height, width
        return SourceInfo(kind, width, height, _has_alpha(im))


def _flatten(im: Image.Image, alpha_ok: bool) -> Image.Image:
    if _has_alpha(im):
        rgba = im.convert("RGBA")
        if alpha_ok:
            return rgba
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return im if im.mode == "RGB" else im.convert("RGB")


def _brighten(im: Image.Image, percent: int) -> Image.Image:
    factor = 1.0 + percent / 100.0
    if im.mode == "RGBA":
        rgb = ImageEnhance.Brightness(im.convert("RGB")).enhance(factor)
        rgb.putalpha(im.getchannel("A"))
        return rgb
    return ImageEnhance.Brightness(im).enhance(factor)


def encode(im: Image.Image, fmt: str, quality: int | None) -> bytes:
    out = io.BytesIO()
    if fmt == "jpg":
        im.save(out, "JPEG", quality=quality)
    elif fmt == "webp":
        im.save(out, "WEBP", quality=quality)
    elif fmt == "avif":
        im.save(out, "AVIF", quality=quality, speed=AVIF_SPEED)
    elif fmt == "png":
        im.save(out, "PNG")
    else:  # pragma: no cover - plan_variant only yields the four names
        raise ValueError(f"unknown output format {fmt!r}")
    return out.getvalue()


def render(
    path: Path,
    variant: Variant,
    max_pixels: int,
    cancelled: Callable[[], bool] = lambda: False,
) -> bytes:
    """Decode, orient, resize, filter and encode one variant; checks ``cancelled`` between
    stages so a timed-out request stops costing CPU at the next stage boundary."""

    def checkpoint() -> None:
        if cancelled():
            raise Cancelled()

    checkpoint()
    with _open_checked(path, max_pixels) as src:
        orientation = _orientation(src)
        want = (variant.width, variant.height)
        if orientation in _SWAPS_AXES:
            want = (variant.height, variant.width)
        if src.format == "JPEG" and want != src.size:
            src.draft(src.mode, (int(want[0] * REDUCING_GAP), int(want[1] * REDUCING_GAP)))
        try:
            src.load()
        except (OSError, ValueError, SyntaxError, EOFError) as exc:
            raise Undecodable(str(exc)) from exc
        checkpoint()
        im: Image.Image = src
        if orientation != 1:
            im = ImageOps.exif_transpose(im)
        im = _flatten(im, alpha_ok=variant.fmt != "jpg")
        if im.size != (variant.width, variant.height):
            im = im.resize(
                (variant.width, variant.height), Image.Resampling.LANCZOS, reducing_gap=REDUCING_GAP
            )
        checkpoint()
        if variant.blur > 0:
            im = im.filter(ImageFilter.GaussianBlur(variant.blur))
        if variant.bright != 0:
            im = _brighten(im, variant.bright)
        checkpoint()
        return encode(im, variant.fmt, variant.quality)
