"""`cairn search add|remove|list` through the real `cairn` entry point."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def cairn(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "SEARCH_INBOX": str(tmp_path / "inbox"),
    }
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
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
    registry = tmp_path / "config" / "cairn" / "search" / "registry.json"
    assert not registry.exists() or json.loads(registry.read_text())["databases"] == []


def test_nul_in_a_name_is_refused_by_the_registry(tmp_path: Path) -> None:
    from actors.search.registry import Registry, RegistryError

    with pytest.raises(RegistryError, match="invalid database name"):
        Registry(tmp_path).add("x\x00y")
