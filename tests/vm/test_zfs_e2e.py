"""A cluster installed on ZFS (`local` + `local-zfs`): install, grow and migrate as on lvm-thin."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pvesim.cluster import SimCluster

from tests.vm import drivers
from tests.vm.conftest import Service

# Every test here runs with both drivers (tests/vm/drivers.py).
driver = drivers.driver
start_service = drivers.start_service


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[SimCluster]:
    async with SimCluster(tmp_path / "pve", delay_scale=0, storage_layout="zfs") as cluster:
        yield cluster


async def test_install_grow_and_migrate_on_zfs(start_service: Any) -> None:
    # An imported disk: a linked clone on zfs cannot leave its template's node (docs/vm.md).
    service: Service = await start_service(VM_TEMPLATES="0")
    assert service.env["ASSIGN_STORAGE"] == "local-zfs"
    sse = await service.install(id=140, disk="20G")
    assert sse.last["status"] == "success", sse.records[-3:]
    assert any("storage pool local-zfs (zfspool) is available" in r["message"]
               for r in sse.records)  # fmt: skip
    vm = service.sim.vm(140)
    assert vm is not None
    assert vm.config["scsi0"] == "local-zfs:vm-140-disk-0,size=20G"
    assert vm.config["ide2"] == "local-zfs:vm-140-cloudinit,media=cdrom"
    assert await service.post("/vm/140/stop") == (200, "ok")
    assert await service.post("/vm/140/set/disk", {"disk": "4G"}) == (200, "ok")
    moved = await service.post_sse("/vm/140/set/node", {"node": "pve2"})
    assert moved.last["status"] == "success", moved.records[-3:]
    sent = [r["message"] for r in moved.records if "full send of" in r["message"]]
    assert any("rpool/data/vm-140-disk-0@__migration__ estimated size is 24.0G" in m for m in sent)
    assert set(service.sim.volumes("pve2")) == {
        "local-zfs:vm-140-disk-0", "local-zfs:vm-140-cloudinit",
    }  # fmt: skip
