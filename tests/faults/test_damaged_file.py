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

from tests.conftest import wait_for
from tests.faults.conftest import Cairn, StartCairn
from tests.images.imagedata import encoded
from tests.processes import cairn_run

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
    # The VM service's own port says so too, to any request (plain text, as its errors are).
    status, text = await again.request("GET", again.api + "/vm/list")
    assert status == 503 and text.startswith("vm is unavailable: it cannot read its stored")
    status, text = await again.request("GET", again.url("vm") + "/health")
    assert status == 503 and json.loads(text)["problems"] == vm["problems"], text
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


def zero_page_of(db: Path, table: str) -> int:
    """Overwrite the page holding ``table`` with zeros (a page a failing disk gave back
    blank); returns its number."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        (page,) = conn.execute("SELECT pageno FROM dbstat WHERE name = ?", (table,)).fetchone()
    with db.open("r+b") as fh:
        fh.seek((int(page) - 1) * page_size)
        fh.write(bytes(page_size))
    return int(page)


async def test_a_damaged_page_of_the_stores_own_records_refuses_the_start_in_one_line(
    start_cairn: StartCairn, sim: SimCluster, tmp_path: Path
) -> None:
    # Where the relay stands is read before any service starts and needed by every one of
    # them: with its page blank, cairn says so in one line and does not start (no traceback).
    first = await start_cairn("up")
    assert (await first.upload_image("t/a.png", PNG))[0] == 201
    assert await first.stop() == 0
    store = tmp_path / "data" / "events.sqlite3"
    zero_page_of(store, "cursors")

    status, out, err = await cairn_run("up", env=first.env, cwd=tmp_path, timeout=120)
    said = out + err
    assert status == 1, said
    assert "Traceback" not in said and "sqlalchemy" not in said, said
    assert "cairn: ready" not in said, said
    refusal = [line for line in said.splitlines() if line.startswith("cairn: cannot start")]
    assert len(refusal) == 1, said
    line = refusal[0]
    assert line.startswith(
        "cairn: cannot start: the event store's own records (its format, where its relay "
        "stands) are in the damaged pages (database disk image is malformed), so no service "
        f"could record anything: the SQLite file {store} is damaged (PRAGMA quick_check"
    ), line
    for way_out in ("cairn store backup", ".dump", "cairn store check"):
        assert way_out in line, line


async def store_check(env: dict[str, str], cwd: Path) -> tuple[int, dict[str, object]]:
    status, out, _ = await cairn_run("store", "check", "--json", env=env, cwd=cwd, timeout=120)
    return status, json.loads(out)


def hits(answer: tuple[int, str]) -> list[str]:
    status, text = answer
    assert status == 200, text
    return sorted(group["source"] for group in json.loads(text)["keyword"])


async def keyword(cairn: Cairn, db: str) -> tuple[int, str]:
    return await cairn.request(
        "GET", cairn.url("search") + f"/api/keyword?db={db}&q=basalt&limit=100"
    )


async def test_a_damaged_search_index_stops_that_database_only(
    start_cairn: StartCairn, sim: SimCluster, tmp_path: Path
) -> None:
    first = await start_cairn("up")
    for db in ("notes", "rocks"):
        assert (await cairn_run("search", "add", db, env=first.env, cwd=tmp_path))[0] == 0
        inbox = tmp_path / "inbox" / db
        inbox.mkdir(parents=True, exist_ok=True)
        for n in range(40):  # enough pages for a middle to overwrite; five about basalt
            rock = "basalt" if n < 5 else "granite"
            (inbox / f"{n}.txt").write_text(f"{rock} {n} is a rock. " * 400)

    basalt = [f"{n}.txt" for n in range(5)]

    async def indexed() -> bool:
        found = [await keyword(first, db) for db in ("notes", "rocks")]
        return all(code == 200 and hits((code, text)) == basalt for code, text in found)

    await wait_for(indexed, timeout=120, what="both databases to be indexed")
    assert await first.stop() == 0
    index = tmp_path / "data" / "search" / "databases" / "notes" / "index.sqlite"
    with sqlite3.connect(index) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    assert pages > 8, pages
    with index.open("r+b") as fh:
        fh.seek(pages // 2 * 4096)
        fh.write(os.urandom(3 * 4096))

    # The query cache too (its header: "file is not a database"): a cache is started afresh.
    cache = tmp_path / "data" / "search" / "query_cache.sqlite"
    with cache.open("r+b") as fh:
        fh.write(os.urandom(100))

    cairn = await start_cairn("up")
    assert re.search(
        rf"search: the query cache {re.escape(str(cache))} was damaged \(PRAGMA quick_check: "
        r"file is not a database\); moved to \S+query_cache\.sqlite\.damaged",
        cairn.log(),
    ), cairn.log()[-3000:]
    found = re.search(r"search: database notes not loaded: (.*)", cairn.log())
    assert found, cairn.log()[-3000:]
    assert f"the SQLite file {index} is damaged (PRAGMA quick_check" in found.group(1)
    assert f"remove {index.parent} and start cairn" in found.group(1)
    status, text = await keyword(cairn, "notes")
    assert status == 503, text
    assert hits(await keyword(cairn, "rocks")) == basalt
    async with cairn.session.get(cairn.url("search") + "/health") as resp:
        health = await resp.json()
    assert any("database notes: the SQLite file" in w for w in health["warnings"]), health
    assert (await cairn.install(id=154)).records[-1]["status"] == "success"
    assert await cairn.stop() == 0

    # The way out it gives works: the index is rebuilt from the inbox.
    shutil.rmtree(index.parent)
    again = await start_cairn("up")

    async def rebuilt() -> bool:
        answer = await keyword(again, "notes")
        return answer[0] == 200 and hits(answer) == basalt

    await wait_for(rebuilt, timeout=120, what="the notes index to be rebuilt")
    assert await again.stop() == 0
