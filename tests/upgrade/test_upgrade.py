"""An upgrade keeps everything: a data directory written by an earlier cairn (each kept
fixture, made by tests/upgrade/make_fixture.py with that release's code) is opened by this
cairn and served over HTTP: its VMs listed and driven, its functions run (every version), its
search database answers from the kept index, its images are served, and nothing in its event
store is unreadable."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from events.store import EventStore, default_store_url
from tests.upgrade.make_fixture import JAVASCRIPT, NOTES, PDF, PYTHON_V1, PYTHON_V2, VMS, png
from tests.upgrade.serving import serving

HERE = Path(__file__).parent
FIXTURES = sorted(HERE.glob("fixture-*"))


def test_there_is_a_fixture_of_a_release() -> None:
    assert FIXTURES, "no tests/upgrade/fixture-* to upgrade from"


@pytest.fixture(params=FIXTURES, ids=[f.name for f in FIXTURES])
def old_data(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A copy of the fixture (the test writes to it, as the upgraded cairn would)."""
    data = tmp_path / "data"
    shutil.copytree(request.param, data, symlinks=True)
    # A search index records the absolute path of the inbox it was built from. The copy moves
    # the data directory, which an upgrade in place does not: the record follows the copy.
    for record in data.glob("config/cairn/search/databases/*/inbox-path"):
        record.write_text(f"{data / 'inbox' / record.parent.name}\n")
    return data


async def _json(served: Any, method: str, url: str, body: Any = None) -> tuple[int, Any]:
    async with served.http.request(method, url, json=body) as resp:
        text = await resp.text()
        return resp.status, json.loads(text) if resp.content_type == "application/json" else text


async def test_an_earlier_data_directory_is_served(old_data: Path, tmp_path: Path) -> None:
    async with serving(old_data, tmp_path / "work") as served:
        vm, fn, img = served.urls["vm"], served.urls["functions"], served.urls["images"]

        # The VMs it installed, listed as cairn's own, with what they were installed with.
        status, listing = await _json(served, "GET", vm + "/api/vm/list")
        assert status == 200
        rows = {row["name"]: row for row in listing["list"]}
        assert set(rows) == {body["name"] for body in VMS}
        assert all(row["created_by_cairn"] and row["running"] for row in rows.values())
        assert rows["web-1"]["cpu"] == 2 and rows["web-1"]["memory"] == 2048
        assert rows["db-1"]["os"] == "rockylinux"
        web = rows["web-1"]["vmid"]
        status, detail = await _json(served, "GET", f"{vm}/api/vm/{web}")
        assert status == 200 and detail["name"] == "web-1"

        # Still driven: a VM it made can be stopped (ownership proven by the old events), and
        # a new install continues the id allocation rather than reusing an id.
        async with served.http.post(f"{vm}/api/vm/{web}/stop") as resp:
            assert resp.status == 200, await resp.text()
        status, text = await _json(served, "GET", f"{vm}/api/vm/{web}/status")
        assert (status, text) == (200, "stopped")
        new_id = await served.install(name="after-upgrade")
        assert new_id not in {row["vmid"] for row in rows.values()}
        # Its API token, made by 0.1.0's bootstrap, lacks VM.Clone: with templates on by
        # default the install imported its image rather than build a template it cannot clone.
        assert served.sim.vm(9000) is None

        # The functions, every version, run.
        status, listed = await _json(served, "GET", fn + "/functions")
        assert status == 200
        entries = {f["path"]: f for f in listed["functions"]}
        assert set(entries) == {"math/add", "text/shout"}
        first, second = entries["math/add"]["versions"]
        add = {"input": json.dumps({"a": 2, "b": 3})}
        assert await _json(served, "POST", fn + "/run/math/add", add) == (
            200,
            {"data": {"sum": 5, "by": "v2"}, "type": "json"},
        )
        assert await _json(served, "POST", f"{fn}/run/math/add?version={first}", add) == (
            200,
            {"data": {"sum": 5}, "type": "json"},
        )
        async with served.http.get(f"{fn}/code/math/add?version={second}") as resp:
            assert await resp.text() == PYTHON_V2
        async with served.http.get(f"{fn}/code/math/add?version={first}") as resp:
            assert await resp.text() == PYTHON_V1
        async with served.http.get(f"{fn}/code/text/shout") as resp:
            assert await resp.text() == JAVASCRIPT
        shout = {"input": json.dumps({"words": ["still", "here"]})}
        assert await _json(served, "POST", fn + "/run/text/shout", shout) == (
            200,
            {"data": "STILL HERE", "type": "string"},
        )

        # The search database, answering from the index it had (nothing indexed again).
        search = served.urls["search"]
        status, listing = await _json(served, "GET", search + "/api/list")
        assert status == 200 and listing["loaded"] == ["notes"]
        assert [entry["db"] for entry in listing["registered"]] == ["notes"]
        status, found = await _json(
            served, "GET", search + "/api/search?db=notes&q=fern%20ravine&target=keyword"
        )
        assert status == 200
        assert [group["source"] for group in found["keyword"]] == ["ferns.md"]
        status, found = await _json(
            served, "GET", search + "/api/search?db=notes&q=granite&target=keyword"
        )
        assert [group["source"] for group in found["keyword"]] == ["granite.txt"]

        # The images, as stored and resized, and the PDF.
        async with served.http.get(img + "/c/img/photos/2026/tile.png?o") as resp:
            assert resp.status == 200 and await resp.read() == png(64, 48)
        async with served.http.get(
            img + "/c/img/photos/2026/tile.png?w=32", headers={"Accept": "image/png"}
        ) as resp:
            assert resp.status == 200
            assert Image.open(io.BytesIO(await resp.read())).size == (32, 24)
        async with served.http.get(img + "/c/img/docs/note.pdf") as resp:
            assert resp.status == 200 and await resp.read() == PDF

    # Every event it had stored still reads back, and search indexed nothing again.
    store = await EventStore.open(default_store_url(old_data))
    try:
        count, damaged = await store.check()
    finally:
        await store.close()
    assert damaged == [] and count > 0
    store = await EventStore.open(default_store_url(old_data))
    try:
        indexed = [
            r
            for r in await store.read_stream("search:notes")
            if r.event.type_name == "search.document_indexed"
        ]
    finally:
        await store.close()
    assert sorted(r.event.source for r in indexed) == sorted(NOTES)  # type: ignore[attr-defined]
