"""A `qm clone` stopped half-way, as qemu-server's clone_vm leaves it: a signal it handles
(the SSH session hung up, ^C) frees what it made and removes its temporary config; a worker
killed outright leaves the locked placeholder, and no task runs for it any more. While it
works, the node lists the clone as a task of the source VM (`qmclone:<source>`)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pvesim.cluster import SimCluster

from tests.conftest import wait_for
from tests.pvesim.helpers import installed_vm, run


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[SimCluster]:
    async with SimCluster(tmp_path / "pve", delay_scale=0, statd_lag=0) as cluster:
        yield cluster


def placeholder(sim: SimCluster, vmid: int) -> dict[str, Any] | None:
    with sim.store.locked() as txn:
        rec = txn.vm_on("pve1", vmid)
    return None if rec is None else dict(rec["config"])


def volumes_of(sim: SimCluster, vmid: int) -> list[str]:
    with sim.store.locked() as txn:
        pool = txn.volumes("pve1").get("local-lvm", {})
    return sorted(name for name, vol in pool.items() if vol.get("vmid") == vmid)


async def active_tasks(sim: SimCluster, vmid: int) -> list[dict[str, Any]]:
    argv = ["pvesh", "get", "/nodes/pve1/tasks", "--source", "active", "--vmid", str(vmid)]
    argv += ["--output-format", "json"]
    proc = await asyncio.create_subprocess_exec(
        *argv, env={**os.environ, **sim.env()}, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0
    got: list[dict[str, Any]] = json.loads(out)
    return got


async def slow_full_clone(sim: SimCluster, tmp_path: Path) -> asyncio.subprocess.Process:
    """`qm clone 200 130 --full 1` of a template, started and seen at work (its placeholder
    written), with a copy slow enough to be stopped in the middle."""
    installed_vm(sim.store, tmp_path, 200)
    assert run(sim.store, "qm", "template", "200").code == 0
    sim.set_delay_scale(2)  # the 2 GiB copy takes 16 s
    proc = await asyncio.create_subprocess_exec(
        "qm", "clone", "200", "130", "--full", "1", "--name", "web",
        "--description", "created by cairn, install task t1",
        env={**os.environ, **sim.env()},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    await wait_for(lambda: placeholder(sim, 130) is not None, timeout=60, what="the placeholder")
    return proc


async def test_a_clone_at_work_is_a_task_of_its_source(sim: SimCluster, tmp_path: Path) -> None:
    proc = await slow_full_clone(sim, tmp_path)
    try:
        tasks = await active_tasks(sim, 200)
        assert [(t["type"], t["id"]) for t in tasks] == [("qmclone", "200")]
        assert await active_tasks(sim, 130) == []  # the new id names no task
        assert (placeholder(sim, 130) or {}).get("lock") == "clone"
    finally:
        proc.kill()
        await proc.wait()


async def test_a_hang_up_frees_what_the_clone_made(sim: SimCluster, tmp_path: Path) -> None:
    proc = await slow_full_clone(sim, tmp_path)
    await wait_for(lambda: bool(volumes_of(sim, 130)), timeout=60, what="the first volume")
    proc.send_signal(signal.SIGHUP)
    _, err = await proc.communicate()
    assert (proc.returncode, err.decode().strip()) == (255, "clone failed: interrupted by signal")
    assert placeholder(sim, 130) is None
    assert volumes_of(sim, 130) == []
    assert await active_tasks(sim, 200) == []


async def test_a_killed_clone_leaves_its_locked_placeholder(
    sim: SimCluster, tmp_path: Path
) -> None:
    proc = await slow_full_clone(sim, tmp_path)
    # The cloud-init drive comes first (ide2 sorts before scsi0): once it is made, the config
    # is written with the caller's name and notes, still locked.
    await wait_for(lambda: "ide2" in (placeholder(sim, 130) or {}), timeout=60, what="ide2")
    proc.kill()
    await proc.wait()
    left = placeholder(sim, 130)
    assert left is not None
    assert (left["lock"], left["name"]) == ("clone", "web")
    assert "created by cairn, install task t1" in left["description"]
    assert "scsi0" not in left  # never the template's own disk
    assert await active_tasks(sim, 200) == []
    # The disk being copied is not in the config yet: only this flag finds it.
    assert run(sim.store, "qm", "unlock", "130").code == 0
    r = run(sim.store, "qm", "destroy", "130", "--purge", "--destroy-unreferenced-disks", "1")
    assert r.code == 0, r.err
    assert volumes_of(sim, 130) == []
    # The template's base volume is untouched.
    assert run(sim.store, "qm", "destroy", "200").code == 0
