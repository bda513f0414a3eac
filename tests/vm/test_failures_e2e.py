"""A failure at each install stage: an error record, then close, and nothing left behind."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.vm import drivers
from tests.vm.conftest import Service

# Every test here runs with both drivers (tests/vm/drivers.py).
driver = drivers.driver
start_service = drivers.start_service


def assert_clean(service: Service, vmid: int) -> None:
    assert service.sim.vm(vmid) is None, f"VM {vmid} left in the cluster"
    for node in ("pve1", "pve2", "pve3"):
        leftovers = [v for v in service.sim.volumes(node) if f"vm-{vmid}-" in v]
        assert leftovers == [], (node, leftovers)


async def failing_install(service: Service, vmid: int, step: str, **body: Any) -> str:
    sse = await service.install(id=vmid, **body)
    assert sse.closed, sse
    assert sse.last["status"] == "error", sse.records[-3:]
    assert sse.last["step"] == step, sse.records[-3:]
    assert sse.last["message"].startswith("[-] ")
    assert [r for r in sse.records if r["status"] == "error"] == [sse.last]
    assert_clean(service, vmid)
    message: str = sse.last["message"]
    return message


async def test_failure_at_each_vm_stage_removes_the_vm_and_frees_its_id(
    start_service: Any,
    driver: str,
) -> None:
    # The import path's commands: a clone has no create, import or migration of its own.
    service: Service = await start_service(VM_SSH_WAIT="2", VM_TEMPLATES="0")
    sim = service.sim
    sim.inject_failure("qm create", vmid=110)
    sim.inject_failure("qm importdisk", vmid=111)
    sim.inject_failure("qm set", vmid=112)
    sim.inject_failure("qm resize", vmid=113)
    sim.inject_failure("qm migrate", vmid=114)
    sim.inject_failure("qm start", vmid=115)
    sim.inject_failure("guest boot", vmid=116)
    sim.inject_failure("guest exec", vmid=117, exit_code=3)
    sim.inject_failure("qm reboot", vmid=118)
    init = "VM initialization > "
    cases = [
        (110, "VM creation > creating VM", {}),
        (111, "VM creation > importing disk image", {}),
        (112, init + "initializing configuration", {}),
        (113, init + "initializing configuration", {}),
        (114, init + "migrating VM", {"node": "pve2"}),
        (115, init + "waiting for ready", {}),
        (116, init + "waiting for ready", {}),
        (117, init + "SSH initialization", {}),
    ]
    if driver == "api":
        # One create imports the disk and sets cloud-init, on the node asked for: there is no
        # separate import, `qm set` or migration to fail.
        cases = [c for c in cases if c[0] not in (111, 112, 114)]
        sim.clear_failures()
        for command, vmid in (("qm create", 110), ("qm resize", 113), ("qm start", 115)):
            sim.inject_failure(command, vmid=vmid)
        sim.inject_failure("guest boot", vmid=116)
        sim.inject_failure("guest exec", vmid=117, exit_code=3)
        sim.inject_failure("qm reboot", vmid=118)
    messages = await asyncio.gather(
        *(failing_install(service, vmid, step, **body) for vmid, step, body in cases)
    )
    # Alone: once, run beside the others, the simulator's `qm stop` after a failed reboot
    # never returned (reported to the simulator's author; not reproduced since).
    await failing_install(service, 118, init + "rebooting VM")
    cases.append((118, init + "rebooting VM", {}))
    by_id = dict(zip([c[0] for c in cases], messages, strict=False))
    assert "disk resize failed" in by_id[113]  # qm resize exited 0 but said why on stderr
    assert "exited with status 3" in by_id[117]
    for vmid, _, _ in cases:
        assert await service.get(f"/vm/{vmid}/status") == (404, f"VM {vmid} not found")
    listing = await service.list()
    assert not {r["vmid"] for r in listing["list"]} & {vmid for vmid, _, _ in cases}
    again = await service.install(id=110)
    assert again.last["status"] == "success" and again.last["vm_id"] == 110, again.records[-2:]


async def test_failure_while_finalizing(start_service: Any) -> None:
    service: Service = await start_service(VM_SSH_WAIT="2")
    service.sim.inject_failure("guest boot", vmid=120, after=1)  # the boot after the reboot
    sse = await service.install(id=120)
    assert sse.closed and sse.last["status"] == "error"
    assert sse.last["step"] == "VM initialization > finalizing"
    assert "not ready after 2s" in sse.last["message"]
    assert_clean(service, 120)


async def test_a_guest_showing_another_host_key_after_the_reboot_is_refused(
    service: Service,
) -> None:
    """The host key seen first is pinned for the whole install: a different machine answering
    at the VM's address after the reboot fails it at once, whatever the wait allows."""
    service.sim.inject_failure("guest rekey", vmid=121, after=1)
    sse = await service.install(id=121)
    reachable = [r["message"] for r in sse.records if "reachable over SSH" in r["message"]]
    fingerprint = reachable[0].split("(host key ")[1].split(")")[0]
    assert fingerprint.startswith("SHA256:")
    assert sse.closed and sse.last["status"] == "error"
    assert sse.last["step"] == "VM initialization > finalizing"
    assert (
        f"the host key is not the one it showed first ({fingerprint}); not talking to it"
        in sse.last["message"]
    )
    assert_clean(service, 121)


async def test_failures_before_any_vm_exists(service: Service) -> None:
    service.mirror.files.pop("ubuntu/20.04/ubuntu-20.04-server-cloudimg-amd64.img")
    sums = "rockylinux/8/CHECKSUM"
    service.mirror.files[sums] = service.mirror.files[sums].replace(b"= ", b"= 00")
    msg = await failing_install(
        service, 130, "OS preparation > validating OS image URL", os="ubuntu", version="20.04"
    )
    assert "HTTP 404" in msg
    msg = await failing_install(
        service, 131, "OS preparation > downloading OS image", os="rockylinux", version="8"
    )
    assert "checksum" in msg
    service.sim.inject_failure("pvesm status")
    await failing_install(service, 132, "preparation > checking storage pool")
    assert not any(" qm create " in c for c in service.sim.commands())


async def test_taken_id_and_exhausted_range(start_service: Any) -> None:
    service: Service = await start_service(ASSIGN_IP_START="100", ASSIGN_IP_END="101")
    first = await service.install()
    assert first.last["vm_id"] == 100
    taken = await service.install(id=100)
    assert taken.closed and [r["status"] for r in taken.records] == ["processing", "error"]
    assert taken.last["step"] == "preparation > checking VMID"
    assert taken.last["message"].startswith("[-] VM 100 already exists (")
    second = await service.install()
    assert second.last["vm_id"] == 101
    full = await service.install()
    assert full.closed and full.last["status"] == "error"
    assert full.last["message"].startswith("[-] no free VMID in 100-101: every id is in use (")


async def test_a_vm_whose_cleanup_failed_is_left_failed_until_destroyed(service: Service) -> None:
    service.sim.inject_failure("guest exec", vmid=140, exit_code=3)
    service.sim.inject_failure("qm destroy", vmid=140)  # the clean-up after the failure
    sse = await service.install(id=140)
    assert sse.closed and sse.last["status"] == "error"
    assert sse.last["step"] == "VM initialization > SSH initialization"
    assert "exited with status 3" in sse.last["message"]
    assert (
        "cleanup failed: can't lock file '/var/lock/qemu-server/lock-140.conf'"
        in (sse.last["message"])
    )
    assert service.sim.vm(140) is not None  # still in the cluster, and cairn says so
    listing = await service.list()
    assert [r["vmid"] for r in listing["list"]].count(140) == 1
    assert await service.get("/vm/140/status") == (200, "stopped")
    refusal = (409, "VM 140 is in a failed state; destroy it")
    assert await service.post("/vm/140/start") == refusal
    assert await service.post("/vm/140/set/cpu", {"cpu": 2}) == refusal
    again = await service.install(id=140)
    assert again.last["message"].startswith("[-] VM 140 already exists (")

    assert await service.post("/vm/140/destroy") == (200, "ok")
    assert_clean(service, 140)
    assert await service.get("/vm/140/status") == (404, "VM 140 not found")
    reused = await service.install(id=140)
    assert reused.last["status"] == "success" and reused.last["vm_id"] == 140
