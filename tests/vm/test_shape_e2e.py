"""Guests shaped by the caller, end to end with both drivers: what the simulated node's VM
config holds, the first-boot script's output and failure, and every bad field refused before
anything is built."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pvesim.cluster import SimCluster

from tests.conftest import wait_for
from tests.vm import drivers
from tests.vm.conftest import Service

driver = drivers.driver
start_service = drivers.start_service

STAGE = "VM initialization > SSH initialization"


def clean(sim: SimCluster, vmid: int) -> bool:
    return sim.vm(vmid) is None and not any(
        f"vm-{vmid}-" in v for node in ("pve1", "pve2", "pve3") for v in sim.volumes(node)
    )


async def test_the_vm_config_holds_every_field_asked_for(
    sim: SimCluster, start_service: Any
) -> None:
    sim.add_bridge("vmbr1", mtu=9000)
    service: Service = await start_service()
    sse = await service.install(
        id=130, bridge="vmbr1", vlan=20, mtu=9000, nameserver="10.0.0.53 2001:db8::53",
        searchdomain="example.org lab.example.org", tags=["web", "prod"],
        description="nginx front\nowner: ops", disks=[{"size": "32G", "storage": "local-lvm"}],
    )  # fmt: skip
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    vm = sim.vm(130)
    assert vm is not None and vm.status == "running"
    net0 = str(vm.config["net0"])
    assert net0.startswith("virtio=") and net0.endswith(",bridge=vmbr1,tag=20,mtu=9000")
    # A new volume of its own (numbered by whichever disk was allocated first).
    assert re.fullmatch(r"local-lvm:vm-130-disk-[01],size=32G", str(vm.config["scsi1"]))
    assert vm.config["scsi1"] != vm.config["scsi0"]
    assert vm.config["nameserver"] == "10.0.0.53 2001:db8::53"
    assert vm.config["searchdomain"] == "example.org lab.example.org"
    assert vm.config["tags"] == "debian;web;prod"
    description = str(vm.config["description"])
    assert description.startswith("nginx front\nowner: ops\ncreated by cairn, install task ")
    # Still cairn's: destroy checks the mark under the notes.
    assert await service.post("/vm/130/stop") == (200, "ok")
    assert await service.post("/vm/130/destroy") == (200, "ok")
    assert clean(sim, 130)


async def test_omitted_fields_leave_the_vm_as_before(sim: SimCluster, start_service: Any) -> None:
    service: Service = await start_service()
    await service.installed(id=131)
    vm = sim.vm(131)
    assert vm is not None
    assert str(vm.config["net0"]).endswith(",bridge=vmbr0")
    assert vm.config["tags"] == "debian"
    assert "scsi1" not in vm.config and "nameserver" not in vm.config
    assert str(vm.config["description"]).startswith("created by cairn, install task ")


def in_stage(sse: Any) -> list[str]:
    return [r["message"] for r in sse.records if r["step"] == STAGE]


async def test_the_script_runs_after_the_init_script_and_its_output_reaches_the_stream(
    sim: SimCluster, start_service: Any, tmp_path: Path
) -> None:
    service: Service = await start_service()
    script = "SECRET=kept-nowhere-4f2a\necho hello from the script\necho careful >&2\n"
    sse = await service.install(id=132, script=script, packages=["nginx", "curl"])
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    said = in_stage(sse)
    assert any(m.startswith("[*] script: hello from the script (") for m in said), said
    assert any(m.startswith("[*] script: careful (") for m in said), said
    assert any(m.startswith("[*] the script ended with status 0 (") for m in said), said
    runs = sim.guest_runs(132)
    scripts = [r for r in runs if r.command == "sudo -n bash -s"]
    # cairn's init script first, ending with the packages, then the caller's, as it was given.
    assert len(scripts) == 2 and scripts[1].stdin == script
    assert "\ninstall_pkg nginx curl\n" in scripts[0].stdin
    # On stdin only: on no command line, in no stored event.
    assert not any("kept-nowhere-4f2a" in r.command for r in runs)
    assert not any("kept-nowhere-4f2a" in c for c in sim.commands())
    assert b"kept-nowhere-4f2a" not in stored_bytes(tmp_path)


def stored_bytes(tmp_path: Path) -> bytes:
    """Every byte the service's event store and NATS store hold."""
    return b"".join(p.read_bytes() for p in (tmp_path / "data").rglob("*") if p.is_file())


async def test_a_failing_script_fails_the_install_and_leaves_nothing(
    sim: SimCluster, start_service: Any
) -> None:
    service: Service = await start_service()
    sse = await service.install(id=133, script="echo about to fail\nexit 3\n")
    assert sse.closed
    assert (sse.last["step"], sse.last["status"]) == (STAGE, "error")
    assert sse.last["message"].startswith("[-] the script exited with status 3 (")
    assert any(m.startswith("[*] script: about to fail (") for m in in_stage(sse))
    assert clean(sim, 133)
    assert await service.get("/vm/133/status") == (404, "VM 133 not found")


async def test_a_failing_script_keeps_the_vm_when_asked(
    sim: SimCluster, start_service: Any
) -> None:
    service: Service = await start_service()
    sse = await service.install(id=134, script="exit 7\n", script_failure="keep")
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    assert any(
        m.startswith("[*] the script exited with status 7; the VM is kept (script_failure: keep)")
        for m in in_stage(sse)
    )
    assert await service.get("/vm/134/status") == (200, "running")


BAD: list[tuple[dict[str, Any], str]] = [
    # the script
    ({"script": ""}, "script: must not be empty"),
    ({"script": 42}, "script: must be a string"),
    ({"script": "x" * 65537}, "script: at most 65536 bytes"),
    ({"script": "echo a\0b"}, "script: must not contain NUL characters"),
    ({"script": "true", "script_failure": "ignore"}, "script_failure: must be remove or keep"),
    ({"script_failure": "keep"}, "script_failure: only with a script"),
    # packages: option and shell injection, sizes
    ({"packages": "nginx"}, "packages: must be a list of package names"),
    (
        {"packages": ["-o", "APT::Get::AllowUnauthenticated=1"]},
        "packages: invalid package name '-o'",
    ),
    ({"packages": ["nginx; rm -rf /"]}, "packages: invalid package name 'nginx; rm -rf /'"),
    ({"packages": ["$(id)"]}, "packages: invalid package name '$(id)'"),
    ({"packages": ["a\nb"]}, "packages: invalid package name 'a\\nb'"),
    ({"packages": ["x" * 101]}, "packages: invalid package name"),
    ({"packages": [f"p{i}" for i in range(65)]}, "packages: at most 64"),
    # the NIC: property-string injection and ranges
    ({"bridge": "vmbr0,tag=5"}, "bridge: must be a bridge name"),
    ({"bridge": "vmbr0\nx"}, "bridge: must be a bridge name"),
    ({"bridge": "b" * 16}, "bridge: must be a bridge name"),
    ({"vlan": 0}, "vlan: must be a whole number between 1 and 4094"),
    ({"vlan": 4095}, "vlan: must be a whole number between 1 and 4094"),
    ({"vlan": "20"}, "vlan: must be a whole number between 1 and 4094"),
    ({"vlan": True}, "vlan: must be a whole number between 1 and 4094"),
    ({"mtu": 100}, "mtu: must be a whole number between 576 and 65520"),
    ({"mtu": 10**12}, "mtu: must be a whole number between 576 and 65520"),
    # DNS
    ({"nameserver": "1.1.1.1,8.8.8.8"}, "nameserver: '1.1.1.1,8.8.8.8' is not an IP address"),
    ({"nameserver": "1.1.1.1\nsearch evil"}, "nameserver: "),
    ({"nameserver": "1.1.1.1 1.0.0.1 8.8.8.8 8.8.4.4"}, "nameserver: 1 to 3 IP addresses"),
    ({"searchdomain": "a.org,b.org"}, "searchdomain: 1 to 6 DNS domains separated by spaces"),
    ({"searchdomain": "x" * 300}, "searchdomain: 1 to 6 DNS domains"),
    # extra disks
    ({"disks": {"size": "32G"}}, "disks: must be a list of disks"),
    ({"disks": [{"size": "32G"}] * 5}, "disks: at most 4 extra disks"),
    ({"disks": [{"size": "32"}]}, "disks[0].size: must be a whole number followed by G, like 32G"),
    ({"disks": [{"size": "0G"}]}, "disks[0].size: must be between 1G and 65536G"),
    ({"disks": [{"size": "999999G"}]}, "disks[0].size: must be between 1G and 65536G"),
    ({"disks": [{"size": "8G", "storage": "local-lvm,backup=0"}]}, "disks[0].storage: must be"),
    ({"disks": [{"size": "8G", "storage": "local-lvm:vm-100-disk-0"}]}, "disks[0].storage"),
    ({"disks": [{"size": "8G", "file": "/etc/shadow"}]}, "disks[0]: unknown field 'file'"),
    ({"disks": ["8G"]}, "disks[0]: must be an object"),
    # tags and notes
    ({"tags": "web"}, "tags: must be a list of tags"),
    ({"tags": ["web;prod"]}, "tags: invalid tag 'web;prod'"),
    ({"tags": ["-x"]}, "tags: invalid tag '-x'"),
    ({"tags": ["a b"]}, "tags: invalid tag 'a b'"),
    ({"tags": ["t" * 65]}, "tags: invalid tag"),
    ({"tags": [f"t{i}" for i in range(17)]}, "tags: at most 16"),
    ({"description": "x" * 4097}, "description: at most 4096 characters"),
    ({"description": "a\rb"}, "description: must not contain NUL or carriage return characters"),
    (
        {"description": "mine\ncreated by cairn, install task 0123abcd"},
        "description: must not contain cairn's mark ('created by cairn, install task ...')",
    ),
]


async def test_bad_fields_are_refused_with_their_message_and_nothing_is_built(
    sim: SimCluster, start_service: Any
) -> None:
    service: Service = await start_service()
    for extra, message in BAD:
        status, text = await service.post(
            "/vm/install", {"os": "debian", "version": "12", "id": 140, **extra}
        )
        assert (status, text[: len(message)]) == (400, message), (extra, text)
    assert not any(" qm create " in f" {c} " for c in sim.commands())
    assert sim.vm(140) is None


async def test_the_node_is_checked_before_anything_is_built(
    sim: SimCluster, start_service: Any
) -> None:
    sim.add_bridge("vmbr1", ("pve2",))
    service: Service = await start_service()
    asked = {"os": "debian", "version": "12", "id": 141}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"bridge": "vmbr9"}, "bridge: node pve1 has no bridge 'vmbr9'; its bridges: vmbr0"),
        ({"bridge": "vmbr1"}, "bridge: node pve1 has no bridge 'vmbr1'; its bridges: vmbr0"),
        (
            {"bridge": "vmbr9", "node": "pve2"},
            "bridge: node pve2 has no bridge 'vmbr9'; its bridges: vmbr0, vmbr1",
        ),
        ({"mtu": 9000}, "mtu: 9000 is larger than the MTU of bridge vmbr0 on node pve1 (1500)"),
        (
            {"disks": [{"size": "8G", "storage": "nowhere"}]},
            "disks[0].storage: node pve1 has no active storage 'nowhere' for VM disks; its "
            "storages for VM disks: local-lvm",
        ),
    ]
    for extra, message in cases:
        assert await service.post("/vm/install", {**asked, **extra}) == (400, message)
    assert not any(" qm create " in f" {c} " for c in sim.commands())
    assert await service.get("/vm/141/status") == (404, "VM 141 not found")


async def test_tags_and_notes_change_in_any_state_and_the_mark_stays(
    sim: SimCluster, start_service: Any
) -> None:
    service: Service = await start_service()
    vmid = await service.installed(id=150, tags=["web"], description="first")
    assert await service.post(f"/vm/{vmid}/set/tags", {"tags": ["db", "prod"]}) == (200, "ok")
    assert sim.vm(vmid).config["tags"] == "debian;db;prod"  # type: ignore[union-attr]
    said = "second\nline two"
    assert await service.post(f"/vm/{vmid}/set/description", {"description": said}) == (
        200,
        "ok",
    )
    notes = str(sim.vm(vmid).config["description"])  # type: ignore[union-attr]
    assert notes.startswith("second\nline two\ncreated by cairn, install task ")
    assert await service.get(f"/vm/{vmid}/status") == (200, "running")
    assert await service.post(f"/vm/{vmid}/stop") == (200, "ok")
    assert await service.post(f"/vm/{vmid}/set/description", {"description": ""}) == (200, "ok")
    notes = str(sim.vm(vmid).config["description"])  # type: ignore[union-attr]
    assert notes.startswith("created by cairn, install task ")
    # Still cairn's VM: the mark survived every change.
    assert await service.post(f"/vm/{vmid}/destroy") == (200, "ok")
    assert clean(sim, vmid)


async def test_the_network_changes_only_while_stopped_and_only_to_a_bridge_the_node_has(
    sim: SimCluster, start_service: Any, driver: str
) -> None:
    sim.add_bridge("vmbr1", mtu=9000)
    service: Service = await start_service()
    vmid = await service.installed(id=151, vlan=10)
    mac = str(sim.vm(vmid).config["net0"]).split(",")[0]  # type: ignore[union-attr]
    change = {"bridge": "vmbr1", "vlan": 20, "mtu": 9000}
    assert await service.post(f"/vm/{vmid}/set/network", change) == (409, "VM is running")
    assert await service.post(f"/vm/{vmid}/stop") == (200, "ok")
    assert await service.post(f"/vm/{vmid}/set/network", {"bridge": "vmbr7"}) == (
        400,
        "bridge: node pve1 has no bridge 'vmbr7'; its bridges: vmbr0, vmbr1",
    )
    assert await service.post(f"/vm/{vmid}/set/network", {"mtu": 9000}) == (
        400,
        "mtu: 9000 is larger than the MTU of bridge vmbr0 on node pve1 (1500)",
    )
    assert await service.post(f"/vm/{vmid}/set/network", change) == (200, "ok")
    net0 = sim.vm(vmid).config["net0"]  # type: ignore[union-attr]
    assert net0 == f"{mac},bridge=vmbr1,tag=20,mtu=9000"  # the same MAC: the same NIC
    assert await service.post(f"/vm/{vmid}/set/network", {"vlan": None}) == (200, "ok")
    assert sim.vm(vmid).config["net0"] == f"{mac},bridge=vmbr1,mtu=9000"  # type: ignore[union-attr]
    started = await service.post_sse(f"/vm/{vmid}/start")
    assert started.last["status"] == "success", started.records[-2:]


SET_BAD: list[tuple[str, Any, str]] = [
    ("tags", {"tags": ["a;b"]}, "tags: invalid tag 'a;b'"),
    ("tags", {"tags": "a"}, "tags: must be a list of tags"),
    ("tags", {}, "tags: is required"),
    ("tags", {"tags": [], "x": 1}, "'x': unknown field; set/tags takes tags"),
    ("description", {"description": 5}, "description: must be a string"),
    ("description", {"description": "y" * 4097}, "description: at most 4096 characters"),
    (
        "description",
        {"description": "created by cairn, install task ffff"},
        "description: must not contain cairn's mark",
    ),
    ("network", {}, "body: give at least one of bridge, vlan, mtu"),
    ("network", [], "body: must be a JSON object"),
    ("network", {"bridge": "vmbr0,firewall=0"}, "bridge: must be a bridge name"),
    ("network", {"bridge": None}, "bridge: must be a bridge name (a NIC needs one)"),
    ("network", {"vlan": 5000}, "vlan: must be a whole number between 1 and 4094"),
    ("network", {"mtu": "9000"}, "mtu: must be a whole number between 576 and 65520"),
    ("network", {"model": "e1000"}, "'model': unknown field; set/network takes bridge, vlan, mtu"),
]


async def test_bad_changes_are_refused_and_change_nothing(
    sim: SimCluster, start_service: Any
) -> None:
    service: Service = await start_service()
    vmid = await service.stopped(id=152)
    before = dict(sim.vm(vmid).config)  # type: ignore[union-attr]
    for what, body, message in SET_BAD:
        status, text = await service.post(f"/vm/{vmid}/set/{what}", body)
        assert (status, text[: len(message)]) == (400, message), (what, body, text)
    assert sim.vm(vmid).config == before  # type: ignore[union-attr]
    assert await service.post("/vm/999/set/tags", {"tags": []}) == (404, "VM 999 not found")


async def test_the_list_and_the_vm_page_show_tags_notes_network_and_disks(
    sim: SimCluster, start_service: Any
) -> None:
    service: Service = await start_service()
    vmid = await service.installed(
        id=160, tags=["web"], description="front", vlan=5, nameserver="10.0.0.53",
        disks=[{"size": "8G"}],
    )  # fmt: skip

    async def tagged() -> bool:
        listing = await service.list()
        return any(r["vmid"] == vmid and r["tags"] == ["debian", "web"] for r in listing["list"])

    await wait_for(tagged, what="the list to show the VM's tags")
    status, text = await service.get(f"/vm/{vmid}")
    assert status == 200
    guest = json.loads(text)["guest"]
    assert guest["tags"] == ["debian", "web"] and guest["notes"] == "front"
    assert guest["network"] == {"bridge": "vmbr0", "vlan": 5, "mtu": None}
    assert (guest["nameserver"], guest["searchdomain"]) == ("10.0.0.53", None)
    assert [(d["slot"], d["size"]) for d in guest["disks"]] == [("scsi0", "16G"), ("scsi1", "8G")]
