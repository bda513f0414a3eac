"""Search keeps its state under one root (the user config directory's `cairn/search/`): an
index is tied to the inbox it was built from, so a second checkout (another inbox) is refused
with the way out instead of taking the first one's index over; `rm -rf` of the root resets."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from actors.search.registry import INBOX_FILE, RegistryError, bind_inbox, config_dir
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
    root = config_dir(harness.env)
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
