"""Templates and linked clones end to end (docs/vm.md "Templates and linked clones"), with
both drivers against the simulated cluster, templates being on by default: the first install of
an image on a node builds its template, every later one clones it."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

from pvesim.cluster import SimCluster

from gateway.cli import common as cli_common
from gateway.cli import vm as cli_vm
from tests.pvesim.helpers import run
from tests.vm import drivers
from tests.vm.conftest import Service, Sse, read_sse
from tests.vm.mirror import IMAGE_BYTES, mirror_files
from tests.vm.test_install_e2e import MESSAGE, STAGES

driver = drivers.driver
start_service = drivers.start_service


def messages(sse: Sse, step: str) -> list[str]:
    return [r["message"] for r in sse.records if r["step"] == step]


def imports(commands: list[str]) -> list[str]:
    """The commands that copied a cloud image into a VM disk (either driver's way)."""
    return [c for c in commands if "importdisk" in c or "disk import" in c or "import-from" in c]


async def test_first_install_builds_the_template_and_the_second_clones_it(
    start_service: Any,
) -> None:
    service: Service = await start_service()
    first = await service.install()
    assert first.closed and first.last["status"] == "success", first.records[-3:]
    assert first.steps == STAGES
    assert all(MESSAGE.match(r["message"]) for r in first.records)
    download = messages(first, "OS preparation > downloading OS image")
    assert any("no template of debian 12" in m and ": building it" in m for m in download)
    assert download[-1].startswith("[+] template 9000 (debian 12, sha512 ")
    assert " ready on pve1 (" in download[-1]
    tpl = service.sim.vm(9000)
    assert tpl is not None and tpl.config["template"] in (1, "1")
    assert tpl.config["name"] == "cairn-debian-12"
    assert tpl.config["scsi0"].startswith("local-lvm:base-9000-disk-0")
    built = len(service.sim.commands())

    second = await service.install()
    assert second.closed and second.last["status"] == "success", second.records[-3:]
    assert second.steps == STAGES
    assert all(MESSAGE.match(r["message"]) for r in second.records)
    download = messages(second, "OS preparation > downloading OS image")
    assert not any("building" in m for m in download), download
    assert download[-1].startswith("[+] template 9000 (debian 12, sha512 ")
    copied = messages(second, "VM creation > importing disk image")[-1]
    assert copied.startswith("[+] linked clone of template 9000, 0 bytes copied ("), copied
    later = service.sim.commands()[built:]
    assert any(c.startswith("pve1 qm clone 9000 ") for c in later), later
    assert imports(later) == []
    vmid = second.last["vm_id"]
    vm = service.sim.vm(vmid)
    assert vm is not None and vm.status == "running"
    assert vm.config["scsi0"].startswith(f"local-lvm:vm-{vmid}-disk-0")
    assert vm.config["tags"] == "debian"
    assert vm.config["ipconfig0"] == f"ip=127.0.0.{vmid}/24,gw=127.0.0.1"
    assert "template" not in vm.config


async def test_a_clone_is_shaped_as_the_caller_asked(sim: SimCluster, start_service: Any) -> None:
    sim.add_bridge("vmbr1", mtu=9000)
    sim.grant_api("/sdn/zones/localnetwork/vmbr1", ["SDN.Use"])  # the token's, for a new bridge
    service: Service = await start_service()
    await service.installed()  # builds the template
    sse = await service.install(
        id=140, bridge="vmbr1", vlan=20, mtu=9000, nameserver="10.0.0.53",
        tags=["web"], description="nginx front", disks=[{"size": "32G", "storage": "local-lvm"}],
    )  # fmt: skip
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    copied = messages(sse, "VM creation > importing disk image")[-1]
    assert copied.startswith("[+] linked clone of template 9000"), copied
    vm = sim.vm(140)
    assert vm is not None and vm.status == "running"
    assert str(vm.config["net0"]).endswith(",bridge=vmbr1,tag=20,mtu=9000")
    assert str(vm.config["scsi1"]).startswith("local-lvm:vm-140-disk-")
    assert str(vm.config["scsi1"]).endswith(",size=32G")
    assert vm.config["nameserver"] == "10.0.0.53"
    assert vm.config["tags"] == "debian;web"
    assert str(vm.config["description"]).startswith("nginx front\ncreated by cairn, install task ")


async def test_concurrent_first_installs_build_one_template(start_service: Any) -> None:
    service: Service = await start_service()
    a, b = await asyncio.gather(service.install(), service.install())
    for sse in (a, b):
        assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    templates = [c for c in service.sim.commands() if " qm template " in f" {c} "]
    assert len(templates) == 1, templates
    assert len(imports(service.sim.commands())) == 1
    building = [sse for sse in (a, b) if any("building it" in r["message"] for r in sse.records)]
    assert len(building) == 1


async def test_a_storage_without_linked_clones_full_clones_and_says_so(
    sim: SimCluster, start_service: Any
) -> None:
    sim.add_storage("thick", "lvm")
    sim.grant_api("/storage/thick", ["Datastore.AllocateSpace", "Datastore.Audit"])
    service: Service = await start_service(ASSIGN_STORAGE="thick")
    await service.installed()
    sse = await service.install()
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    copied = messages(sse, "VM creation > importing disk image")[-1]
    assert copied.startswith("[+] full clone of template 9000, "), copied
    assert "copied: storage thick (lvm) cannot make linked clones (" in copied
    clones = [c for c in sim.commands() if " qm clone 9000 " in c]
    assert len(clones) == 2 and all("--full 1" in c for c in clones), clones


async def test_templates_off_imports_every_install(start_service: Any) -> None:
    service: Service = await start_service(VM_TEMPLATES="0")
    await service.installed()
    await service.installed()
    commands = service.sim.commands()
    assert len(imports(commands)) == 2
    assert not any(" qm clone " in c or " qm template " in c for c in commands)
    assert all(vmid < 9000 for vmid in service.sim.vms())


async def cli(service: Service, tmp_path: Path, *argv: str) -> str:
    """`cairn <argv>` in-process against this service (in a thread: it blocks on HTTP)."""
    out, err = io.StringIO(), io.StringIO()
    port = service.url.rsplit(":", 1)[1]
    env = {"VM_PORT": port, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    code = await asyncio.to_thread(cli_common.main, cli_vm.register, list(argv), env, out, err)
    assert code == 0, err.getvalue()
    return out.getvalue()


async def test_a_new_image_builds_a_new_template_and_prune_keeps_what_clones_need(
    start_service: Any, driver: str, tmp_path: Path
) -> None:
    drivers.cli_only(
        driver,
        "the node's download-url refuses to overwrite the older image's file, which has the "
        "same name (so does an install without templates)",
    )
    service: Service = await start_service()
    first = await service.installed()  # builds template 9000, then clones it
    second = await service.installed()  # a linked clone of 9000
    # The distribution publishes a new image: its checksum changes.
    service.mirror.files.update(mirror_files(IMAGE_BYTES + b"refreshed"))
    refreshed = await service.install()
    assert refreshed.closed and refreshed.last["status"] == "success", refreshed.records[-3:]
    download = messages(refreshed, "OS preparation > downloading OS image")
    assert any("building it" in m for m in download), download
    assert download[-1].startswith("[+] template 9001 (debian 12, sha512 ")
    new_clone = refreshed.last["vm_id"]

    status, text = await service.get("/vm/templates")
    assert status == 200, text
    rows = {r["vmid"]: r for r in json.loads(text)}
    assert sorted(rows) == [9000, 9001]
    assert rows[9000]["checksum"] != rows[9001]["checksum"]
    assert rows[9000]["checksum"].startswith("sha512:")
    assert (rows[9000]["current"], rows[9000]["clones"]) == (False, [first, second])
    assert (rows[9001]["current"], rows[9001]["clones"]) == (True, [new_clone])
    assert rows[9001] == {**rows[9001], "node": "pve1", "os": "debian", "version": "12",
                          "state": "ready"}  # fmt: skip

    # The same through `cairn vm templates`.
    shown = await cli(service, tmp_path, "vm", "templates")
    header, *lines = shown.splitlines()
    assert header.split() == ["VMID", "NODE", "OS", "VERSION", "CHECKSUM", "STATE", "CLONES"]
    assert lines[0].split() == [
        "9000",
        "pve1",
        "debian",
        "12",
        rows[9000]["checksum"][:19],
        "ready",
        f"{first},",
        str(second),
    ]
    assert lines[1].split()[5:] == ["ready,", "current", str(new_clone)]

    status, text = await service.post("/vm/templates/prune")
    assert status == 200, text
    assert json.loads(text) == {
        "removed": [],
        "kept": [
            {"vmid": 9000, "reason": f"linked clones depend on it: {first}, {second}"},
            {"vmid": 9001, "reason": "installs clone it"},
        ],
    }
    assert service.sim.vm(9000) is not None
    for vmid in (first, second):
        assert await service.post(f"/vm/{vmid}/shutdown") == (200, "ok")
        assert await service.post(f"/vm/{vmid}/destroy") == (200, "ok")
    # The destroy of its last linked clone took the superseded template with it.
    assert service.sim.vm(9000) is None
    pruned = await cli(service, tmp_path, "vm", "templates", "--prune")
    assert pruned.splitlines() == ["removed: none", "kept 9001: installs clone it"]
    # The clone of the newer template runs on, untouched.
    vm = service.sim.vm(new_clone)
    assert vm is not None and vm.status == "running"
    status, text = await service.get("/vm/templates")
    assert [r["vmid"] for r in json.loads(text)] == [9001]


async def test_prune_checks_allow_ips(start_service: Any) -> None:
    service: Service = await start_service(ALLOW_IPS="192.0.2.1")
    assert await service.post("/vm/templates/prune") == (
        403,
        "this IP is not allowed to perform this action (client address 127.0.0.1)",
    )
    status, text = await service.get("/vm/templates")  # a read: never checked
    assert (status, text) == (200, "[]")


async def destroy_records(service: Service, vmid: int) -> list[str]:
    assert await service.post(f"/vm/{vmid}/shutdown") == (200, "ok")
    assert await service.post(f"/vm/{vmid}/destroy") == (200, "ok")
    async with service.session.get(f"{service.api}/vm/{vmid}/task") as resp:
        sse = await read_sse(resp)
    assert sse.closed and sse.last["status"] == "success", sse.records
    return [r["message"] for r in sse.records]


async def test_the_last_clone_of_a_superseded_template_takes_it_along(
    start_service: Any,
) -> None:
    """Both drivers: a template installs still clone stays when its last clone goes; one a
    newer template replaced goes with its last clone, and the destroy's stream says so."""
    service: Service = await start_service()
    first = await service.installed()  # builds template 9000, then clones it
    second = await service.installed()
    said = await destroy_records(service, second)
    assert not any("template" in m for m in said), said
    assert service.sim.vm(9000) is not None  # installs clone it: kept
    # A newer template of debian 12 (an admin's copy, as a refresh would build it): installs
    # clone it from now on, and 9000 serves only its clone.
    newer = "cairn template: debian 12 sha512:" + "ab" * 64
    store = service.sim.store
    r = run(store, "qm", "clone", "9000", "9001", "--full", "1", "--name", "cairn-debian-12",
            "--description", "created by cairn, install task admin\n" + newer)  # fmt: skip
    assert r.code == 0, r.err
    assert run(store, "qm", "template", "9001").code == 0
    status, text = await service.get("/vm/templates")
    assert status == 200, text
    rows = {row["vmid"]: row for row in json.loads(text)}
    assert (rows[9000]["current"], rows[9000]["clones"]) == (False, [first])
    assert rows[9001]["current"] is True

    said = await destroy_records(service, first)
    removed = [m for m in said if "template 9000" in m]
    assert len(removed) == 1 and removed[0].startswith(
        "[*] template 9000 (debian 12) removed from pve1: its last linked clone is gone and "
        "installs clone a newer image's template ("
    ), said
    assert said[-1].startswith("[+] VM destroyed ("), said
    assert service.sim.vm(9000) is None
    assert service.sim.vm(9001) is not None


def written(sim: SimCluster) -> dict[str, int]:
    """Bytes each node's storages wrote for VM disks so far (imports, copies, migrations in)."""
    with sim.store.locked() as txn:
        return {n: int(v) for n, v in txn.cluster.get("written", {}).items()}


async def test_an_install_on_another_node_is_cloned_there(start_service: Any, driver: str) -> None:
    """Both drivers clone on the node the install names, and migrate nothing. The CLI
    driver (whose image is on the main node) copies the main node's template there once."""
    service: Service = await start_service()
    sim = service.sim
    first = await service.install(node="pve2")
    assert first.closed and first.last["status"] == "success", first.records[-3:]
    assert "VM initialization > migrating VM" in first.steps
    download = messages(first, "OS preparation > downloading OS image")
    tid = 9001 if driver == "cli" else 9000
    if driver == "cli":  # the main node's template first, then its copy on pve2
        assert any("copying template 9000 there" in m for m in download), download
        copied = [m for m in download if m.startswith("[*] template 9001 (debian 12, sha512 ")]
        assert copied and " copied to pve2 (" in copied[0], download
    assert download[-1].startswith(f"[+] template {tid} (debian 12, sha512 "), download
    assert " ready on pve2 (" in download[-1]
    moved = messages(first, "VM initialization > migrating VM")
    assert moved[-1].startswith("[+] created on pve2 directly: nothing to migrate ("), moved
    vmid = first.last["vm_id"]
    vm = sim.vm(vmid)
    assert vm is not None and vm.node == "pve2" and vm.status == "running"
    tpl = sim.vm(tid)
    assert tpl is not None and tpl.node == "pve2" and str(tpl.config["template"]) == "1"
    assert not any(f"qm migrate {vmid} " in c for c in sim.commands())

    seen, before = len(sim.commands()), written(sim)
    second = await service.installed(node="pve2")
    later = sim.commands()[seen:]
    assert any(c.startswith(f"pve2 qm clone {tid} {second} ") for c in later), later
    assert not any("qm migrate" in c for c in later), later
    assert imports(later) == []
    assert written(sim) == before  # a linked clone on its node: nothing copied
    vm = sim.vm(second)
    assert vm is not None and vm.node == "pve2"
    assert vm.config["scsi0"].startswith(f"local-lvm:vm-{second}-disk-0")


async def test_on_shared_storage_one_template_serves_every_node(
    sim: SimCluster, start_service: Any, driver: str
) -> None:
    drivers.cli_only(driver, "the API driver builds each node's template from its own download")
    sim.add_storage("shared-vm", "nfs", content="images", shared=True)
    service: Service = await start_service(ASSIGN_STORAGE="shared-vm")
    await service.installed()  # builds template 9000 on pve1
    seen = len(sim.commands())
    vmid = await service.installed(node="pve2")
    later = sim.commands()[seen:]
    clones = [c for c in later if c.startswith(f"pve1 qm clone 9000 {vmid} ")]
    assert clones and "--target pve2" in clones[0], later
    assert not any("qm migrate" in c or "qm template" in c for c in later), later
    vm = sim.vm(vmid)
    assert vm is not None and vm.node == "pve2" and vm.status == "running"
    assert [t for t in sim.vms() if t >= 9000] == [9000]


async def test_a_storage_an_admin_marked_shared_serves_every_node_from_one_template(
    sim: SimCluster, start_service: Any, driver: str
) -> None:
    """Proxmox's `shared` flag decides, not the type: an LVM group on a SAN LUN that every node
    sees (`pvesm set san --shared 1`) gets no per-node template copy; the install on pve2 is a
    full clone (thick LVM makes no linked ones) straight onto pve2."""
    drivers.cli_only(driver, "the API driver builds each node's template from its own download")
    sim.add_storage("san", "lvm", content="images", shared=True)
    service: Service = await start_service(ASSIGN_STORAGE="san")
    await service.installed()  # builds template 9000 on pve1
    seen = len(sim.commands())
    sse = await service.install(node="pve2")
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    checked = messages(sse, "preparation > checking storage pool")[-1]
    assert checked.startswith("[+] storage pool san (lvm, shared) is available ("), checked
    download = messages(sse, "OS preparation > downloading OS image")
    assert not any("copying template" in m for m in download), download
    assert download[-1].startswith("[+] template 9000 (debian 12, sha512 "), download
    later = sim.commands()[seen:]
    clones = [c for c in later if c.startswith(f"pve1 qm clone 9000 {sse.last['vm_id']} ")]
    assert clones and "--target pve2" in clones[0] and "--full 1" in clones[0], later
    assert not any("qm migrate" in c or "qm template" in c for c in later), later
    vm = sim.vm(sse.last["vm_id"])
    assert vm is not None and vm.node == "pve2" and vm.status == "running"
    assert [t for t in sim.vms() if t >= 9000] == [9000]
