"""What a real `qm` would refuse is refused up front with what to change; what a real node does
on a time-out cairn meets with a defined answer; no install leaves a guessable password."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actors.vm.cli.transport import LocalTransport
from actors.vm.shacrypt import sha512_crypt
from events.store import EventStore, default_store_url
from tests.vm import drivers
from tests.vm.conftest import Service, read_sse

# Every test here runs with both drivers (tests/vm/drivers.py).
driver = drivers.driver
start_service = drivers.start_service


async def test_more_vcpus_than_the_node_has_is_a_400_naming_the_node(service: Service) -> None:
    # pve1 has 16 CPUs, pve2 and pve3 8: real `qm start` refuses more (MAX 8 vcpus ...).
    body = {"os": "debian", "version": "12", "node": "pve2", "cpu": 12}
    assert await service.post("/vm/install", body) == (
        400,
        "cpu: node pve2 has 8 CPUs, so a VM there can have at most 8 vCPUs (asked for 12); "
        "Proxmox would refuse to start it",
    )
    status, text = await service.post("/vm/install", {"os": "debian", "version": "12", "cpu": 20})
    assert (status, text.split(",")[0]) == (400, "cpu: node pve1 has 16 CPUs")
    assert not any(" qm create " in c for c in service.sim.commands())

    big = await service.installed(cpu=12)  # fits pve1
    small = await service.installed(node="pve2")
    for vmid in (big, small):
        assert await service.post(f"/vm/{vmid}/stop") == (200, "ok")
    assert await service.post(f"/vm/{small}/set/cpu", {"cpu": 12}) == (
        400,
        "cpu: node pve2 has 8 CPUs, so a VM there can have at most 8 vCPUs (asked for 12); "
        "Proxmox would refuse to start it",
    )
    assert await service.post(f"/vm/{small}/set/cpu", {"cpu": 8}) == (200, "ok")
    moved = await service.post_sse(f"/vm/{big}/set/node", {"node": "pve3"})
    assert (moved.status, moved.text) == (
        400,
        f"node: VM {big} has 12 vCPUs, but node pve3 has 8 CPUs, so a VM there can have at most "
        "8 vCPUs (asked for 12); Proxmox would refuse to start it",
    )
    assert service.sim.vm(big).node == "pve1"  # type: ignore[union-attr]


async def test_the_simulated_node_refuses_to_start_too_many_vcpus(service: Service) -> None:
    """Raised behind cairn's back, the VM no longer starts: the real node's message."""
    vmid = await service.stopped()
    qm = LocalTransport(service.sim.env())
    assert (await qm.run(["qm", "set", str(vmid), "--cores", "10", "--sockets", "2"])).ok
    started = await service.post_sse(f"/vm/{vmid}/start")
    assert started.last["status"] == "error"
    assert "qm start failed: MAX 16 vcpus allowed per VM on this node" in started.last["message"]
    assert await service.get(f"/vm/{vmid}/status") == (200, "stopped")


async def test_the_storage_pool_must_hold_vm_disks(
    start_service: Any,
    driver: str,
) -> None:
    step = "preparation > checking storage pool"
    local: Service = await start_service(ASSIGN_STORAGE="local")  # a stock node's `local`
    sse = await local.install()
    assert (sse.last["step"], sse.last["status"]) == (step, "error")
    assert sse.last["message"].startswith(
        "[-] storage pool local does not hold VM disk images (its content types lack 'images'); "
        "set ASSIGN_STORAGE to one that does: local-lvm ("
    )
    await start_service.stop_last()
    missing: Service = await start_service(ASSIGN_STORAGE="nosuch")
    sse = await missing.install()
    if driver == "api":  # PVE checks the token's privileges on /storage/nosuch first
        assert sse.last["message"].startswith(
            "[-] storage pool nosuch cannot be checked: permission denied by Proxmox VE: the API "
            "token lacks Datastore.Audit|Datastore.AllocateSpace on /storage/nosuch ("
        )
    else:
        assert sse.last["message"].startswith(
            "[-] storage pool nosuch does not exist; storages for VM disks: local-lvm ("
        )
    missing.sim.set_storage_state("local-lvm", "disabled")
    await start_service.stop_last()
    disabled: Service = await start_service()
    sse = await disabled.install()
    assert sse.last["message"].startswith(
        "[-] storage pool local-lvm is disabled; ASSIGN_STORAGE needs an active one ("
    )
    assert not any(" qm create " in c for c in disabled.sim.commands())


async def test_set_memory_below_the_balloon_minimum_works(start_service: Any) -> None:
    service: Service = await start_service(VM_BALLOON_MIN="1024")
    vmid = await service.installed(ram=4096)
    assert service.sim.vm(vmid).config["balloon"] == 1024  # type: ignore[union-attr]
    assert await service.post(f"/vm/{vmid}/stop") == (200, "ok")
    assert await service.post(f"/vm/{vmid}/set/memory", {"memory": 512}) == (200, "ok")
    config = service.sim.vm(vmid).config  # type: ignore[union-attr]
    assert (config["memory"], config["balloon"]) == (512, 512)
    assert await service.post(f"/vm/{vmid}/set/memory", {"memory": 8192}) == (200, "ok")
    config = service.sim.vm(vmid).config  # type: ignore[union-attr]
    assert (config["memory"], config["balloon"]) == (8192, 1024)


async def test_a_guest_ignoring_acpi(service: Service) -> None:
    sim = service.sim
    # During an install the reboot falls back to stop + start: it is cairn's own new VM.
    sim.inject_failure("guest powerdown", vmid=120)
    sse = await service.install(id=120)
    assert sse.last["status"] == "success", sse.records[-3:]
    notes = [r["message"] for r in sse.records if r["step"] == "VM initialization > rebooting VM"]
    assert any(
        "the guest did not power off (VM quit/powerdown failed - got timeout); stopping and "
        "starting it instead" in n
        for n in notes
    ), notes
    assert [c for c in sim.commands() if c.startswith(("pve1 qm stop 120", "pve1 qm start 120"))
            ][-2:] == ["pve1 qm stop 120", "pve1 qm start 120"]  # fmt: skip

    # A user's shutdown: the time-out, said plainly; the VM keeps running.
    sim.inject_failure("guest powerdown", vmid=120)
    assert await service.post("/vm/120/shutdown") == (
        500,
        "qm shutdown failed: VM quit/powerdown failed - got timeout: the guest did not power "
        "off and is still running; use stop to force it off",
    )
    assert await service.get("/vm/120/status") == (200, "running")
    # A user's reboot: the same in the stream, no forced reset.
    sim.inject_failure("guest powerdown", vmid=120)
    rebooted = await service.post_sse("/vm/120/reboot")
    assert rebooted.last["status"] == "error"
    assert rebooted.last["message"].startswith(
        "[-] qm reboot failed: VM quit/powerdown failed - got timeout: the guest did not react "
        "to the reboot request and is still running; stop and start it to force one ("
    )
    assert await service.get("/vm/120/status") == (200, "running")
    assert await service.post("/vm/120/shutdown") == (200, "ok")  # it listens again


async def test_no_password_given_means_a_random_one_shown_once(service: Service) -> None:
    sse = await service.install(id=130)
    assert sse.last["status"] == "success", sse.records[-3:]
    shown = [r for r in sse.records if r["message"].startswith("[*] Password: ")]
    assert len(shown) == 1 and sse.records[-2] == shown[0]  # just before the final record
    password = shown[0]["message"].split()[2]
    assert len(password) == 20 and password != "passwd"
    stored = str(service.sim.vm(130).config["cipassword"])  # type: ignore[union-attr]
    assert sha512_crypt(password, stored.split("$")[2]) == stored  # the VM's password
    # Never stored: not in the events, not in a re-attached stream, not on a command line.
    store = await EventStore.open(default_store_url(Path(service.env["CAIRN_DATA"])))
    try:
        assert all(password not in str(r.event) for r in await store.read_stream("vm:130"))
    finally:
        await store.close()
    async with service.session.get(f"{service.api}/vm/130/task") as resp:
        again = await read_sse(resp)
    assert all(password not in r["message"] for r in again.records)
    assert all(password not in c for c in service.sim.commands())
    # Two installs, two passwords.
    other = await service.install(id=131)
    second = next(r for r in other.records if r["message"].startswith("[*] Password: "))
    assert second["message"].split()[2] != password

    given = await service.install(id=132, passwd="s3cr3t-given")
    assert not any(r["message"].startswith("[*] Password: ") for r in given.records)
