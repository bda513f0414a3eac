"""`cairn search add|remove|list` through the real `cairn` entry point."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.search.registry import INBOX_FILE, bind_inbox


def cairn(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CAIRN_DATA": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "SEARCH_INBOX": str(tmp_path / "inbox"),
    }
    return subprocess.run(
        [sys.executable, "-m", "gateway.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )


def test_add_list_remove(tmp_path: Path) -> None:
    assert cairn(tmp_path, "search", "add", "notes").returncode == 0
    assert (tmp_path / "inbox" / "notes").is_dir()
    listed = json.loads(cairn(tmp_path, "search", "list", "--json").stdout)
    assert [e["db"] for e in listed] == ["notes"]
    again = cairn(tmp_path, "search", "add", "notes")
    assert again.returncode == 1 and "already registered" in again.stderr
    assert cairn(tmp_path, "search", "remove", "notes").returncode == 0
    assert json.loads(cairn(tmp_path, "search", "list", "--json").stdout) == []
    missing = cairn(tmp_path, "search", "remove", "notes")
    assert missing.returncode == 1 and "not registered" in missing.stderr


@pytest.mark.parametrize(
    "name", ["../etc", "a/b", "..", ".hidden", "UPPER", "", "a" * 64, "x y", "-rf", "név"]
)
def test_registry_name_attacks_are_refused(tmp_path: Path, name: str) -> None:
    result = cairn(tmp_path, "search", "add", name)
    assert result.returncode != 0
    assert "invalid database name" in result.stderr or "error" in result.stderr
    assert not (tmp_path / "etc").exists()
    registry = tmp_path / "data" / "search" / "registry.json"
    assert not registry.exists() or json.loads(registry.read_text())["databases"] == []


def test_nul_in_a_name_is_refused_by_the_registry(tmp_path: Path) -> None:
    from actors.search.registry import Registry, RegistryError

    with pytest.raises(RegistryError, match="invalid database name"):
        Registry(tmp_path).add("x\x00y")


def test_list_names_an_index_built_from_another_inbox(tmp_path: Path) -> None:
    assert cairn(tmp_path, "search", "add", "notes").returncode == 0
    [row] = json.loads(cairn(tmp_path, "search", "list", "--json").stdout)
    assert row["inbox"] == str(tmp_path / "inbox" / "notes")  # absolute
    assert (row["indexedFrom"], row["otherInbox"]) == (None, False)  # not started yet
    index = Path(row["index"])
    bind_inbox(index, tmp_path / "elsewhere" / "inbox" / "notes")  # another checkout's service
    [row] = json.loads(cairn(tmp_path, "search", "list", "--json").stdout)
    other = str(tmp_path / "elsewhere" / "inbox" / "notes")
    assert (row["indexedFrom"], row["otherInbox"]) == (other, True)
    shown = cairn(tmp_path, "search", "list").stdout
    assert f"built from {other}: not loaded with this inbox" in shown
    (index / INBOX_FILE).unlink()
    bind_inbox(index, tmp_path / "inbox" / "notes")  # this checkout's
    assert "built from" not in cairn(tmp_path, "search", "list").stdout
