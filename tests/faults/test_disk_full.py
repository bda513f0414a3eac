"""Clear errors on a full disk, and healing once space is back: cairn keeps its data and its
search indexes on a small tmpfs of its own (a private mount namespace, so nothing leaks onto
the machine), and the test fills it. Every write path says "disk full" plainly; a document
dropped meanwhile is indexed once space is freed; installs work again without a restart."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
from pathlib import Path

import pytest
from pvesim.cluster import SimCluster

from tests.conftest import wait_for
from tests.faults.conftest import CAIRN, Cairn, StartCairn
from tests.images.imagedata import encoded

PNG = encoded("PNG", (64, 64))
SEARCH = "notes"


def namespace_wrapper(mountpoint: Path, size: str) -> tuple[str, ...]:
    """``unshare`` (a user namespace too when not root) mounting a tmpfs with an ``index``
    folder for the search database, then exec cairn."""
    user = () if os.geteuid() == 0 else ("--map-root-user",)
    script = f'mount -t tmpfs -o size={size} cairn-faults "$0" && mkdir "$0/index" && exec "$@"'
    return ("unshare", *user, "--mount", "--propagation", "private", "sh", "-c", script,
            str(mountpoint))  # fmt: skip


@pytest.fixture
def mountpoint(tmp_path: Path) -> Path:
    point = tmp_path / "small"
    point.mkdir()
    probe = subprocess.run(
        [*namespace_wrapper(point, "1m"), "true"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private tmpfs here: {probe.stderr.strip()}")
    return point


def fill(root: Path) -> Path:
    """Write a ballast file until the file system is full."""
    ballast = root / "ballast"
    with ballast.open("wb", buffering=0) as fh:  # unbuffered: nothing left to flush at close
        for size in (1 << 20, 65536, 4096, 512, 1):  # down to the last crumbs
            while True:
                try:
                    fh.write(b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    return ballast


async def search_hits(cairn: Cairn) -> list[str]:
    status, text = await cairn.request(
        "GET", cairn.url("search") + f"/api/keyword?db={SEARCH}&q=basalt"
    )
    assert status == 200, text
    return [group["source"] for group in json.loads(text)["keyword"]]


async def test_a_full_disk_gives_clear_errors_and_everything_heals_when_space_is_back(
    start_cairn: StartCairn, sim: SimCluster, tmp_path: Path, mountpoint: Path
) -> None:
    # Search's registry stays on the test's disk; the database's index lives on the tmpfs.
    search_root = tmp_path / "search"
    env = {
        "CAIRN_DATA": str(mountpoint / "data"),
        "CAIRN_STORE_RETRY": "2",
        "SEARCH_DATA": str(search_root),
    }
    add = await asyncio.create_subprocess_exec(
        CAIRN,
        "search",
        "add",
        SEARCH,
        env={
            **os.environ,
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "SEARCH_DATA": str(search_root),
        },
        cwd=tmp_path,
        stdout=asyncio.subprocess.DEVNULL,
    )
    assert await add.wait() == 0
    index = search_root / "databases" / SEARCH
    index.rmdir()
    index.symlink_to(mountpoint / "index")
    cairn = await start_cairn("up", wrapper=namespace_wrapper(mountpoint, "24m"), **env)
    inside = Path(f"/proc/{cairn.proc.pid}/root") / mountpoint.relative_to("/")
    assert (await cairn.install(id=161)).records[-1]["status"] == "success"
    assert (await cairn.upload_image("t/before.png", PNG))[0] == 201

    ballast = await asyncio.to_thread(fill, inside)
    status, text = await cairn.upload_image("t/full.png", PNG)
    assert (status, text) == (507, "disk full: no space left to store the upload")
    status, text = await cairn.upload_function("hello", "def main(x):\n    return 1\n")
    assert status == 500 and text.startswith("Failed to save function: "), text
    assert "disk is full" in text, text
    status, text = await cairn.request(
        "POST", cairn.api + "/vm/install", json={"os": "debian", "version": "12"}
    )
    assert status == 507, text
    assert (
        text
        == "the disk holding the event store is full: nothing can be recorded until space is freed"
    )
    await wait_for(lambda: not_healthy(cairn), what="/health to report the event store")
    status, text = await cairn.health()
    assert status == 503 and "event store: the disk holding the event store is full" in text
    # A document dropped now (the inbox is elsewhere) cannot be indexed yet, and is not lost.
    inbox = tmp_path / "inbox" / SEARCH
    inbox.mkdir(parents=True, exist_ok=True)
    text = "basalt is a volcanic rock. " * 8000
    await asyncio.to_thread((inbox / "rock.txt").write_text, text)
    await cairn.wait_log(r"search notes: the disk is full; rock\.txt will be indexed once")
    assert await search_hits(cairn) == []

    await asyncio.to_thread(ballast.unlink)
    await wait_for(lambda: healthy(cairn), timeout=20, what="health once space is back")
    assert (await cairn.upload_image("t/after.png", PNG))[0] == 201
    assert (await cairn.upload_function("hello", "def main(x):\n    return 1\n"))[0] == 200
    again = await cairn.install(id=162)
    assert again.records[-1]["status"] == "success", again.records[-2:]
    await wait_for(lambda: has_rock(cairn), timeout=20, what="the dropped file to be indexed")
    assert await cairn.stop() == 0


async def has_rock(cairn: Cairn) -> bool:
    return await search_hits(cairn) == ["rock.txt"]


async def not_healthy(cairn: Cairn) -> bool:
    return (await cairn.health())[0] == 503


async def healthy(cairn: Cairn) -> bool:
    return (await cairn.health())[0] == 200


async def test_a_model_cache_that_cannot_be_written_at_start_downs_search_alone(
    start_cairn: StartCairn, sim: SimCluster, mountpoint: Path
) -> None:
    # Search's state, and with it the embedding model it builds at a first start, on a disk
    # with no room for the model: the build's write fails with ENOSPC.
    cairn = await start_cairn(
        "up",
        wrapper=namespace_wrapper(mountpoint, "2m"),
        SEARCH_DATA=str(mountpoint / "search"),
        EMBEDDING_PROVIDER="local",
    )
    why = f"it could not start: the disk is full ({mountpoint}/search/models)"
    log = cairn.log()
    assert f"cairn: search is down: {why}\n" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]

    status, text = await cairn.request("GET", cairn.url("status") + "/status")
    assert status == 503, text
    services = json.loads(text)["services"]
    assert services["search"]["status"] == "down" and services["search"]["problems"] == [why]
    for name in ("vm", "functions", "images"):
        assert services[name]["status"] == "up", (name, services[name])
    # Search's own port says the same, whatever is asked.
    async with cairn.session.get(cairn.url("search") + "/health") as resp:
        assert resp.status == 503
        health = await resp.json()
    assert health["status"] == "down" and health["problems"] == [why], health
    status, text = await cairn.request("GET", cairn.url("search") + "/api/search?db=x&q=rock")
    assert (status, json.loads(text)) == (503, {"error": f"search is unavailable: {why}"})
    # What stands in for search keeps its guard against DNS rebinding.
    status, text = await cairn.request(
        "GET", cairn.url("search") + "/health", headers={"Host": "evil.example"}
    )
    assert status == 403 and "evil.example" in json.loads(text)["error"], text

    # The other services work.
    assert (await cairn.upload_image("t/a.png", PNG))[0] == 201
    assert (await cairn.upload_function("hello", "return 41 + 1"))[0] == 200
    assert json.loads((await cairn.run_function("hello"))[1]) == {"data": 42, "type": "number"}
    assert await cairn.stop() == 0
