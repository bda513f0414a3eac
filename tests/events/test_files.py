"""A file replaced whole or not at all (events/files.py): what a reader, another local user
and the next start see, on success and on failure."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from events.files import PUBLIC, SECRET, write_atomically


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The most permissive umask: a mode that holds here does not come from the umask."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_file_is_replaced_and_nothing_else_is_left(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text("old")
    write_atomically(path, '{"tokens": []}')
    write_atomically(path, b"\x00bytes")
    assert path.read_bytes() == b"\x00bytes"
    assert [p.name for p in tmp_path.iterdir()] == ["tokens.json"]


@pytest.mark.usefixtures("open_umask")
@pytest.mark.parametrize("mode", [SECRET, PUBLIC])
def test_a_secret_is_never_readable_by_others_not_even_before_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int
) -> None:
    seen: list[int] = []
    rename = os.replace

    def replace(src: str, dst: Path) -> None:
        seen.append(mode_of(Path(src)))  # the new file, whole, just before it takes the name
        rename(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    path = tmp_path / "id_ed25519"
    write_atomically(path, "-----BEGIN OPENSSH PRIVATE KEY-----\n", mode=mode)
    assert seen == [mode]
    assert mode_of(path) == mode


def test_a_failed_write_leaves_the_old_file_and_no_partial_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "registry.json"
    path.write_text('{"databases": []}')

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left on device"):
        write_atomically(path, '{"databases": [{"db": "notes"}]}')
    assert path.read_text() == '{"databases": []}'
    assert [p.name for p in tmp_path.iterdir()] == ["registry.json"]


def test_two_writers_never_share_a_half_written_file(tmp_path: Path) -> None:
    # Each write has its own new file: one writer's rename cannot publish another's half.
    path = tmp_path / "endpoint"
    made: list[str] = []
    rename = os.replace

    def replace(src: str, dst: Path) -> None:
        made.append(src)
        rename(src, dst)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "replace", replace)
        write_atomically(path, "http://127.0.0.1:1\n")
        write_atomically(path, "http://127.0.0.1:2\n")
    assert len(set(made)) == 2
    assert all(Path(m).parent == tmp_path and Path(m).name.startswith(".endpoint.") for m in made)
    assert path.read_text() == "http://127.0.0.1:2\n"
