"""Read parameters of ``GET /c/img/*path``: parsing, clamping and the normalised variant.

Parsing is forgiving on purpose: a hostile or mistyped value is dropped (or clamped into its
range), never echoed into a file name, so the variant cache can only ever hold keys built from
numbers and a closed set of format names. The final key also depends on the source size (no
upscaling), which bounds the number of distinct variants per image whatever the query says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs

# short name -> long alias: URLs stay short, and the long names read well in a config. The
# short name wins when both are given.
ALIASES: dict[str, str] = {
    "o": "origin",
    "s": "size",
    "w": "width",
    "h": "height",
    "q": "quality",
    "t": "type",
    "b": "blur",
    "B": "bright",
    "d": "dark",
}

MAX_SIDE = 8192
DEFAULT_QUALITY = 80
MAX_BLUR = 50.0
FORMATS = ("webp", "avif", "jpg", "png")
_FORMAT_NAMES = {"webp": "webp", "avif": "avif", "jpg": "jpg", "jpeg": "jpg", "png": "png"}
_TRUE = {"", "1", "true", "yes", "on"}
_MAX_VALUE_LEN = 32  # longer values are junk; refusing to parse them bounds the work per request


@attrs.frozen
class ReadParams:
    """What a query asked for, after parsing; sizes are requests, not yet the output size."""

    origin: bool = False
    size: int | None = None
    width: int | None = None
    height: int | None = None
    quality: int | None = None
    fmt: str | None = None
    blur: float = 0.0
    bright: int = 0
    dark: bool = False

    @property
    def transforms(self) -> bool:
        """True when the bytes served differ from the original (``o`` overrides everything)."""
        if self.origin:
            return False
        return (
            self.size is not None
            or self.width is not None
            or self.height is not None
            or self.quality is not None
            or self.fmt is not None
            or self.blur > 0
            or self.bright != 0
        )


def _pick(query: Mapping[str, str], short: str) -> str | None:
    value = query.get(short)
    if value is None:
        value = query.get(ALIASES[short])
    if value is None or len(value) > _MAX_VALUE_LEN:
        return None
    return value.strip()


def _int(value: str | None, lo: int, hi: int, *, clamp_low: bool = False) -> int | None:
    """A number rounded and capped at ``hi``; below ``lo`` it is dropped (``w=0`` means "no
    width") unless ``clamp_low``. Non-numbers, NaN and infinities are dropped."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    rounded = round(number)
    if rounded < lo:
        return lo if clamp_low else None
    return min(hi, rounded)


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in _TRUE


def parse_params(query: Mapping[str, str]) -> ReadParams:
    """Parse a query mapping (first value of each name) into :class:`ReadParams`."""
    size = _int(_pick(query, "s"), 1, MAX_SIDE)
    width = _int(_pick(query, "w"), 1, MAX_SIDE)
    height = _int(_pick(query, "h"), 1, MAX_SIDE)
    quality = _int(_pick(query, "q"), 1, 100)
    fmt_raw = _pick(query, "t")
    fmt = _FORMAT_NAMES.get(fmt_raw.lower()) if fmt_raw is not None else None
    blur_raw = _pick(query, "b")
    blur = 0.0
    if blur_raw is not None:
        try:
            number = float(blur_raw)
        except ValueError:
            number = 0.0
        if math.isfinite(number) and number > 0:
            blur = round(min(number, MAX_BLUR), 1)
    bright = _int(_pick(query, "B"), -100, 100, clamp_low=True) or 0
    return ReadParams(
        origin=_flag(_pick(query, "o")),
        size=size,
        width=width,
        height=height,
        quality=quality,
        fmt=fmt,
        blur=blur,
        bright=bright,
        dark=_flag(_pick(query, "d")),
    )


def output_size(params: ReadParams, src_w: int, src_h: int) -> tuple[int, int]:
    """Fit the source into the requested box, keeping the aspect ratio and never upscaling.

    ``s`` is a square box; ``w``/``h`` narrow it on their own axis. The result never exceeds the
    source, so ``w=99999`` and ``w=<source width>`` name the same variant.
    """
    box_w = params.width if params.width is not None else params.size
    box_h = params.height if params.height is not None else params.size
    scale = 1.0
    if box_w is not None:
        scale = min(scale, box_w / src_w)
    if box_h is not None:
        scale = min(scale, box_h / src_h)
    if scale >= 1.0:
        return src_w, src_h
    return max(1, round(src_w * scale)), max(1, round(src_h * scale))


def _accepts(accept: str) -> dict[str, float]:
    """Media types of an ``Accept`` header with their q-values (0 means refused)."""
    out: dict[str, float] = {}
    for item in accept.split(",")[:64]:
        parts = item.strip().split(";")
        media = parts[0].strip().lower()
        if not media:
            continue
        q = 1.0
        for param in parts[1:]:
            name, _, val = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(val.strip())
                except ValueError:
                    q = 0.0
                if not math.isfinite(q):
                    q = 0.0
        out.setdefault(media, q)
    return out


def negotiate(accept: str, source_fmt: str, has_alpha: bool, avif_ok: bool = True) -> str:
    """Output format for a request without ``t``: AVIF, then WebP, if the client lists them
    explicitly; otherwise the source's own format when it is JPEG or PNG, else PNG for images
    with transparency and JPEG for the rest (what every browser can show)."""
    accepted = _accepts(accept)
    if avif_ok and accepted.get("image/avif", 0) > 0:
        return "avif"
    if accepted.get("image/webp", 0) > 0:
        return "webp"
    if source_fmt in ("jpg", "png"):
        return source_fmt
    return "png" if has_alpha else "jpg"


@attrs.frozen
class Variant:
    """The normalised description of one output; equal variants share one cache entry."""

    width: int
    height: int
    fmt: str
    quality: int | None
    blur: float
    bright: int

    @property
    def key(self) -> str:
        q = f"q{self.quality}" if self.quality is not None else "q-"
        return f"{self.width}x{self.height}-{q}-b{self.blur:g}-B{self.bright}.{self.fmt}"


def plan_variant(params: ReadParams, src_w: int, src_h: int, fmt: str) -> Variant:
    """Normalise parsed parameters against the source size and the chosen format."""
    width, height = output_size(params, src_w, src_h)
    quality = None if fmt == "png" else (params.quality or DEFAULT_QUALITY)
    return Variant(width, height, fmt, quality, params.blur, params.bright)
