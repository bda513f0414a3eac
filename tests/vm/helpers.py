"""Small builders shared by the VM tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

from pvesim.cluster import SimCluster

from actors.vm.settings import VmSettings, load_settings
from tests.conftest import wait_for

T = TypeVar("T")

BASE_ENV = {
    "GATEWAY": "192.168.0.1",
    "MAIN_NODE": "pve1",
    "NODE_pve1": "192.168.0.11",
    "NODE_pve2": "192.168.0.12",
    "ASSIGN_STORAGE": "local-lvm",
}


def settings(**extra: str) -> VmSettings:
    return load_settings({**BASE_ENV, **extra})


PUBKEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl user@host"
)


async def until(
    condition: Callable[[], Awaitable[T | None]], *, timeout: float = 10.0, what: str = "it"
) -> T:
    """`tests.conftest.wait_for` for async conditions, typed for mypy."""
    value: object = await wait_for(condition, timeout=timeout, what=what)
    return cast(T, value)


def guests(sim: SimCluster) -> set[int]:
    """The ids of the cluster's VMs, leaving out templates (`template: 1`): with templates on
    by default an install's first clone brings one along, and it is no install's VM."""
    return {vmid for vmid, vm in sim.vms().items() if str(vm.config.get("template")) != "1"}


def add_raw_disk(sim: SimCluster, vmid: int) -> None:
    """Give VM `vmid` a second disk, raw, on a directory storage: a disk Proxmox cannot
    snapshot, so a snapshot (or a change, which takes one) must be refused up front."""
    sim.add_storage("files", "dir")
    sim.grant_api("/storage/files", ["Datastore.Audit"])  # else the API driver cannot see it
    with sim.store.locked() as txn:
        rec = txn.vm_on("pve1", vmid)
        assert rec is not None
        rec["config"]["scsi1"] = f"files:{vmid}/vm-{vmid}-disk-1.raw,size=4G"
        txn.save_vm("pve1", rec)
