"""The cloud-init data the simulator generates, as qemu-server's Cloudinit.pm writes it (golden),
`qm cloudinit dump` and the API's cloudinit/dump (which needs VM.Audit)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pvesim import cloudinit
from pvesim.cluster import SimCluster
from pvesim.state import Store

from actors.vm.pveapi import errors
from tests.pveapi.conftest import client_for

from .helpers import ED25519_PUB, installed_vm, new_store, run

HASHED = "$6$abcdefghijklmnop$Z9x"
# A real `qm config`'s cloud-init keys, as Proxmox writes them.
CONF = {
    "name": "web-120",
    "ciuser": "deploy",
    "cipassword": HASHED,
    "ciupgrade": 0,
    "sshkeys": "ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIExample%20root%40pve1%0A",
    "net0": "virtio=BC:24:11:5E:9A:01,bridge=vmbr0",
    "ipconfig0": "ip=192.168.0.120/24,gw=192.168.0.1",
    "nameserver": "192.168.0.1",
}


def test_user_data_as_cloudinit_userdata_writes_it() -> None:
    assert cloudinit.userdata(CONF, 120) == (
        "#cloud-config\n"
        "hostname: web-120\n"
        "manage_etc_hosts: true\n"
        "fqdn: web-120\n"
        "user: deploy\n"
        f"password: {HASHED}\n"
        "ssh_authorized_keys:\n"
        "  - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample root@pve1\n"
        "chpasswd:\n"
        "  expire: False\n"
        "users:\n"
        "  - default\n"
    )
    assert cloudinit.login(cloudinit.userdata(CONF, 120)) == ("deploy", HASHED)
    # No ciuser: the image's default user gets the password; upgrades on unless ciupgrade 0.
    bare = cloudinit.userdata({"cipassword": HASHED}, 121)
    assert bare.startswith("#cloud-config\nhostname: VM121\n")
    assert "user:" not in bare.replace("users:", "") and bare.endswith("package_upgrade: true\n")
    assert cloudinit.login(bare) == (None, HASHED)
    root = cloudinit.userdata({"ciuser": "root", "searchdomain": "lan"}, 122)
    assert "fqdn: VM122.lan\nuser: root\ndisable_root: False\n" in root
    assert "users:" not in root


def test_network_config_matches_the_reference_sample() -> None:
    # What `qm cloudinit dump <id> network` prints for a static address on Proxmox.
    assert cloudinit.network(CONF) == (
        "version: 1\n"
        "config:\n"
        "    - type: physical\n"
        "      name: eth0\n"
        "      mac_address: 'bc:24:11:5e:9a:01'\n"
        "      subnets:\n"
        "      - type: static\n"
        "        address: '192.168.0.120'\n"
        "        netmask: '255.255.255.0'\n"
        "        gateway: '192.168.0.1'\n"
        "    - type: nameserver\n"
        "      address:\n"
        "      - '192.168.0.1'\n"
    )
    wide = cloudinit.network({**CONF, "ipconfig0": "ip=10.1.2.120/16,gw=10.1.2.1"})
    assert "        netmask: '255.255.0.0'\n" in wide
    # No nameserver in the config: the node's resolv.conf.
    assert cloudinit.network({k: v for k, v in CONF.items() if k != "nameserver"}).endswith(
        "    - type: nameserver\n      address:\n      - '127.0.0.1'\n"
    )


def test_meta_data_is_the_sha1_of_user_and_network_data() -> None:
    both = cloudinit.userdata(CONF, 120) + cloudinit.network(CONF)
    expected = hashlib.sha1(both.encode()).hexdigest()
    assert cloudinit.metadata(CONF, 120) == f"instance-id: {expected}\n"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return new_store(tmp_path / "pve")


def test_qm_cloudinit_dump(store: Store, tmp_path: Path) -> None:
    installed_vm(store, tmp_path, 120)
    assert run(store, "qm", "set", "120", "--cipassword", HASHED, "--ciuser", "deploy").code == 0
    user = run(store, "qm", "cloudinit", "dump", "120", "user")
    assert user.code == 0 and user.out.endswith("users:\n  - default\n\n")  # print "$data\n"
    assert f"password: {HASHED}\n" in user.out and f"  - {ED25519_PUB}\n" in user.out
    network = run(store, "qm", "cloudinit", "dump", "120", "network").out
    assert "address: '127.0.0.120'\n        netmask: '255.255.255.0'\n" in network
    meta = run(store, "qm", "cloudinit", "dump", "120", "meta").out
    assert meta.startswith("instance-id: ") and len(meta.strip()) == len("instance-id: ") + 40
    wrong = run(store, "qm", "cloudinit", "dump", "120", "vendor")
    assert wrong.code != 0 and "type: value 'vendor' does not have a value in the enumeration" in (
        wrong.err
    )
    elsewhere = run(store, "qm", "cloudinit", "dump", "120", "user", node="pve2")
    assert elsewhere.code == 2
    assert "Configuration file 'nodes/pve2/qemu-server/120.conf' does not exist" in elsewhere.err
    assert run(store, "qm", "cloudinit", "nope").code == 255


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[SimCluster]:
    async with SimCluster(tmp_path / "pve", delay_scale=0, statd_lag=0) as cluster:
        yield cluster


async def test_the_api_dump_needs_vm_audit(sim: SimCluster, tmp_path: Path) -> None:
    installed_vm(sim.store, tmp_path, 130)
    assert run(sim.store, "qm", "set", "130", "--cipassword", HASHED).code == 0
    api = client_for(sim)
    try:
        data = await api.get("/nodes/pve1/qemu/130/cloudinit/dump", {"type": "user"})
        assert f"password: {HASHED}\n" in data
        with pytest.raises(errors.ApiError, match="type"):
            await api.get("/nodes/pve1/qemu/130/cloudinit/dump", {"type": "vendor"})
        sim.revoke_api("/vms", ["VM.Audit"])
        with pytest.raises(errors.PermissionDenied, match=r"VM\.Audit"):
            await api.get("/nodes/pve1/qemu/130/cloudinit/dump", {"type": "user"})
    finally:
        await api.close()
