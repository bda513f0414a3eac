"""Reads over HTTP: originals, every parameter and alias, negotiation, caching headers."""

from __future__ import annotations

import pytest

from tests.images.conftest import Images
from tests.images.imagedata import decode, encoded

WEBP_AVIF = "image/avif,image/webp,image/apng,*/*;q=0.8"


async def test_check_state(images: Images) -> None:
    async with images.http.get("/check/state") as resp:
        assert resp.status == 200
        assert await resp.text() == "ok"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("GET", "/nope"),
        ("GET", "/c/im/a.jpg"),
        ("POST", "/c/img/a.jpg"),
        ("GET", "/upload/a.jpg"),
        ("PUT", "/upload/a.jpg"),
        ("GET", "/del/a.jpg"),
        ("POST", "/check/state"),
        ("DELETE", "/check/state"),
    ],
)
async def test_unknown_routes_are_not_found(images: Images, method: str, path: str) -> None:
    async with images.http.request(method, path) as resp:
        assert resp.status == 404
        assert await resp.text() == "Not Found"


async def test_original_is_served_unchanged(images: Images) -> None:
    data = encoded("JPEG", (64, 48))
    images.put("photos/cat.jpg", data)
    for query in ("o=1", "origin=true", "o"):
        async with images.http.get(
            f"/c/img/photos/cat.jpg?{query}", headers={"Accept": WEBP_AVIF}
        ) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "image/jpeg"
            assert "Vary" not in resp.headers
            assert resp.headers["ETag"]
            assert resp.headers["Last-Modified"]
            assert "max-age=" in resp.headers["Cache-Control"]
            assert await resp.read() == data


@pytest.mark.parametrize(
    ("accept", "mime", "pil"),
    [
        (WEBP_AVIF, "image/avif", "AVIF"),
        ("image/webp,*/*;q=0.8", "image/webp", "WEBP"),
        ("image/avif;q=0,image/webp", "image/webp", "WEBP"),
    ],
)
async def test_without_parameters_the_format_follows_accept(
    images: Images, accept: str, mime: str, pil: str
) -> None:
    """Without `t` the format follows Accept, a read without parameters too."""
    images.put("photos/cat.jpg", encoded("JPEG", (64, 48)))
    async with images.http.get("/c/img/photos/cat.jpg", headers={"Accept": accept}) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == mime
        assert resp.headers["Vary"] == "Accept"
        etag = resp.headers["ETag"]
        image = decode(await resp.read())
        assert (image.format, image.size) == (pil, (64, 48))  # the full size, converted
    async with images.http.get(
        "/c/img/photos/cat.jpg", headers={"Accept": accept, "If-None-Match": etag}
    ) as resp:
        assert resp.status == 304


@pytest.mark.parametrize("accept", ["", "*/*", "image/jpeg,image/png"])
async def test_without_parameters_a_client_listing_no_modern_format_gets_the_original(
    images: Images, accept: str
) -> None:
    data = encoded("PNG", (32, 32))
    images.put("logo.png", data)
    async with images.http.get("/c/img/logo.png", headers={"Accept": accept}) as resp:
        assert resp.headers["Content-Type"] == "image/png"
        assert resp.headers["Vary"] == "Accept"  # another client may get another format
        assert await resp.read() == data


@pytest.mark.parametrize(("name", "fmt"), [("a.gif", "GIF"), ("a.webp", "WEBP")])
async def test_without_parameters_gif_and_webp_stay_as_uploaded(
    images: Images, name: str, fmt: str
) -> None:
    data = encoded(fmt, (16, 16))
    images.put(name, data)
    async with images.http.get(f"/c/img/{name}", headers={"Accept": WEBP_AVIF}) as resp:
        assert await resp.read() == data  # a GIF may be animated; a variant keeps one frame
        assert "Vary" not in resp.headers


async def test_content_type_comes_from_the_bytes_not_the_name(images: Images) -> None:
    images.put("misnamed.jpg", encoded("PNG", (8, 8)))
    async with images.http.get("/c/img/misnamed.jpg") as resp:
        assert resp.headers["Content-Type"] == "image/png"


async def test_leading_and_trailing_slashes_are_trimmed(images: Images) -> None:
    images.put("a/b.png", encoded("PNG", (8, 8)))
    async with images.http.get("/c/img//a/b.png/") as resp:
        assert resp.status == 200


async def test_original_304_and_range(images: Images) -> None:
    data = encoded("PNG", (64, 64))
    images.put("r.png", data)
    async with images.http.get("/c/img/r.png") as resp:
        etag = resp.headers["ETag"]
        modified = resp.headers["Last-Modified"]
    async with images.http.get("/c/img/r.png", headers={"If-None-Match": etag}) as resp:
        assert resp.status == 304
        assert await resp.read() == b""
    async with images.http.get("/c/img/r.png", headers={"If-Modified-Since": modified}) as resp:
        assert resp.status == 304
    async with images.http.get("/c/img/r.png", headers={"Range": "bytes=0-9"}) as resp:
        assert resp.status == 206
        assert resp.headers["Content-Range"] == f"bytes 0-9/{len(data)}"
        assert await resp.read() == data[:10]
    async with images.http.get("/c/img/r.png", headers={"Range": "bytes=-4"}) as resp:
        assert resp.status == 206
        assert await resp.read() == data[-4:]


async def test_pdf_is_inline(images: Images) -> None:
    pdf = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"
    images.put("docs/a.pdf", pdf)
    async with images.http.get("/c/img/docs/a.pdf?w=100") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "application/pdf"
        assert resp.headers["Content-Disposition"] == "inline"
        assert await resp.read() == pdf


async def test_svg_gets_a_script_blocking_policy(images: Images) -> None:
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
    images.put("x.svg", svg)
    async with images.http.get("/c/img/x.svg") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "image/svg+xml"
        csp = resp.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script" not in csp.replace("default-src", "")
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert await resp.read() == svg


async def test_placeholder_light_and_dark(images: Images) -> None:
    async with images.http.get("/c/img/missing.jpg") as resp:
        assert resp.status == 404
        assert resp.headers["Content-Type"] == "image/svg+xml"
        assert resp.headers["Cache-Control"] == "no-cache"
        light = await resp.read()
    assert light.startswith(b"<svg") and b"#f3f4f6" in light
    for query in ("d", "d=1", "dark=true"):
        async with images.http.get(f"/c/img/missing.jpg?{query}") as resp:
            assert resp.status == 404
            assert resp.headers["Cache-Control"] == "no-cache"
            dark = await resp.read()
        assert b"#1f2937" in dark and b"#f3f4f6" not in dark


async def test_placeholder_takes_the_requested_size(images: Images) -> None:
    async with images.http.get("/c/img/missing.jpg?w=320&h=200") as resp:
        body = await resp.read()
    assert b'width="320"' in body and b'height="200"' in body


async def test_empty_path_and_directory_get_the_placeholder(images: Images) -> None:
    images.put("dir/a.png", encoded("PNG", (4, 4)))
    for path in ("/c/img/", "/c/img/dir", "/c/img/dir/"):
        async with images.http.get(path) as resp:
            assert resp.status == 404
            assert resp.headers["Content-Type"] == "image/svg+xml"


async def test_unknown_file_type_is_never_served(images: Images) -> None:
    images.put("page.png", b"<html><script>alert(1)</script></html>")
    async with images.http.get("/c/img/page.png") as resp:
        assert resp.status == 404
        assert resp.headers["Content-Type"] == "image/svg+xml"


@pytest.mark.parametrize(
    ("query", "size"),
    [
        ("w=200", (200, 150)),
        ("width=200", (200, 150)),
        ("h=60", (80, 60)),
        ("height=60", (80, 60)),
        ("s=100", (100, 75)),
        ("size=100", (100, 75)),
        ("w=200&h=60", (80, 60)),
        ("w=5000", (640, 480)),  # no upscaling
        ("s=9999", (640, 480)),
    ],
)
async def test_resize_parameters(images: Images, query: str, size: tuple[int, int]) -> None:
    images.put("p.jpg", encoded("JPEG", (640, 480)))
    async with images.http.get(f"/c/img/p.jpg?{query}&t=png") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "image/png"
        assert decode(await resp.read()).size == size


@pytest.mark.parametrize(
    ("query", "mime", "pil"),
    [
        ("t=webp", "image/webp", "WEBP"),
        ("type=webp", "image/webp", "WEBP"),
        ("t=avif", "image/avif", "AVIF"),
        ("t=jpg", "image/jpeg", "JPEG"),
        ("t=jpeg", "image/jpeg", "JPEG"),
        ("t=png", "image/png", "PNG"),
    ],
)
async def test_explicit_type_ignores_accept(
    images: Images, query: str, mime: str, pil: str
) -> None:
    images.put("p.png", encoded("PNG", (40, 30)))
    async with images.http.get(f"/c/img/p.png?{query}", headers={"Accept": WEBP_AVIF}) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == mime
        assert "Vary" not in resp.headers
        assert decode(await resp.read()).format == pil


@pytest.mark.parametrize(
    ("accept", "mime"),
    [
        (WEBP_AVIF, "image/avif"),
        ("image/webp,*/*", "image/webp"),
        ("image/avif;q=0,image/webp", "image/webp"),
        ("*/*", "image/jpeg"),
        ("", "image/jpeg"),
    ],
)
async def test_format_follows_accept(images: Images, accept: str, mime: str) -> None:
    images.put("p.jpg", encoded("JPEG", (40, 30)))
    async with images.http.get("/c/img/p.jpg?w=20", headers={"Accept": accept}) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == mime
        assert resp.headers["Vary"] == "Accept"
        assert decode(await resp.read()).size == (20, 15)


async def test_png_source_without_webp_support_stays_png(images: Images) -> None:
    images.put("t.png", encoded("PNG", (40, 30), "RGBA"))
    async with images.http.get("/c/img/t.png?w=20", headers={"Accept": "*/*"}) as resp:
        assert resp.headers["Content-Type"] == "image/png"
        assert decode(await resp.read()).mode == "RGBA"


async def test_quality_changes_the_bytes(images: Images) -> None:
    images.put("p.jpg", encoded("JPEG", (256, 256)))
    sizes = []
    for query in ("q=10", "quality=95"):
        async with images.http.get(f"/c/img/p.jpg?t=jpg&{query}") as resp:
            assert resp.status == 200
            sizes.append(len(await resp.read()))
    assert sizes[0] < sizes[1]


@pytest.mark.parametrize("query", ["b=3", "blur=3", "B=-50", "bright=-50"])
async def test_blur_and_brightness(images: Images, query: str) -> None:
    images.put("g.png", encoded("PNG", (64, 64)))
    async with images.http.get("/c/img/g.png?t=png") as resp:
        plain = decode(await resp.read()).convert("RGB")
    async with images.http.get(f"/c/img/g.png?t=png&{query}") as resp:
        assert resp.status == 200
        changed = decode(await resp.read()).convert("RGB")
    assert changed.getpixel((1, 5)) != plain.getpixel((1, 5))


async def test_origin_overrides_transforms(images: Images) -> None:
    data = encoded("JPEG", (64, 48))
    images.put("o.jpg", data)
    for query in ("o&w=10", "origin=1&t=png"):
        async with images.http.get(f"/c/img/o.jpg?{query}") as resp:
            assert resp.headers["Content-Type"] == "image/jpeg"
            assert await resp.read() == data


async def test_variant_304_and_cache_entry(images: Images) -> None:
    images.put("v.jpg", encoded("JPEG", (64, 48)))
    url = "/c/img/v.jpg?w=32&t=webp"
    async with images.http.get(url) as resp:
        first = await resp.read()
        etag = resp.headers["ETag"]
        assert resp.headers["Last-Modified"]
    async with images.http.get(url, headers={"If-None-Match": etag}) as resp:
        assert resp.status == 304
    # equivalent spellings share one cached variant (and one ETag)
    async with images.http.get("/c/img/v.jpg?width=32.2&type=WEBP&junk=1&w=32") as resp:
        assert resp.headers["ETag"] == etag
        assert await resp.read() == first
    entries = [p for p in images.layout.cache.rglob("*") if p.is_file()]
    assert len(entries) == 1 and entries[0].name.endswith("32x24-q80-b0-B0.webp")


async def test_replaced_source_is_never_answered_from_a_stale_variant(images: Images) -> None:
    path = images.put("c.png", encoded("PNG", (40, 40)))
    async with images.http.get("/c/img/c.png?w=10&t=png") as resp:
        assert decode(await resp.read()).size == (10, 10)
    path.write_bytes(encoded("PNG", (80, 40)))
    async with images.http.get("/c/img/c.png?w=10&t=png") as resp:
        assert decode(await resp.read()).size == (10, 5)


async def test_large_original_is_sent_whole_and_by_range(images: Images) -> None:
    import io
    import os

    from PIL import Image

    out = io.BytesIO()
    Image.frombytes("RGB", (700, 700), os.urandom(700 * 700 * 3)).save(out, "PNG")
    data = out.getvalue()
    assert len(data) > 1024 * 1024  # above the in-memory limit: served with sendfile
    images.put("big.png", data)
    async with images.http.get("/c/img/big.png") as resp:
        assert resp.status == 200
        etag = resp.headers["ETag"]
        assert await resp.read() == data
    async with images.http.get("/c/img/big.png", headers={"If-None-Match": etag}) as resp:
        assert resp.status == 304
    async with images.http.get("/c/img/big.png", headers={"Range": "bytes=100-199"}) as resp:
        assert resp.status == 206
        assert await resp.read() == data[100:200]


async def test_small_original_etag_is_the_same_on_both_paths(images: Images) -> None:
    images.put("s.png", encoded("PNG", (8, 8)))
    async with images.http.get("/c/img/s.png") as resp:
        from_memory = resp.headers["ETag"]
        assert resp.headers["Accept-Ranges"] == "bytes"
    async with images.http.get("/c/img/s.png", headers={"Range": "bytes=0-0"}) as resp:
        assert resp.status == 206
        assert resp.headers["ETag"] == from_memory
