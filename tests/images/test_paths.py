"""Lexical and resolved path safety; every rejection is an attack somebody could send."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from actors.images.paths import (
    UnsafePath,
    clean_filename,
    clean_relpath,
    lookup,
    resolve_under,
    safe_path,
)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("a.jpg", "a.jpg"),
        ("/a/b/c.png/", "a/b/c.png"),
        ("dir/%2e%2e/x", "dir/%2e%2e/x"),  # a literal name after the single decoding
        ("..a/b..", "..a/b.."),
        ("ünï cödé.jpg", "ünï cödé.jpg"),
    ],
)
def test_clean_paths(raw: str, clean: str) -> None:
    assert clean_relpath(raw) == clean


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "/",
        "..",
        "../etc/passwd",
        "a/../../etc/passwd",
        "a/./b",
        "a//b",
        "a\\..\\b",
        "..\\windows",
        "a\x00.jpg",
        "a\n.jpg",
        "a\x7f",
        "x" * 256,
        "/".join(["abc"] * 300),
        "a\udcff",
    ],
)
def test_rejected_paths(raw: str) -> None:
    with pytest.raises(UnsafePath):
        clean_relpath(raw)


def test_absolute_without_trim_is_rejected() -> None:
    with pytest.raises(UnsafePath):
        clean_relpath("/etc/passwd", trim=False)


@pytest.mark.parametrize("raw", [None, "", ".", "..", "a/b", "a\\b", "a\x00"])
def test_rejected_filenames(raw: str | None) -> None:
    with pytest.raises(UnsafePath):
        clean_filename(raw)


def test_symlink_out_of_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (root / "link.jpg").symlink_to(outside)
    (root / "dirlink").symlink_to(tmp_path)
    with pytest.raises(UnsafePath):
        safe_path(root.resolve(), "link.jpg")
    with pytest.raises(UnsafePath):
        safe_path(root.resolve(), "dirlink/secret.txt")


def test_symlink_inside_root_is_followed(tmp_path: Path) -> None:
    root = (tmp_path / "store").resolve()
    root.mkdir()
    (root / "real.jpg").write_bytes(b"x")
    (root / "alias.jpg").symlink_to(root / "real.jpg")
    rel, target = safe_path(root, "alias.jpg")
    assert rel == "alias.jpg"
    assert target == root / "real.jpg"


def test_symlink_loop_is_refused(tmp_path: Path) -> None:
    root = (tmp_path / "store").resolve()
    root.mkdir()
    os.symlink("b", root / "a")
    os.symlink("a", root / "b")
    with pytest.raises(UnsafePath):
        resolve_under(root, "a")


def test_root_itself_is_not_a_file(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    (root / "self").symlink_to(root)
    with pytest.raises(UnsafePath):
        resolve_under(root, "self")


def test_lookup_matches_safe_path(tmp_path: Path) -> None:
    root = (tmp_path / "store").resolve()
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "c.jpg").write_bytes(b"x")
    (root / "via").symlink_to(root / "a")
    (root / "out").symlink_to(tmp_path)
    (tmp_path / "secret.jpg").write_bytes(b"s")
    rel, target, st = lookup(root, "/a/b/c.jpg")
    assert (rel, target, st.st_size) == ("a/b/c.jpg", root / "a/b/c.jpg", 1)
    rel, target, st = lookup(root, "via/b/c.jpg")
    assert (rel, target) == ("via/b/c.jpg", root / "a/b/c.jpg")
    with pytest.raises(UnsafePath):
        lookup(root, "out/secret.jpg")
    # a link out and back in again ends inside the store: allowed
    assert lookup(root, "out/store/a/b/c.jpg")[1] == root / "a/b/c.jpg"
    with pytest.raises(FileNotFoundError):
        lookup(root, "a/missing.jpg")
    with pytest.raises(UnsafePath):
        lookup(root, "a/../../x")
