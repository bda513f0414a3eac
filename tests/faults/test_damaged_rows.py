"""A damaged store row is isolated, not fatal: three rows of three streams are damaged while
cairn is stopped (a truncated write, an event from a newer cairn, a field gone). `cairn store
check` lists them; cairn starts anyway; the VM, the function registry and the search database
they belong to answer 503 naming the row; everything else works."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from pvesim.cluster import SimCluster

from tests.faults.conftest import Cairn, StartCairn
from tests.images.imagedata import encoded
from tests.processes import cairn_run

PNG = encoded("PNG", (8, 8))


def damage(db: Path) -> dict[str, int]:
    """Damage one row of three streams; returns each stream's damaged position."""
    with sqlite3.connect(db) as conn:

        def row(stream: str, version: int) -> int:
            found = conn.execute(
                "SELECT position FROM events WHERE stream = ? AND version = ?", (stream, version)
            ).fetchone()
            assert found, (stream, version)
            return int(found[0])

        positions = {"vm:151": row("vm:151", 3), "functions:registry": row("functions:registry", 1)}
        positions["search:notes"] = row("search:notes", 1)
        conn.execute(
            "UPDATE events SET data = substr(data, 1, 20) WHERE position = ?",
            (positions["vm:151"],),
        )
        conn.execute(
            "UPDATE events SET data = json_remove(data, '$.sha256') WHERE position = ?",
            (positions["functions:registry"],),
        )
        conn.execute(
            "UPDATE events SET type = 'search.from_a_newer_cairn' WHERE position = ?",
            (positions["search:notes"],),
        )
    return positions


async def store_check(cairn_env: dict[str, str], cwd: Path) -> tuple[int, dict[str, object]]:
    status, out, _ = await cairn_run("store", "check", "--json", env=cairn_env, cwd=cwd)
    return status, json.loads(out)


async def search(cairn: Cairn, db: str) -> tuple[int, str]:
    return await cairn.request("GET", cairn.url("search") + f"/api/keyword?db={db}&q=granite")


async def test_damaged_rows_quarantine_their_streams_and_nothing_else(
    start_cairn: StartCairn, sim: SimCluster, tmp_path: Path
) -> None:
    first = await start_cairn("up")
    assert (await cairn_run("search", "add", "notes", env=first.env, cwd=tmp_path))[0] == 0
    assert await first.stop() == 0
    (tmp_path / "inbox" / "notes" / "a.txt").write_text("granite is a rock\n")
    first = await start_cairn("up")
    assert (await first.install(id=151)).records[-1]["status"] == "success"
    assert (await first.install(id=152)).records[-1]["status"] == "success"
    assert (await first.upload_function("hello", "def main(x):\n    return 1\n"))[0] == 200
    assert (await search(first, "notes"))[0] == 200
    assert await first.stop() == 0

    positions = damage(tmp_path / "data" / "events.sqlite3")
    code, report = await store_check(first.env, tmp_path)
    assert code == 1
    damaged = {row["stream"]: row for row in report["damaged"]}  # type: ignore[attr-defined]
    assert {s: damaged[s]["position"] for s in damaged} == positions
    assert "unknown event type 'search.from_a_newer_cairn'" in damaged["search:notes"]["error"]
    assert "sha256" in damaged["functions:registry"]["error"]

    cairn = await start_cairn("up")  # starts: one bad row no longer stops the platform
    versions = {"vm:151": 3, "functions:registry": 1, "search:notes": 1}
    for stream, position in positions.items():
        line = f"stream {stream} is quarantined: its event {versions[stream]} (position {position}"
        assert line in cairn.log()

    status, text = await cairn.request("GET", cairn.api + "/vm/151/status")
    assert status == 503, text
    assert f"stream vm:151 is quarantined: its event 3 (position {positions['vm:151']}" in text
    assert (await cairn.request("POST", cairn.api + "/vm/151/destroy"))[0] == 503
    assert await cairn.request("GET", cairn.api + "/vm/152/status") == (200, "running")
    assert (await cairn.install(id=153)).records[-1]["status"] == "success"

    status, text = await cairn.upload_function("hello", "def main(x):\n    return 2\n")
    assert status == 503 and "stream functions:registry is quarantined" in text
    status, text = await cairn.run_function("hello")
    assert status == 503 and "stream functions:registry is quarantined" in text

    status, text = await search(cairn, "notes")
    assert status == 503 and "stream search:notes is quarantined" in json.loads(text)["error"]

    assert (await cairn.upload_image("t/still.png", PNG))[0] == 201  # the image store is whole
    async with cairn.session.get(cairn.url("status") + "/status") as resp:
        assert set((await resp.json())["quarantined"]) == set(positions)
    assert await cairn.stop() == 0
