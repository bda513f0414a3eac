"""`pvesh get` and `pvesm status`: API objects, /cluster/resources quirks, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pvesim.state import Store, default_cluster, storage_info

from .helpers import NODES, installed_vm, new_store, run


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return new_store(tmp_path / "pve")


def get_json(store: Store, *path: str) -> Any:
    r = run(store, "pvesh", "get", *path, "--output-format", "json")
    assert r.code == 0, r.err
    assert r.out.endswith("\n") and r.out.count("\n") == 1
    return json.loads(r.out)


def test_cluster_resources_vm_entries(store: Store, tmp_path: Path) -> None:
    installed_vm(store, tmp_path)
    run(store, "qm", "start", "120")
    [vm] = get_json(store, "/cluster/resources", "--type", "vm")
    assert vm["id"] == "qemu/120" and vm["vmid"] == 120 and vm["node"] == "pve1"
    assert vm["status"] == "running" and vm["name"] == "web-120" and vm["tags"] == "debian"
    assert vm["maxcpu"] == 2 and vm["maxmem"] == 2048 * 1024**2
    assert vm["maxdisk"] == 2 * 1024**3 and vm["disk"] == 0
    assert vm["mem"] > 0
    assert list(vm) == sorted(vm)


def test_fresh_vm_is_unknown_until_statd_cycle(tmp_path: Path) -> None:
    store = new_store(tmp_path / "pve", statd_lag=3600)
    run(store, "qm", "create", "120", "--name", "web")
    entries = get_json(store, "/cluster/resources", "--type", "vm")
    assert entries == [{"id": "qemu/120", "node": "pve1", "status": "unknown", "type": "qemu",
                        "vmid": 120}]  # fmt: skip
    # tags and lock come from the config, data or not.
    run(store, "qm", "create", "121", "--tags", "debian")
    entries = get_json(store, "/cluster/resources", "--type", "vm")
    assert entries[1] == {"id": "qemu/121", "node": "pve1", "status": "unknown", "tags": "debian",
                          "type": "qemu", "vmid": 121}  # fmt: skip


def test_status_change_lags_behind(tmp_path: Path) -> None:
    store = new_store(tmp_path / "pve", statd_lag=0)
    installed_vm(store, tmp_path)
    with store.locked() as txn:
        txn.cluster["settings"]["statd_lag"] = 3600
        txn.save_cluster()
        rec = txn.vm_on("pve1", 120)
        assert rec is not None
        rec["created_at"] -= 7200
        txn.save_vm("pve1", rec)
    run(store, "qm", "start", "120")
    [vm] = get_json(store, "/cluster/resources", "--type", "vm")
    assert vm["status"] == "stopped"
    assert run(store, "qm", "status", "120").out == "status: running\n"


def test_cluster_resources_nodes_and_all(store: Store) -> None:
    nodes = get_json(store, "/cluster/resources", "--type", "node")
    assert isinstance(nodes, list)
    assert sorted(n["node"] for n in nodes) == ["pve1", "pve2", "pve3"]
    pve1 = next(n for n in nodes if n["node"] == "pve1")
    assert pve1["id"] == "node/pve1" and pve1["status"] == "online" and pve1["type"] == "node"
    assert pve1["maxcpu"] == 16 and pve1["maxmem"] == 64 * 1024**3
    assert {"cpu", "mem", "disk", "uptime", "level", "maxdisk"} <= set(pve1)
    everything = get_json(store, "/cluster/resources")
    assert isinstance(everything, list)
    assert {e["type"] for e in everything} == {"node", "storage"}


def test_nodes_and_node_status(store: Store) -> None:
    nodes = get_json(store, "/nodes")
    assert isinstance(nodes, list) and [n["node"] for n in nodes] == ["pve1", "pve2", "pve3"]
    assert all(len(n["ssl_fingerprint"]) == 95 for n in nodes)
    status = get_json(store, "/nodes/pve3/status")
    assert isinstance(status, dict)
    assert "avx2" not in status["cpuinfo"]["flags"].split()
    assert "aes" in status["cpuinfo"]["flags"].split()
    assert "avx2" in get_json(store, "/nodes/pve1/status")["cpuinfo"]["flags"].split()
    assert status["loadavg"] == ["0.12", "0.18", "0.15"]
    assert status["pveversion"].startswith("pve-manager/")
    r = run(store, "pvesh", "get", "/nodes/pve9/status", "--output-format", "json")
    assert r.code == 255
    assert r.err == (
        "hostname lookup 'pve9' failed - failed to get address info for: pve9: "
        "Name or service not known\n"
    )


def test_nextid(store: Store) -> None:
    assert get_json(store, "/cluster/nextid") == 100
    run(store, "qm", "create", "100")
    assert get_json(store, "/cluster/nextid") == 101
    r = run(store, "pvesh", "get", "/cluster/nextid", "--vmid", "100")
    assert "vmid: VM 100 already exists" in r.err


def test_pvesh_errors_and_text_output(store: Store) -> None:
    r = run(store, "pvesh", "get", "/nope")
    assert (r.code, r.err) == (255, "No 'get' handler defined for '/nope'\n")
    r = run(store, "pvesh", "get", "/nodes", "--type", "vm")
    assert r.err == (
        "Unknown option: type\n400 unable to parse option\n"
        "pvesh get <api_path> [OPTIONS] [FORMAT_OPTIONS]\n"
    )
    r = run(store, "pvesh", "get", "/cluster/resources", "--type", "disk")
    assert (
        "type: value 'disk' does not have a value in the enumeration 'vm, storage, node, sdn'"
        in r.err
    )
    r = run(store, "pvesh", "get", "/nodes")
    assert r.code == 0 and r.out.startswith("┌") and "│ pve2 " in r.out
    assert run(store, "pvesh", "get", "/cluster/nextid").out == "100\n"
    # With --vmid the parameter itself comes back, a string.
    assert get_json(store, "/cluster/nextid", "--vmid", "150") == "150"
    r = run(
        store,
        "pvesh",
        "get",
        "cluster/resources",
        "--type",
        "node",
        "--output-format",
        "json-pretty",
    )
    assert r.out.startswith("[\n")


def test_pvesm_status_lists_and_counts_volumes(store: Store, tmp_path: Path) -> None:
    before = run(store, "pvesm", "status").out.splitlines()
    assert before[0] == (
        "Name             Type     Status           Total            Used       Available        %"
    )
    assert before[1] == (
        "local             dir     active        98497780         9858012        88639768   10.01%"
    )
    assert before[2].startswith("local-lvm     lvmthin     active       832888832               0")
    installed_vm(store, tmp_path)
    after = run(store, "pvesm", "status", "--storage", "local-lvm").out.splitlines()
    assert len(after) == 2
    used = int(after[1].split()[4])
    assert used == (2 * 1024**3 + 4 * 1024**2) // 1024


def test_pvesm_content_filter_shows_where_disks_can_go(tmp_path: Path) -> None:
    """A stock node: `local` holds ISOs, templates, backups and imports, not VM disks."""
    store = Store(tmp_path / "stock")
    store.init(default_cluster(NODES, "pve1", 0.0, 0.0))
    r = run(store, "pvesm", "status", "--content", "images")
    assert [line.split()[0] for line in r.out.splitlines()] == ["Name", "local-lvm"]
    r = run(store, "pvesm", "status", "--content", "iso")
    assert [line.split()[0] for line in r.out.splitlines()] == ["Name", "local"]


def test_zfs_layout_has_local_zfs_instead_of_local_lvm(tmp_path: Path) -> None:
    store = Store(tmp_path / "zfs")
    store.init(default_cluster(NODES, "pve1", 0.0, 0.0, storage_layout="zfs"))
    r = run(store, "pvesm", "status", "--content", "images")
    assert r.out.splitlines()[1].split()[:3] == ["local-zfs", "zfspool", "active"]
    resources = get_json(store, "/cluster/resources", "--type", "storage")
    entry = next(e for e in resources if e["id"] == "storage/pve1/local-zfs")
    assert (entry["content"], entry["plugintype"], entry["shared"]) == (
        "images,rootdir", "zfspool", 0,
    )  # fmt: skip


def test_pvesm_unknown_storage(store: Store) -> None:
    r = run(store, "pvesm", "status", "-storage", "nosuch")
    assert r.code == 255
    assert r.err == (
        "400 Parameter verification failed.\nstorage: No such storage.\npvesm status  [OPTIONS]\n"
    )


def test_pvesh_storage_objects_carry_the_shared_flag(store: Store, tmp_path: Path) -> None:
    """`/nodes/{node}/storage` and its `status`: pveproxy's objects, with Proxmox's `shared`
    flag (which `pvesm status` does not print): an admin's on lvm, nfs's whatever was asked."""
    store.add_storage("san", storage_info("san", "lvm", content="images", shared=True))
    store.add_storage("nas", storage_info("nas", "nfs", content="images"))
    installed_vm(store, tmp_path)
    status = get_json(store, "/nodes/pve2/storage/san/status")
    size = 832888832 * 1024
    assert status == {
        "type": "lvm",
        "content": "images",
        "active": 1,
        "enabled": 1,
        "shared": 1,
        "total": size,
        "used": 0,
        "avail": size,
    }
    assert get_json(store, "/nodes/pve1/storage/nas/status")["shared"] == 1
    lvm = get_json(store, "/nodes/pve1/storage/local-lvm/status")
    assert (lvm["shared"], lvm["used"]) == (0, 2 * 1024**3 + 4 * 1024**2)
    listed = get_json(store, "/nodes/pve1/storage", "--content", "images")
    flags = {e["storage"]: e["shared"] for e in listed}
    assert flags == {"local-lvm": 0, "nas": 1, "san": 1, "vmfiles": 0}


def test_pvesh_storage_errors(store: Store) -> None:
    r = run(store, "pvesh", "get", "/nodes/pve1/storage/nosuch/status")
    assert r.code == 255
    assert r.err == (
        "400 Parameter verification failed.\nstorage: No such storage.\n"
        "pvesh get <api_path> [OPTIONS] [FORMAT_OPTIONS]\n"
    )
    r = run(store, "pvesh", "get", "/nodes/pve9/storage/local/status")
    assert r.code != 0 and "hostname lookup 'pve9' failed" in r.err
    r = run(store, "pvesh", "get", "/nodes/pve1/storage", "--vmid", "100")
    assert r.code != 0 and r.err.startswith("Unknown option: vmid\n")
    with store.locked() as txn:
        txn.cluster["storages"]["local-lvm"]["state"] = "inactive"
        txn.save_cluster()
    r = run(
        store, "pvesh", "get", "/nodes/pve1/storage/local-lvm/status", "--output-format", "json"
    )
    assert r.code == 0 and r.err == "storage 'local-lvm' is not online\n"
    assert json.loads(r.out)["active"] == 0
