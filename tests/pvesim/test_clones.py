"""The fake `qm template` / `qm clone`: Proxmox's base volumes, its linked-clone storage rule,
`lock: clone`, and the template that cannot go while a clone depends on it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pvesim.state import Store, storage_info

from tests.pvesim.helpers import installed_vm, new_store, run


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return new_store(tmp_path / "state")


def written(store: Store, node: str = "pve1") -> int:
    with store.locked() as txn:
        return int(txn.cluster.get("written", {}).get(node, 0))


def config(store: Store, vmid: int, node: str = "pve1") -> dict[str, str]:
    with store.locked() as txn:
        rec = txn.vm_on(node, vmid)
    assert rec is not None
    return {k: str(v) for k, v in rec["config"].items()}


def test_template_makes_base_volumes_and_a_linked_clone_copies_nothing(
    store: Store, tmp_path: Path
) -> None:
    installed_vm(store, tmp_path, 200)
    before = written(store)
    r = run(store, "qm", "template", "200")
    assert r.code == 0, r.err
    assert config(store, 200)["template"] == "1"
    assert config(store, 200)["scsi0"].startswith("local-lvm:base-200-disk-0")
    r = run(store, "qm", "clone", "200", "120", "--name", "web")
    assert r.code == 0, r.err
    assert "create linked clone of drive scsi0 (local-lvm:base-200-disk-0)" in r.out
    clone = config(store, 120)
    assert clone["scsi0"].startswith("local-lvm:vm-120-disk-0")
    assert clone["name"] == "web" and "template" not in clone and "lock" not in clone
    assert written(store) == before  # a linked clone writes no data
    r = run(store, "qm", "start", "200")
    assert (r.code, r.err.strip()) == (255, "you can't start a vm if it's a template")
    r = run(store, "qm", "template", "200")
    assert r.err.strip() == "you can't convert a template to a template"
    # The base volume backs VM 120: Proxmox refuses to destroy the template.
    r = run(store, "qm", "destroy", "200")
    assert r.code != 0
    assert r.err.strip() == (
        "base volume 'local-lvm:base-200-disk-0' is still in use by linked cloned"
    )
    # lvm-thin's linked clone migrates, as a full copy of its data (its name names no base).
    before = written(store, "pve2")
    r = run(store, "qm", "migrate", "120", "pve2")
    assert r.code == 0, r.err
    assert written(store, "pve2") - before == 2 * 1024**3 + 4 * 1024**2  # + cloud-init
    assert run(store, "qm", "destroy", "120", node="pve2").code == 0
    assert run(store, "qm", "destroy", "200").code == 0


def test_full_clone_copies_every_byte(store: Store, tmp_path: Path) -> None:
    installed_vm(store, tmp_path, 200)
    assert run(store, "qm", "template", "200").code == 0
    before = written(store)
    r = run(store, "qm", "clone", "200", "121", "--full", "1")
    assert r.code == 0, r.err
    assert "create full clone of drive scsi0 (local-lvm:base-200-disk-0)" in r.out
    assert written(store) - before == 2 * 1024**3


def test_thick_lvm_makes_no_base_and_refuses_a_linked_clone(store: Store, tmp_path: Path) -> None:
    store.add_storage("thick", storage_info("thick", "lvm"))
    installed_vm(store, tmp_path, 200, storage="thick")
    assert run(store, "qm", "template", "200").code == 0
    assert config(store, 200)["scsi0"].startswith("thick:vm-200-disk-0")  # no base made
    r = run(store, "qm", "clone", "200", "120")
    assert (r.code, r.err.strip()) == (
        255,
        "Linked clone feature is not supported for drive 'scsi0'",
    )
    assert run(store, "qm", "clone", "200", "120", "--full", "1").code == 0


def test_clone_refusals(store: Store, tmp_path: Path) -> None:
    installed_vm(store, tmp_path, 120)
    r = run(store, "qm", "clone", "120", "121", "--full", "0")  # not a template: no base
    assert (r.code, r.err.strip()) == (
        255,
        "Linked clone feature is not supported for drive 'scsi0'",
    )
    r = run(store, "qm", "clone", "999", "121")
    assert "does not exist" in r.err
    r = run(store, "qm", "clone", "120", "121", "--target", "pve2", "--full", "1")
    assert r.err.strip() == "can't clone VM to node 'pve2' (VM uses local storage)"
    r = run(store, "qm", "clone", "120", "121", "--full", "0", "--storage", "local-lvm")
    assert r.err.strip() == "parameter 'storage' not allowed for linked clones"


def test_a_zfs_linked_clone_stays_on_its_base_node(store: Store, tmp_path: Path) -> None:
    store.add_storage("tank", storage_info("tank", "zfspool"))
    installed_vm(store, tmp_path, 200, storage="tank")
    assert run(store, "qm", "template", "200").code == 0
    r = run(store, "qm", "clone", "200", "120")
    assert r.code == 0, r.err
    assert config(store, 120)["scsi0"].startswith("tank:base-200-disk-0/vm-120-disk-0")
    r = run(store, "qm", "migrate", "120", "pve2")
    assert r.code != 0
    assert (
        "can't migrate 'tank:base-200-disk-0/vm-120-disk-0' as it's a clone of "
        "'base-200-disk-0'" in r.out + r.err
    )
