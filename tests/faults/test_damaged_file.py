"""A damaged SQLite file (pages overwritten in the middle, as a failing disk or a bad copy
leaves it): cairn's start-up check (PRAGMA quick_check, bounded in time) finds it, says in one
line which file, what is damaged and what to run, stops only the services that need that file
and starts the others; /status says which service is down and why."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from pvesim.cluster import SimCluster

from tests.faults.conftest import CAIRN, StartCairn
from tests.images.imagedata import encoded

PNG = encoded("PNG", (8, 8))


def overwrite_middle_pages(db: Path, count: int = 2) -> list[int]:
    """Overwrite ``count`` leaf pages in the middle of the events table (its rows in key
    order: the VM installs' events, made first) with noise; returns their numbers."""
    with sqlite3.connect(db) as conn:
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        leaves = [
            int(row[0])
            for row in conn.execute(
                "SELECT pageno FROM dbstat WHERE name = 'events' AND pagetype = 'leaf' "
                "ORDER BY path"
            )
        ]
    assert len(leaves) > 2 * count + 2, f"{db} has only {len(leaves)} event pages"
    chosen = leaves[len(leaves) // 2 : len(leaves) // 2 + count]
    with db.open("r+b") as fh:
        for page in chosen:
            fh.seek((page - 1) * page_size)
            fh.write(os.urandom(page_size))
    return chosen


async def test_a_damaged_event_store_file_stops_only_what_needs_it(
    start_cairn: StartCairn, sim: SimCluster, tmp_path: Path
) -> None:
    cairn = await start_cairn("up")
    for vmid in range(150, 154):
        assert (await cairn.install(id=vmid)).records[-1]["status"] == "success"
    assert (await cairn.upload_image("t/a.png", PNG))[0] == 201
    assert (await cairn.upload_function("hello", "return 41 + 1"))[0] == 200
    assert await cairn.stop() == 0
    store = tmp_path / "data" / "events.sqlite3"
    pages = overwrite_middle_pages(store)

    again = await start_cairn("up")
    log = again.log()
    # One line names the file, what SQLite found, and what to run.
    found = re.search(r"ERROR actors.platform: (the SQLite file \S+ is damaged .*)", log)
    assert found, log[-3000:]
    line = found.group(1)
    assert str(store) in line and "PRAGMA quick_check" in line, line
    assert f"page {pages[0]}" in line or f"page {pages[1]}" in line or "malformed" in line, line
    for way_out in ("cairn store check", "cairn store backup", ".recover"):
        assert way_out in line, line
    # The VM service reads the damaged pages at its start: it is down, and says why.
    assert re.search(r"cairn: vm is down: it cannot read its stored events", log), log[-3000:]
    status, text = await again.request("GET", again.url("status") + "/status")
    assert status == 503, text
    body = json.loads(text)
    vm = body["services"]["vm"]
    assert vm["status"] == "down", vm
    assert any(str(store) in p and "cairn store check" in p for p in vm["problems"]), vm
    assert body["store"]["damaged"].startswith(f"the SQLite file {store} is damaged"), body
    for name in ("functions", "images", "search"):
        assert body["services"][name]["status"] == "up", (name, body["services"][name])
    # ... and they work: what they stored before is there, and they store more.
    async with again.session.get(again.url("images") + "/c/img/t/a.png") as image:
        assert image.status == 200 and await image.read() == PNG
    assert json.loads((await again.run_function("hello"))[1]) == {"data": 42, "type": "number"}
    assert (await again.upload_image("t/b.png", PNG))[0] == 201
    assert await again.stop() == 0

    # `cairn store check` says the same; the way out it names works.
    code, said = await store_check(again.env, tmp_path)
    assert code == 1 and said["file_damaged"] == body["store"]["damaged"], said
    if shutil.which("sqlite3") is None:
        pytest.skip("no sqlite3 command here to try the salvage with")
    salvage = re.search(r"`(sqlite3 [^`]*\.dump[^`]*)`", str(said["file_damaged"]))
    assert salvage, said
    run = await asyncio.create_subprocess_shell(salvage.group(1), cwd=tmp_path)
    assert await run.wait() == 0
    os.replace(f"{store}.recovered", store)
    for leftover in (Path(f"{store}-wal"), Path(f"{store}-shm")):
        leftover.unlink(missing_ok=True)
    code, said = await store_check(again.env, tmp_path)
    assert "file_damaged" not in said, said
    third = await start_cairn("up")
    status, text = await third.request("GET", third.url("status") + "/status")
    assert json.loads(text)["store"]["damaged"] is None, text
    assert "is down" not in third.log()
    assert await third.stop() == 0


async def store_check(env: dict[str, str], cwd: Path) -> tuple[int, dict[str, object]]:
    proc = await asyncio.create_subprocess_exec(
        CAIRN, "store", "check", "--json",
        env=env, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None, err
    return proc.returncode, json.loads(out)
