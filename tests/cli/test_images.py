"""`cairn images` against a running cairn: upload into a folder, list it, delete; several files
at once with one refused; what the service refuses comes back with its message and exit 1."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from tests.cli.conftest import Cairn
from tests.images.imagedata import encoded


def test_put_ls_and_rm(cairn: Cairn, tmp_path: Path) -> None:
    cat, dog, text = tmp_path / "cat.png", tmp_path / "dog.jpg", tmp_path / "notes.png"
    cat.write_bytes(encoded("PNG", (32, 24)))
    dog.write_bytes(encoded("JPEG", (40, 30)))
    text.write_text("not an image, whatever its name says")

    put = cairn.run("images", "put", "homelab/rack", str(cat), str(text), str(dog))
    assert put.code == 1  # one of the three was refused: the others are stored all the same
    # Full URLs, ready for a browser or curl.
    base = cairn.url("images")
    assert put.out.splitlines() == [
        f"{base}/c/img/homelab/rack/cat.png  (image/png, {cat.stat().st_size} B)",
        f"{base}/c/img/homelab/rack/dog.jpg  (image/jpeg, {dog.stat().st_size} B)",
    ]
    assert put.err == f"cairn: {text}: unsupported file type\n"
    with urllib.request.urlopen(put.out.split()[0] + "?o") as resp:
        assert resp.read() == cat.read_bytes()

    ls = cairn.run("images", "ls", "homelab/rack")
    assert ls.code == 0
    header, *rows = ls.out.splitlines()
    assert header.split() == ["TYPE", "SIZE", "MODIFIED", "NAME"]
    assert [r.split()[0] for r in rows] == ["image/png", "image/jpeg"]
    assert [r.split()[-1] for r in rows] == ["cat.png", "dog.jpg"]
    top = cairn.run("images", "ls", "--json").json()
    assert {"name": "homelab", "is_dir": True}.items() <= top["entries"][0].items()
    assert cairn.run("images", "ls", "homelab").out.splitlines()[1].split()[-1] == "rack/"

    rm = cairn.run("images", "rm", "homelab/rack/cat.png", "homelab/rack/nothing.png", "--json")
    assert rm.code == 1
    doc = rm.json()
    assert doc["ok"] is False
    assert doc["results"][0]["message"] == "homelab/rack/cat.png deleted"
    assert doc["results"][1] == {
        "item": "homelab/rack/nothing.png",
        "error": "file not found",
        "status": 404,
    }
    assert rm.err == "cairn: homelab/rack/nothing.png: file not found\n"
    left = cairn.run("images", "ls", "homelab/rack", "--json").json()
    assert [e["name"] for e in left["entries"]] == ["dog.jpg"]
    as_json = cairn.run("images", "put", "homelab/json", str(cat), "--json").json()
    assert as_json["results"][0]["url"] == f"{base}/c/img/homelab/json/cat.png"
    assert as_json["results"][0]["src"] == "/c/img/homelab/json/cat.png"  # as the service says


def test_refusals_keep_the_services_message(cairn: Cairn, tmp_path: Path) -> None:
    missing = cairn.run("images", "ls", "no/such/folder")
    assert (missing.code, missing.err) == (1, "cairn: folder no/such/folder not found\n")
    climb = cairn.run("images", "ls", "../..")
    assert (climb.code, climb.err) == (1, "cairn: invalid path\n")
    unreadable = cairn.run("images", "put", "x", str(tmp_path / "missing.png"), "--json")
    assert unreadable.code == 2
    assert unreadable.json()["results"][0]["error"].startswith("cannot read it: no such file")
