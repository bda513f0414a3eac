"""Type sniffing from the first bytes of a file; the name a client gave is never trusted."""

from __future__ import annotations

import re

import attrs

SNIFF_BYTES = 1024


@attrs.frozen
class Kind:
    name: str  # short format name: jpg png gif webp avif svg pdf
    mime: str

    @property
    def raster(self) -> bool:
        return self.name not in ("svg", "pdf")


JPEG = Kind("jpg", "image/jpeg")
PNG = Kind("png", "image/png")
GIF = Kind("gif", "image/gif")
WEBP = Kind("webp", "image/webp")
AVIF = Kind("avif", "image/avif")
SVG = Kind("svg", "image/svg+xml")
PDF = Kind("pdf", "application/pdf")
KINDS = {k.name: k for k in (JPEG, PNG, GIF, WEBP, AVIF, SVG, PDF)}

_AVIF_BRANDS = {b"avif", b"avis"}
# XML prolog, comments, processing instructions and a doctype may precede the root element.
_SVG_LEAD = re.compile(
    rb"\A(?:\s+|<\?xml[^>]{0,200}\?>|<!--.{0,4000}?-->|<!DOCTYPE\s+svg[^>]{0,400}>)*<svg[\s>/]",
    re.DOTALL | re.IGNORECASE,
)


def _iso_brands(head: bytes) -> set[bytes]:
    """Major and compatible brands of an ISO-BMFF ``ftyp`` box at the start of the file."""
    if len(head) < 16 or head[4:8] != b"ftyp":
        return set()
    size = int.from_bytes(head[0:4], "big")
    if size < 16 or size > len(head):
        size = min(len(head), 64)
    brands = {head[8:12]}
    brands.update(head[i : i + 4] for i in range(16, size - 3, 4))
    return brands


def sniff(head: bytes) -> Kind | None:
    """The kind of a file from its first :data:`SNIFF_BYTES` bytes, or ``None``."""
    if head.startswith(b"\xff\xd8\xff"):
        return JPEG
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return PNG
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return GIF
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return WEBP
    if _iso_brands(head) & _AVIF_BRANDS:
        return AVIF
    if head.startswith(b"%PDF-"):
        return PDF
    text = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
    if _SVG_LEAD.match(text):
        return SVG
    return None
