"""`set/disk` grows the disk the caller names (`drive`: the boot disk `scsi0` when omitted, or
an extra disk an install attached as scsi1 ...), end to end with both drivers; a drive the VM
lacks or that is no disk's name is refused with 400 before anything changes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pvesim.cluster import SimCluster

from actors.vm.lifecycle import Command
from actors.vm.messages import do_payload, parse_do_command
from actors.vm.requests import BadRequest
from tests.vm import drivers
from tests.vm.conftest import Service
from tests.vm.helpers import settings

driver = drivers.driver
start_service = drivers.start_service


def size_of(sim: SimCluster, vmid: int, drive: str) -> str:
    vm = sim.vm(vmid)
    assert vm is not None
    return dict(p.partition("=")[::2] for p in str(vm.config[drive]).split(",")[1:])["size"]


async def test_set_disk_grows_the_drive_named(
    sim: SimCluster, start_service: Any, driver: str
) -> None:
    service: Service = await start_service(VM_MAX_DISK="40")
    vmid = await service.installed(id=160, disks=[{"size": "4G", "storage": "local-lvm"}])
    boot = size_of(sim, vmid, "scsi0")
    assert size_of(sim, vmid, "scsi1") == "4G"
    assert await service.post(f"/vm/{vmid}/stop") == (200, "ok")

    assert await service.post(f"/vm/{vmid}/set/disk", {"disk": "2G", "drive": "scsi1"}) == (
        200,
        "ok",
    )
    assert size_of(sim, vmid, "scsi1") == "6G"
    assert size_of(sim, vmid, "scsi0") == boot  # the boot disk untouched
    status, text = await service.get(f"/vm/{vmid}")
    assert status == 200, text
    detail = json.loads(text)
    assert detail["disk"] == 16  # the VM's `disk` is its boot disk's size
    assert [d["size"] for d in detail["guest"]["disks"]] == [boot, "6G"]

    # Omitted: the boot disk, as the spec's set/disk always did.
    assert await service.post(f"/vm/{vmid}/set/disk", {"disk": "1G"}) == (200, "ok")
    assert size_of(sim, vmid, "scsi0") == "17G" and size_of(sim, vmid, "scsi1") == "6G"
    assert await service.post(f"/vm/{vmid}/set/disk", {"disk": "1G", "drive": "scsi0"}) == (
        200,
        "ok",
    )
    assert size_of(sim, vmid, "scsi0") == "18G"

    refused = [
        ({"disk": "1G", "drive": "scsi3"}, f"drive: VM {vmid} has no disk scsi3; its disks: "
         "scsi0, scsi1"),
        ({"disk": "1G", "drive": "ide2"}, f"drive: VM {vmid} has no disk ide2; its disks: "
         "scsi0, scsi1"),  # the cloud-init drive is no disk to grow
        ({"disk": "1G", "drive": "nvme0"}, "drive: must name a disk like scsi0 or scsi1, "
         "not 'nvme0'"),
        ({"disk": "1G", "drive": "scsi1,size=1T"}, "drive: must name a disk like scsi0 or "
         "scsi1, not 'scsi1,size=1T'"),
        ({"disk": "1G", "drive": 1}, "drive: must name a disk like scsi0 or scsi1, not int"),
        ({"disk": "1G", "drive": None}, "drive: must name a disk like scsi0 or scsi1, not "
         "NoneType"),
        ({"disk": "35G", "drive": "scsi1"}, "disk: scsi1: 6G + 35G exceeds VM_MAX_DISK (40G)"),
    ]  # fmt: skip
    for body, message in refused:
        assert await service.post(f"/vm/{vmid}/set/disk", body) == (400, message), body
    assert size_of(sim, vmid, "scsi1") == "6G" and size_of(sim, vmid, "scsi0") == "18G"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"grow_gb": 2, "drive": "nvme0"},
            "drive: must name a disk like scsi0 or scsi1, not 'nvme0'",
        ),
        (
            {"grow_gb": 2, "drive": ["scsi1"]},
            "drive: must name a disk like scsi0 or scsi1, not list",
        ),
    ],
)
def test_the_nats_command_checks_the_drive_as_http_does(args: dict[str, Any], message: str) -> None:
    payload = do_payload("ab" * 16, 160, Command.SET_DISK, args, "test")
    with pytest.raises(BadRequest) as caught:
        parse_do_command(payload, settings())
    assert str(caught.value) == message
    plain = do_payload("ab" * 16, 160, Command.SET_DISK, {"grow_gb": 2}, "test")
    assert parse_do_command(plain, settings()).args == {"grow_gb": 2}  # the spec's, as it was
    named = do_payload("ab" * 16, 160, Command.SET_DISK, {"grow_gb": 2, "drive": "scsi1"}, "t")
    assert parse_do_command(named, settings()).args == {"grow_gb": 2, "drive": "scsi1"}
