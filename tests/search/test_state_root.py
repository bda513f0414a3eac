"""Search keeps its state under one root (`$CAIRN_DATA/search/` unless `SEARCH_DATA` moves it):
registry, query cache, indexes and model files; only the `endpoint` file is in the user config
directory. An index is tied to the inbox it was built from, so a second checkout (another inbox)
is refused with the way out instead of taking the first one's index over; `rm -rf` of the root
resets. A registry left by an earlier version in the config directory is named, with the move
that keeps it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from actors.search.registry import (
    INBOX_FILE,
    RegistryError,
    bind_inbox,
    config_dir,
    model_cache,
    state_root,
)
from tests.conftest import wait_for
from tests.search.conftest import SearchHarness
from tests.search.test_http import start_with_notes


def test_the_first_inbox_is_recorded_absolute_and_the_same_one_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    index = tmp_path / "databases" / "notes"
    bind_inbox(index, Path("inbox/notes"))  # relative, as `./inbox` is by default
    assert (index / INBOX_FILE).read_text() == f"{tmp_path / 'inbox' / 'notes'}\n"
    bind_inbox(index, tmp_path / "inbox" / "notes")
    # The same folder through a symlink is the same inbox.
    (tmp_path / "inbox" / "notes").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "inbox")
    bind_inbox(index, tmp_path / "link" / "notes")


def test_an_index_from_before_the_record_adopts_its_inbox_and_keeps_its_files(
    tmp_path: Path,
) -> None:
    index = tmp_path / "databases" / "notes"
    index.mkdir(parents=True)
    (index / "index.sqlite").write_bytes(b"an existing index")
    bind_inbox(index, tmp_path / "inbox" / "notes")
    assert (index / "index.sqlite").read_bytes() == b"an existing index"
    assert (index / INBOX_FILE).read_text().strip() == str(tmp_path / "inbox" / "notes")


@pytest.mark.parametrize(
    "other",
    [
        "elsewhere/inbox/notes",  # another checkout
        "inbox/notes/../../elsewhere/inbox/notes",  # the same, spelt with `..`
        "inbox/other",  # the same checkout, another database's folder
    ],
)
def test_another_inbox_is_refused_with_the_way_out(tmp_path: Path, other: str) -> None:
    index = tmp_path / "databases" / "notes"
    bind_inbox(index, tmp_path / "inbox" / "notes")
    with pytest.raises(RegistryError) as caught:
        bind_inbox(index, tmp_path / other)
    message = str(caught.value)
    assert f"built from the inbox {tmp_path / 'inbox' / 'notes'}" in message
    assert f"SEARCH_INBOX={tmp_path / 'inbox'}" in message
    assert f"remove {index}" in message
    assert (index / INBOX_FILE).read_text().strip() == str(tmp_path / "inbox" / "notes")


def test_a_symlink_to_another_inbox_is_refused(tmp_path: Path) -> None:
    index = tmp_path / "databases" / "notes"
    (tmp_path / "inbox" / "notes").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    bind_inbox(index, tmp_path / "inbox" / "notes")
    (tmp_path / "inbox" / "notes").rmdir()
    (tmp_path / "inbox" / "notes").symlink_to(tmp_path / "other")
    with pytest.raises(RegistryError):
        bind_inbox(index, tmp_path / "inbox" / "notes")


async def test_a_second_checkout_does_not_take_over_the_index(
    harness: SearchHarness, tmp_path: Path
) -> None:
    await start_with_notes(harness)
    await harness.stop()
    second = tmp_path / "second" / "inbox"
    (second / "notes").mkdir(parents=True)
    (second / "notes" / "other.txt").write_text("A note of the second checkout.")
    await harness.start(SEARCH_INBOX=str(second))
    status, body = await harness.get("/api/search", db="notes", q="cat")
    assert status == 503
    assert "built from the inbox" in body["error"] and str(second / "notes") in body["error"]
    assert (await harness.get("/api/list"))[1]["loaded"] == []
    _, health = await harness.get("/health")
    assert any(w.startswith("database notes: the index") for w in health["warnings"]), health
    await harness.stop()
    # Back in the first checkout: its index is whole and answers as before.
    await harness.start(SEARCH_INBOX=str(harness.inbox))
    progress = await harness.until_indexed("notes", 3)
    assert progress["chunks"] >= 3
    _, body = await harness.get("/api/search", db="notes", q="invoices", target="keyword")
    assert [g["source"] for g in body["keyword"]] == ["money.txt"]


async def test_removing_the_root_resets_search(harness: SearchHarness) -> None:
    await start_with_notes(harness)
    await harness.stop()
    root = state_root(harness.env)
    assert {p.name for p in root.iterdir()} >= {"registry.json", "databases"}
    shutil.rmtree(root)
    await harness.start()
    assert await harness.get("/api/list") == (200, {"loaded": [], "registered": []})
    # Registered again: indexed afresh from the inbox, which `rm -rf` of the root left alone.
    harness.registry.add("notes")

    async def loaded() -> bool:
        return "notes" in (await harness.get("/api/list"))[1]["loaded"]

    await wait_for(loaded, what="notes loaded again")
    await harness.until_indexed("notes", 3)
    _, body = await harness.get("/api/search", db="notes", q="invoices", target="keyword")
    assert [g["source"] for g in body["keyword"]] == ["money.txt"]


def test_the_root_is_under_the_data_directory_unless_a_setting_moves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # Nothing set: ./data/search, absolute, as CAIRN_DATA's own default.
    assert state_root({}) == tmp_path / "data" / "search"
    assert model_cache({}) == tmp_path / "data" / "search" / "models"
    env = {"CAIRN_DATA": str(tmp_path / "var")}
    assert state_root(env) == tmp_path / "var" / "search"
    assert model_cache(env) == tmp_path / "var" / "search" / "models"
    moved = {**env, "SEARCH_DATA": "elsewhere", "SEARCH_MODEL_CACHE": "models"}
    assert state_root(moved) == tmp_path / "elsewhere"
    assert model_cache(moved) == tmp_path / "models"
    # The endpoint's directory does not follow: the user config directory's.
    assert config_dir({"XDG_CONFIG_HOME": str(tmp_path / "cfg"), **moved}) == (
        tmp_path / "cfg" / "cairn" / "search"
    )


async def test_the_state_is_under_cairn_data_and_only_the_endpoint_is_in_the_config_dir(
    harness: SearchHarness, tmp_path: Path
) -> None:
    await start_with_notes(harness)
    root = Path(harness.env["CAIRN_DATA"]) / "search"
    assert {p.name for p in root.iterdir()} >= {"registry.json", "query_cache.sqlite", "databases"}
    assert (root / "databases" / "notes" / "index.sqlite").is_file()
    assert files_under(Path(harness.env["XDG_CONFIG_HOME"])) == ["cairn/search/endpoint"]


def files_under(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_the_model_files_are_built_under_the_root(tmp_path: Path) -> None:
    """A fresh process (no model loaded yet) builds the local model's runtime file under
    `$CAIRN_DATA/search/models`, and `SEARCH_MODEL_CACHE` moves it."""
    code = (
        "import os; from actors.search.embed.embedding import make_provider;"
        "from actors.search.registry import model_cache;"
        "make_provider(os.environ, model_cache(os.environ))"
    )
    for extra, where in (
        ({}, tmp_path / "data" / "search" / "models"),
        ({"SEARCH_MODEL_CACHE": str(tmp_path / "models")}, tmp_path / "models"),
    ):
        env = {
            **os.environ,
            "CAIRN_DATA": str(tmp_path / "data"),
            "EMBEDDING_RUNTIME": "onnx",
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
            **extra,
        }
        subprocess.run(
            [sys.executable, "-c", code], env=env, check=True, timeout=300, cwd=Path.cwd()
        )
        assert [p.suffix for p in where.iterdir()] == [".onnx"]
    # Nothing of cairn's in the user cache directory (ONNX Runtime itself writes a device id
    # under Microsoft/ there).
    assert not (tmp_path / "cache" / "cairn").exists()


def test_the_state_an_earlier_version_kept_in_the_config_dir_is_moved_once(
    tmp_path: Path,
) -> None:
    old = tmp_path / "config" / "cairn" / "search"
    (old / "databases" / "notes").mkdir(parents=True)
    (old / "databases" / "notes" / "index.sqlite").write_bytes(b"an index")
    (old / "registry.json").write_text(
        '{"databases": [{"db": "notes", "createAt": "2026-11-01T00:00:00Z"}]}'
    )
    (old / "endpoint").write_text("http://127.0.0.1:1\n")
    env = {
        **os.environ,
        "CAIRN_DATA": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }

    def listed() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gateway.main", "search", "list"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )

    first = listed()
    root = tmp_path / "data" / "search"
    assert first.stderr == f"cairn: moved the search registry and indexes of {old} to {root}\n"
    assert f"registry {root / 'registry.json'}" in first.stdout
    assert f"index {root / 'databases' / 'notes'}" in first.stdout
    assert (root / "databases" / "notes" / "index.sqlite").read_bytes() == b"an index"
    assert files_under(old) == ["endpoint"]  # the endpoint stays where clients look for it
    # Once: a registry put back there later (an older cairn run again) is left alone.
    (old / "registry.json").write_text('{"databases": []}')
    again = listed()
    assert again.stderr == "" and "notes" in again.stdout
