"""`GET /ls/<folder>`: what a folder of the store holds, and never anything outside it."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest

from tests.images.conftest import Images, raw_request
from tests.images.imagedata import encoded
from tests.images.test_attacks import SECRET, planted  # noqa: F401 (a fixture)

PNG = encoded("PNG", (4, 4))


async def test_a_folder_lists_subfolders_first_then_files_with_type_size_and_time(
    images: Images,
) -> None:
    images.put("shop/shoes/red.png", PNG)
    images.put("shop/b.jpg", encoded("JPEG", (8, 8)))
    images.put("shop/a.pdf", b"%PDF-1.4\n%\xe2\xe3\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n")
    stray = images.put("shop/notes.txt", b"not an image")
    os.utime(stray, (1_700_000_000, 1_700_000_000))
    async with images.http.get("/ls/shop") as resp:
        assert resp.status == 200
        assert resp.content_type == "application/json"
        body = await resp.json()
    assert body["path"] == "shop" and body["truncated"] is False
    entries = body["entries"]
    assert [e["name"] for e in entries] == ["shoes", "a.pdf", "b.jpg", "notes.txt"]
    assert entries[0] == {**entries[0], "is_dir": True, "type": "directory", "size": 0}
    by_name = {e["name"]: e for e in entries}
    assert by_name["b.jpg"]["type"] == "image/jpeg"
    assert by_name["b.jpg"]["size"] == (images.layout.store / "shop/b.jpg").stat().st_size
    assert by_name["a.pdf"]["type"] == "application/pdf"
    # A file the service would not serve is listed as what it is: no type.
    assert by_name["notes.txt"]["type"] is None
    assert by_name["notes.txt"]["modified"] == "2023-11-14T22:13:20Z"
    assert datetime.fromisoformat(by_name["b.jpg"]["modified"]).tzinfo == UTC


async def test_the_top_of_the_store_and_an_uploaded_file(images: Images) -> None:
    resp = await images.upload("gallery", "cat.png", PNG)
    assert resp.status == 201
    for top in ("/ls", "/ls/", "/ls//"):
        async with images.http.get(top) as r:
            assert r.status == 200
            body = await r.json()
        assert body["path"] == ""
        assert [(e["name"], e["is_dir"]) for e in body["entries"]] == [("gallery", True)]
    async with images.http.get("/ls/gallery/") as r:
        assert [e["name"] for e in (await r.json())["entries"]] == ["cat.png"]


async def test_missing_folder_file_and_unsafe_paths_are_clear_errors(images: Images) -> None:
    images.put("a/b.png", PNG)
    async with images.http.get("/ls/nope") as r:
        assert (r.status, await r.text()) == (404, "folder nope not found")
    async with images.http.get("/ls/a/b.png") as r:
        assert (r.status, await r.text()) == (409, "a/b.png is a file, not a folder")
    status, body = await raw_request(images.base, "GET", "/ls/a/../..")
    assert (status, body) == (400, b"invalid path")


LIST_ATTACKS = [
    "/ls/..",
    "/ls/../",
    "/ls/%2e%2e",
    "/ls/..%2f..",
    "/ls/%252e%252e",
    "/ls/inside/../..",
    "/ls/..%5c",
    "/ls//etc",
    "/ls/%2fetc",
    "/ls/outdir",
    "/ls/outdir/trash/old",
    "/ls/..%2ftrash",
    "/ls/..%2fcache",
    "/ls/..%2ftmp",
    "/ls/inside%00",
    "/ls/.",
]


@pytest.mark.parametrize("target", LIST_ATTACKS)
async def test_listings_never_leave_the_store(planted: Images, target: str) -> None:  # noqa: F811
    status, body = await raw_request(planted.base, "GET", target)
    assert status in (400, 404)
    assert b"secret" not in body and SECRET not in body


async def test_links_out_of_the_store_are_left_out(planted: Images) -> None:  # noqa: F811
    async with planted.http.get("/ls") as r:
        names = [e["name"] for e in (await r.json())["entries"]]
    # `out.jpg` and `outdir` point outside the store: not described at all.
    assert names == ["inside"]


async def test_a_long_folder_is_cut_short_and_says_so(
    images: Images, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("actors.images.listing.MAX_ENTRIES", 3)
    for i in range(5):
        images.put(f"many/{i}.png", PNG)
    async with images.http.get("/ls/many") as r:
        body = await r.json()
    assert body["truncated"] is True and len(body["entries"]) == 3
