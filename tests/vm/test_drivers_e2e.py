"""What only the API driver does, and what must read the same through both drivers."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pvesim.cluster import SimCluster

from tests.vm import drivers
from tests.vm.conftest import Service
from tests.vm.test_install_e2e import STAGES

driver = drivers.driver
start_service = drivers.start_service

TIMING = re.compile(r" \(\d+\.\d\ds\)$")
MIGRATING = "VM initialization > migrating VM"


def shape(records: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(r["step"], r["status"], TIMING.sub("", r["message"])) for r in records]


def clean(sim: SimCluster, vmid: int) -> bool:
    return sim.vm(vmid) is None and not any(
        f"vm-{vmid}-" in v for node in ("pve1", "pve2", "pve3") for v in sim.volumes(node)
    )


async def test_install_on_another_node_reads_the_same_and_copies_no_disk(
    sim: SimCluster, start_service: Any, driver: str
) -> None:
    service: Service = await start_service()
    sse = await service.install(id=120, cpu=2, ram=2048, disk="20G", node="pve2", passwd="pw")
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    vm = sim.vm(120)
    assert vm is not None and (vm.node, vm.status) == ("pve2", "running")
    assert vm.config["scsi0"] == "local-lvm:vm-120-disk-0,size=20G"
    assert vm.config["boot"] == "order=scsi0" and vm.config["ciuser"] == "debian"
    assert str(vm.config["cipassword"]).startswith("$6$")  # stored as the hash cairn sent
    migrated = [c for c in sim.commands() if " qm migrate " in f" {c} "]
    # The same stage table whichever driver runs: a node was asked for.
    assert sse.steps == [*STAGES[:13], MIGRATING, *STAGES[13:]]
    # Both clone where asked: nothing to migrate.
    assert shape([r for r in sse.records if r["step"] == MIGRATING]) == [
        (MIGRATING, "processing", "[*] migrating VM to node pve2"),
        (MIGRATING, "success", "[+] created on pve2 directly: nothing to migrate"),
    ]
    if driver == "api":
        assert migrated == []
        assert all(not c.startswith("pve1 qm create") for c in sim.commands())
    else:  # the main node's template, copied to pve2 once while its disk is the image's size
        assert migrated == ["pve1 qm migrate 9001 pve2 --with-local-disks"]
    # Same stages and the same messages, but for what names a file or a volume.
    ours = [r for r in shape(sse.records) if r[0] != MIGRATING]
    named = {"VM creation > importing disk image", "OS preparation > downloading OS image"}
    assert all(m.startswith(("[*] ", "[+] ")) for _, _, m in ours)
    assert {s for s, _, _ in ours} == set(STAGES)
    fixed = [r for r in ours if r[0] not in named and "Password" not in r[2]]
    assert ("VM creation > creating VM", "success", "[+] VM created successfully") in fixed


async def test_a_token_lacking_one_privilege_fails_naming_it_and_leaves_nothing(
    sim: SimCluster, start_service: Any, driver: str
) -> None:
    sim.revoke_api("/vms", ["VM.Config.CDROM"])  # the cloud-init drive needs it
    service: Service = await start_service()
    sse = await service.install(id=121)
    assert sse.closed, sse.text
    if driver == "cli":  # root over SSH: the token is not used
        assert sse.last["status"] == "success"
        return
    # The first create is the template's, at the image's stage.
    assert (sse.last["step"], sse.last["status"]) == (
        "OS preparation > downloading OS image",
        "error",
    )
    assert "the API token lacks VM.Config.CDROM on /vms/9000" in sse.last["message"]
    assert clean(sim, 121)
    assert sim.vm(9000) is None
    assert await service.get("/vm/121/status") == (404, "VM 121 not found")


async def test_a_lock_held_by_another_task(sim: SimCluster, start_service: Any) -> None:
    service: Service = await start_service()
    vmid = await service.stopped(id=122)
    with sim.store.locked() as txn:  # a backup job holds the VM
        found = txn.find_vm(vmid)
        assert found is not None
        found[1]["config"]["lock"] = "backup"
        txn.save_vm(found[0], found[1])
    status, body = await service.post(f"/vm/{vmid}/set/cpu", {"cpu": 3})
    assert "VM is locked (backup)" in body, (status, body)
    started = await service.post_sse(f"/vm/{vmid}/start")
    assert started.last["status"] == "error"
    assert "qm start failed: VM is locked (backup)" in started.last["message"]
    assert sim.vm(vmid).config["cores"] != 3  # type: ignore[union-attr]


async def test_a_596_while_polling_a_task_is_retried(
    sim: SimCluster, start_service: Any, driver: str
) -> None:
    drivers.api_only(driver, "no HTTP between cairn and the node")
    service: Service = await start_service()
    sim.inject_failure("api GET get_task_status", message="Connection timed out", exit_code=596,
                       times=4)  # fmt: skip
    sse = await service.install(id=123)
    assert sse.last["status"] == "success", sse.records[-3:]
    assert sim.pending_failures() == []


@pytest.mark.parametrize("release", ["7.4", "8.2"])
async def test_older_pve_refuses_the_api_image_path_clearly(
    sim: SimCluster, start_service: Any, driver: str, release: str
) -> None:
    drivers.api_only(driver, "the CLI driver imports the image with qm on every version")
    service: Service = await start_service()
    sim.set_api_version(release)
    sse = await service.install(id=124)
    assert (sse.last["step"], sse.last["status"]) == (
        "preparation > checking storage pool",
        "error",
    )
    assert f"the cluster runs Proxmox VE {release}" in sse.last["message"]
    assert "needs 8.4 or later" in sse.last["message"]
    assert "Use PVE_DRIVER=cli" in sse.last["message"]
    assert clean(sim, 124)


async def test_lifecycle_through_the_api_of_pve_7_4(sim: SimCluster, start_service: Any) -> None:
    """A VM installed another way is driven through the API of a 7.4 cluster, whose resize
    answers at once (null) instead of with a task."""
    cli: Service = await start_service(PVE_DRIVER="cli")
    vmid = await cli.installed(id=125)
    await start_service.stop_last()
    sim.set_api_version("7.4")
    api: Service = await start_service(PVE_DRIVER="api")
    assert await api.post(f"/vm/{vmid}/stop") == (200, "ok")
    assert await api.post(f"/vm/{vmid}/set/disk", {"disk": "4G"}) == (200, "ok")
    assert sim.vm(vmid).config["scsi0"].endswith("size=20G")  # type: ignore[union-attr]
    assert await api.post(f"/vm/{vmid}/destroy") == (200, "ok")
    assert clean(sim, vmid)


async def test_a_pinned_fingerprint_that_does_not_match_is_refused(
    sim: SimCluster, start_service: Any, driver: str
) -> None:
    drivers.api_only(driver, "no certificate between cairn and the node")
    service: Service = await start_service(PVE_API_FINGERPRINT=":".join(["AB"] * 32))
    sse = await service.install(id=126)
    assert sse.status == 503  # nothing of the cluster can be read
    async with service.session.get(service.url + "/health") as resp:
        health = await resp.text()
    assert "its certificate's SHA-256 fingerprint is" in health, health
    assert "not AB:AB:AB" in health and "PVE_API_FINGERPRINT" in health
    assert sim.vm(126) is None


async def test_a_pool_scoped_token_never_touches_vms_outside_its_pool(
    sim: SimCluster, start_service: Any, driver: str
) -> None:
    drivers.api_only(driver, "resource pools are an API permission scope")
    sim.add_pool("cairn")
    secret = sim.add_api_token("cairn@pve!pool", sim.cairn_acl(pool="cairn"))
    service: Service = await start_service(
        PVE_API_POOL="cairn", PVE_API_TOKEN=f"cairn@pve!pool={secret}"
    )
    vmid = await service.installed(id=127)
    assert sim.pool_members("cairn") == [9000, vmid]  # its template is made in the pool too
    sim.add_gui_vm(128, "pve1", running=True)
    listing = await service.list()
    assert [r["vmid"] for r in listing["list"]] == [vmid]  # PVE shows the token its pool only
    assert await service.post(f"/vm/{vmid}/stop") == (200, "ok")
    assert await service.post(f"/vm/{vmid}/destroy") == (200, "ok")
    assert sim.pool_members("cairn") == [9000]  # installs still clone it
    assert sim.vm(128) is not None and sim.vm(128).status == "running"  # type: ignore[union-attr]
