"""Type sniffing from bytes: real files of each kind, and impostors."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from actors.images.sniff import sniff


def _encode(fmt: str, mode: str = "RGB") -> bytes:
    out = io.BytesIO()
    Image.new(mode, (4, 3), (10, 20, 30)).save(out, fmt)
    return out.getvalue()


@pytest.mark.parametrize(
    ("fmt", "mode", "kind"),
    [
        ("JPEG", "RGB", "jpg"),
        ("PNG", "RGBA", "png"),
        ("GIF", "RGB", "gif"),
        ("WEBP", "RGB", "webp"),
        ("AVIF", "RGB", "avif"),
    ],
)
def test_sniffs_encoded_images(fmt: str, mode: str, kind: str) -> None:
    found = sniff(_encode(fmt, mode)[:1024])
    assert found is not None and found.name == kind


@pytest.mark.parametrize(
    "head",
    [
        b'<svg xmlns="http://www.w3.org/2000/svg"></svg>',
        b'\xef\xbb\xbf<?xml version="1.0"?>\n<!-- made by hand -->\n<svg>',
        b'<?xml version="1.0"?><!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "x"><svg\n>',
        b"  \n<SVG/>",
    ],
)
def test_sniffs_svg(head: bytes) -> None:
    found = sniff(head)
    assert found is not None and found.mime == "image/svg+xml"


def test_sniffs_pdf() -> None:
    found = sniff(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    assert found is not None and found.mime == "application/pdf"


@pytest.mark.parametrize(
    "head",
    [
        b"",
        b"#!/bin/sh\nrm -rf /\n",
        b"<html><script>alert(1)</script></html>",
        b"<?xml version='1.0'?><html/>",
        b"\x7fELF\x02\x01\x01",
        b"PK\x03\x04",
        b"RIFF\x00\x00\x00\x00WAVE",
        b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom",
        b"GIF8",
        b"\x89PNG",
        b" %PDF-1.4",
    ],
)
def test_impostors_are_unknown(head: bytes) -> None:
    assert sniff(head) is None
