"""`cairn pve bootstrap` (the pveum commands, pinned) and `cairn pve check` against the
simulated pveproxy: what works, and what is missing, per operation."""

from __future__ import annotations

import argparse
import asyncio

import pytest
from pvesim.cluster import SimCluster

from actors.vm.pveapi import errors
from actors.vm.pveapi.privileges import Layout, bootstrap, roles
from gateway.cli.pve import check, run_bootstrap
from gateway.main import main

from .conftest import client_for
from .test_pveproxy import create

VM = (
    "VM.Allocate,VM.Audit,VM.Config.CPU,VM.Config.Memory,VM.Config.Disk,VM.Config.CDROM,"
    "VM.Config.Cloudinit,VM.Config.Network,VM.Config.HWType,VM.Config.Options,VM.PowerMgmt,"
    "VM.Migrate,VM.Snapshot,VM.Clone"
)


def test_bootstrap_for_pve_8_4() -> None:
    assert bootstrap(Layout()) == [
        "pveum user add cairn@pve --comment 'cairn VM service'",
        f"pveum role add CairnVM --privs {VM}",
        "pveum role add CairnConsole --privs VM.Console",
        "pveum role add CairnDisk --privs Datastore.AllocateSpace,Datastore.Audit",
        "pveum role add CairnImage --privs "
        "Datastore.AllocateTemplate,Datastore.AllocateSpace,Datastore.Audit",
        "pveum role add CairnNode --privs Sys.Audit,Sys.AccessNetwork",
        "pveum role add CairnNet --privs SDN.Use",
        "pveum user token add cairn@pve driver --privsep 1 --comment 'cairn API driver'   "
        "# prints the secret ONCE: keep it for PVE_API_TOKEN",
        "pveum acl modify /vms --users cairn@pve --roles CairnVM",
        "pveum acl modify /vms --tokens 'cairn@pve!driver' --roles CairnVM",
        "for id in $(seq 100 254); do",
        "  pveum acl modify /vms/$id --users cairn@pve --roles CairnConsole",
        "  pveum acl modify /vms/$id --tokens 'cairn@pve!driver' --roles CairnConsole",
        "done",
        "pveum acl modify /storage/local-lvm --users cairn@pve --roles CairnDisk",
        "pveum acl modify /storage/local-lvm --tokens 'cairn@pve!driver' --roles CairnDisk",
        "pveum acl modify /storage/local --users cairn@pve --roles CairnImage",
        "pveum acl modify /storage/local --tokens 'cairn@pve!driver' --roles CairnImage",
        "pveum acl modify /nodes --users cairn@pve --roles CairnNode",
        "pveum acl modify /nodes --tokens 'cairn@pve!driver' --roles CairnNode",
        "pveum acl modify /sdn/zones/localnetwork --users cairn@pve --roles CairnNet",
        "pveum acl modify /sdn/zones/localnetwork --tokens 'cairn@pve!driver' --roles CairnNet",
        "pveum user token permissions cairn@pve driver",
    ]


def test_bootstrap_by_version_and_pool() -> None:
    old = {r.name: r for r in roles(Layout(release="7.4"))}
    assert "CairnNet" not in old  # no SDN.Use before PVE 8.0: `pveum role add` would refuse it
    assert (old["CairnNode"].privs, old["CairnNode"].paths) == (("Sys.Audit", "Sys.Modify"), ("/",))
    pooled = bootstrap(Layout(pool="cairn"))
    assert "pveum pool add cairn --comment 'VMs cairn manages'" in pooled
    assert "pveum acl modify /pool/cairn --users cairn@pve --roles CairnVM" in pooled
    assert f"pveum role add CairnVM --privs {VM},VM.Console" in pooled  # the pool's VMs only
    assert not any(" /vms" in line or "CairnConsole" in line for line in pooled)


def test_without_a_pool_vm_console_is_granted_on_cairns_ids_only() -> None:
    """VM.Console on /vms gave the token every VM's serial line (a login or a root prompt),
    a GUI-made VM's included: only cairn's ids get it."""
    narrowed = {r.name: r for r in roles(Layout(vm_ids=(120, 129)))}
    assert "VM.Console" not in narrowed["CairnVM"].privs
    assert narrowed["CairnVM"].paths == ("/vms",)
    assert narrowed["CairnConsole"].privs == ("VM.Console",)
    assert narrowed["CairnConsole"].paths == tuple(f"/vms/{i}" for i in range(120, 130))


def test_the_bootstrap_command_takes_cairns_ids(capsys: pytest.CaptureFixture[str]) -> None:
    env = {"ASSIGN_IP_START": "150", "ASSIGN_IP_END": "199"}
    args = argparse.Namespace(
        release="8.4",
        user="cairn@pve",
        token="driver",
        pool=None,
        storage=None,
        import_storage=None,
        bridge=None,
    )
    assert run_bootstrap(args, env) == 0
    assert "for id in $(seq 150 199); do" in capsys.readouterr().out


def test_the_bootstrap_command_prints_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pve", "bootstrap", "--release", "9.1", "--storage", "local-zfs"]) == 0
    out = capsys.readouterr().out
    assert "pveum acl modify /storage/local-zfs --users cairn@pve --roles CairnDisk" in out
    assert "PVE_API_FINGERPRINT=" in out


def _args() -> argparse.Namespace:
    return argparse.Namespace(storage=None, import_storage=None, bridge=None, pool=None)


async def test_check_with_the_bootstrapped_token_says_ok_to_everything(sim: SimCluster) -> None:
    env = {**sim.api_env(), "ASSIGN_STORAGE": "local-lvm", "MAIN_NODE": "pve1"}
    lines = await check(env, None, _args())
    assert not [line for line in lines if not line.startswith("ok   ")], lines
    assert lines[0].startswith("ok   connect: Proxmox VE 8.4.1 at https://127.0.0.1:")
    assert "ok   serial console" in lines
    assert "ok   storage local on pve1 (import)" in lines


async def test_check_names_what_is_missing(sim: SimCluster) -> None:
    sim.revoke_api("/vms", ["VM.Migrate", "VM.Clone"])
    sim.revoke_api("/sdn/zones/localnetwork", ["SDN.Use"])
    sim.set_api_version("8.2")
    env = {**sim.api_env(), "ASSIGN_STORAGE": "local-lvm", "PVE_IMPORT_STORAGE": "local-lvm"}
    lines = await check(env, "pve2", _args())
    failed = [line for line in lines if line.startswith("FAIL")]
    assert failed == [
        "FAIL install: image storage: the token lacks Datastore.AllocateTemplate on "
        "/storage/local-lvm",
        "FAIL migrate: the token lacks VM.Migrate on /vms",
        "FAIL install: network: the token lacks SDN.Use on /sdn/zones/localnetwork/vmbr0",
        "FAIL install from a cloud image: PVE 8.2 cannot import a downloaded image for a token "
        "(needs 8.4: download-url into 'import' content); use PVE_DRIVER=cli for installs on "
        "this cluster, or upgrade",
        "FAIL storage local-lvm on pve2: no 'import' content (has images,rootdir); "
        "`pvesm set local-lvm --content images,rootdir,import`",
    ]
    # Without VM.Clone installs fall back to an import: said, but not a failure.
    assert [line for line in lines if line.startswith("WARN")] == [
        "WARN install: clone a template: the token lacks VM.Clone on /vms: installs import the "
        "image each time instead (slower, nothing fails)"
    ]


async def test_check_exits_0_when_only_a_fallback_is_missing(
    sim: SimCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sim.revoke_api("/vms", ["VM.Clone"])
    env = {**sim.api_env(), "ASSIGN_STORAGE": "local-lvm", "MAIN_NODE": "pve1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert await asyncio.to_thread(main, ["pve", "check"]) == 0
    out = capsys.readouterr().out
    assert "WARN install: clone a template: the token lacks VM.Clone on /vms" in out
    assert "FAIL" not in out


async def test_check_refuses_a_wrong_fingerprint(sim: SimCluster) -> None:
    env = {**sim.api_env(), "PVE_API_FINGERPRINT": "00" * 32}
    lines = await check(env, None, _args())
    assert len(lines) == 1 and lines[0].startswith("FAIL connect: refused to talk to https://")


def _bootstrapped(layout: Layout) -> dict[str, list[str]]:
    """The ACL `cairn pve bootstrap` gives its token: every role's privileges on its paths."""
    acl: dict[str, list[str]] = {}
    for role in roles(layout):
        for path in role.paths:
            acl[path] = sorted({*acl.get(path, []), *role.privs})
    return acl


@pytest.mark.parametrize("nic", ["virtio,bridge=vmbr1", "virtio,bridge=vmbr2,tag=20"])
async def test_the_bootstrapped_token_may_use_any_local_bridge(sim: SimCluster, nic: str) -> None:
    """An install may name any bridge (and VLAN), not only VM_BRIDGE: PVE checks SDN.Use on
    /sdn/zones/localnetwork/<bridge>[/<vlan>], which the bootstrap's grant on the zone covers."""
    secret = sim.add_api_token("cairn@pve!boot", _bootstrapped(Layout()))
    client = client_for(sim, token=f"cairn@pve!boot={secret}")
    try:
        assert await create(client, "pve1", 140, net0=nic) == "OK"
    finally:
        await client.close()
    vm = sim.vm(140)
    assert vm is not None and str(vm.config["net0"]).endswith(nic.removeprefix("virtio"))


async def test_a_grant_on_one_bridge_only_is_refused_on_another(sim: SimCluster) -> None:
    """What the bootstrap granted before: SDN.Use on VM_BRIDGE's path alone."""
    acl = _bootstrapped(Layout())
    acl["/sdn/zones/localnetwork/vmbr0"] = acl.pop("/sdn/zones/localnetwork")
    secret = sim.add_api_token("cairn@pve!narrow", acl)
    client = client_for(sim, token=f"cairn@pve!narrow={secret}")
    try:
        with pytest.raises(errors.PermissionDenied) as caught:
            await create(client, "pve1", 141, net0="virtio,bridge=vmbr1,tag=20")
        assert await create(client, "pve1", 142, net0="virtio,bridge=vmbr0,tag=20") == "OK"
    finally:
        await client.close()
    assert "lacks SDN.Use on /sdn/zones/localnetwork/vmbr1/20" in caught.value.text
    assert sim.vm(141) is None
