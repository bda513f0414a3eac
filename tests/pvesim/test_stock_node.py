"""A stock PVE 8 node's refusals and outputs the simulator once lacked: vCPUs above
the node, a missing bridge, shutdown/reboot time-outs, zfspool and shared storage, descriptions,
another client taking an id."""

from __future__ import annotations

from pathlib import Path

import pytest
from pvesim.context import Ctx
from pvesim.state import Store, default_cluster, storage_info

from .helpers import ED25519_PUB, NODES, installed_vm, new_store, run


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return new_store(tmp_path / "pve")


def inject(store: Store, command: str, vmid: int, **extra: object) -> None:
    with store.locked() as txn:
        failures = txn.failures()
        failures.append({"command": command, "vmid": vmid, "node": None, "times": 1, "after": 0,
                         "message": None, "exit_code": None, **extra})  # fmt: skip
        txn.save_failures(failures)


def test_start_refuses_more_vcpus_than_the_node_has(store: Store, tmp_path: Path) -> None:
    installed_vm(store, tmp_path, extra=("--cores", "6", "--sockets", "2"))
    r = run(store, "qm", "start", "120")  # pve1: 16 CPUs, 12 asked
    assert r.code == 0, r.err
    assert run(store, "qm", "stop", "120").code == 0
    assert run(store, "qm", "set", "120", "--cores", "9").code == 0  # qm set does not check
    r = run(store, "qm", "start", "120")
    assert (r.code, r.out, r.err) == (
        255, "generating cloud-init ISO\n", "MAX 16 vcpus allowed per VM on this node\n",
    )  # fmt: skip
    assert run(store, "qm", "status", "120").out == "status: stopped\n"
    assert run(store, "qm", "migrate", "120", "pve2").code == 0
    assert run(store, "qm", "set", "120", "--sockets", "1", node="pve2").code == 0
    r = run(store, "qm", "start", "120", node="pve2")  # pve2 has 8 CPUs
    assert r.err == "MAX 8 vcpus allowed per VM on this node\n"
    assert run(store, "qm", "set", "120", "--cores", "8", node="pve2").code == 0
    assert run(store, "qm", "start", "120", node="pve2").code == 0


def test_start_fails_on_a_bridge_the_node_lacks(store: Store, tmp_path: Path) -> None:
    installed_vm(store, tmp_path)
    assert run(store, "qm", "set", "120", "--net0", "virtio,bridge=vmbr7").code == 0
    r = run(store, "qm", "start", "120")
    assert r.code == 255
    assert r.out.splitlines()[1] == "bridge 'vmbr7' does not exist"
    assert "network script /var/lib/qemu-server/pve-bridge failed with status 512" in r.out
    assert r.err == "start failed: QEMU exited with code 1\n"


def timed_ctx(store: Store, slept: list[float]) -> tuple[Ctx, list[str], list[str]]:
    """A context whose delays are real durations (scale 1), recorded instead of slept."""
    out: list[str] = []
    err: list[str] = []
    return Ctx(store, "pve1", out.append, err.append, lambda: "", sleep=slept.append,
               scale=1.0), out, err  # fmt: skip


def test_a_guest_that_ignores_acpi_times_shutdown_and_reboot_out(
    store: Store, tmp_path: Path
) -> None:
    from pvesim.commands import execute

    installed_vm(store, tmp_path)
    assert run(store, "qm", "start", "120").code == 0
    inject(store, "guest powerdown", 120, times=3)

    slept: list[float] = []
    ctx, _, err = timed_ctx(store, slept)
    assert execute(ctx, ["qm", "shutdown", "120"]) == 255
    assert "".join(err) == "VM quit/powerdown failed - got timeout\n"
    assert 60.0 in slept  # the default --timeout, waited in full
    assert run(store, "qm", "status", "120").out == "status: running\n"

    slept.clear()
    ctx, _, err = timed_ctx(store, slept)
    assert execute(ctx, ["qm", "reboot", "120", "--timeout", "5"]) == 255
    assert "".join(err) == "VM quit/powerdown failed - got timeout\n"
    assert 5.0 in slept and 60.0 not in slept
    assert run(store, "qm", "status", "120").out == "status: running\n"

    r = run(store, "qm", "shutdown", "120", "--forceStop", "1", "--timeout", "3")
    assert (r.code, r.out, r.err) == (0, "VM still running - terminating now with SIGTERM\n", "")
    assert run(store, "qm", "status", "120").out == "status: stopped\n"
    assert run(store, "qm", "start", "120").code == 0
    assert run(store, "qm", "shutdown", "120").code == 0  # it listens again


def test_description_reads_back_encoded_with_its_newline(store: Store) -> None:
    r = run(store, "qm", "create", "120", "--description", "made by: me\nsecond line")
    assert r.code == 0, r.err
    cfg = run(store, "qm", "config", "120").out
    assert "description: made by%3A me%0Asecond line%0A\n" in cfg


def test_valid_models_of_qemu_server_8_are_taken(store: Store) -> None:
    r = run(store, "qm", "create", "120", "--cpu", "SapphireRapids-v2",
            "--net0", "model=e1000-82540em,bridge=vmbr0")  # fmt: skip
    assert r.code == 0, r.err
    cfg = dict(line.split(": ", 1) for line in run(store, "qm", "config", "120").out.splitlines())
    assert cfg["cpu"] == "SapphireRapids-v2"
    assert cfg["net0"].startswith("e1000-82540em=BC:24:11:")
    assert cfg["net0"].endswith(",bridge=vmbr0")


def test_id_race_creates_the_other_vm_just_before_the_create(store: Store) -> None:
    inject(store, "id race", 150, target="pve2", running=True)
    r = run(store, "qm", "create", "150", "--name", "mine")
    assert (r.code, r.err) == (
        255, "unable to create VM 150 - VM 150 already exists on node 'pve2'\n",
    )  # fmt: skip
    assert run(store, "qm", "status", "150", node="pve2").out == "status: running\n"
    cfg = run(store, "qm", "config", "150", node="pve2").out
    assert "name: gui-150\n" in cfg
    assert "scsi0: local-lvm:vm-150-disk-0,iothread=1,size=32G\n" in cfg
    assert run(store, "qm", "create", "151").code == 0  # one race only


def zfs_store(root: Path) -> Store:
    store = Store(root)
    store.init(default_cluster(NODES, "pve1", 0.0, 0.0, storage_layout="zfs"))
    return store


def test_zfspool_volumes_resize_and_migration(tmp_path: Path) -> None:
    store = zfs_store(tmp_path / "pve")
    installed_vm(store, tmp_path, storage="local-zfs")
    cfg = run(store, "qm", "config", "120").out
    assert "scsi0: local-zfs:vm-120-disk-0,size=2G\n" in cfg
    assert "ide2: local-zfs:vm-120-cloudinit,media=cdrom\n" in cfg
    r = run(store, "qm", "disk", "resize", "120", "scsi0", "16G")
    assert (r.code, r.out, r.err) == (0, "", "")  # zfs prints nothing
    r = run(store, "qm", "migrate", "120", "pve2", "--with-local-disks")
    assert r.code == 0, r.err
    lines = [line.split(" ", 2)[2] for line in r.out.splitlines()]
    assert "full send of rpool/data/vm-120-disk-0@__migration__ estimated size is 16.0G" in lines
    assert "total estimated size is 16.0G" in lines
    assert "successfully imported 'local-zfs:vm-120-disk-0'" in lines
    assert not any("records in" in line for line in lines)
    assert run(store, "qm", "destroy", "120", node="pve2").out == ""


def test_shared_storage_migrates_the_config_only(tmp_path: Path) -> None:
    store = new_store(tmp_path / "pve")
    store.add_storage("nfs-vm", storage_info("nfs-vm", "nfs", shared=True))
    installed_vm(store, tmp_path, storage="nfs-vm")
    r = run(store, "qm", "migrate", "120", "pve2")
    assert r.code == 0, r.err
    assert "copying local disk images" not in r.out
    assert not any("found local disk" in line for line in r.out.splitlines())
    cfg = run(store, "qm", "config", "120", node="pve2").out
    assert "scsi0: nfs-vm:120/vm-120-disk-0.raw,size=2G\n" in cfg
    for node in ("pve1", "pve3"):  # one copy, seen from every node
        status = run(store, "pvesm", "status", "--storage", "nfs-vm", node=node).out
        assert int(status.splitlines()[1].split()[4]) == (2 * 1024**3 + 4 * 1024**2) // 1024


def test_set_delete_is_checked_like_qemu_server(store: Store) -> None:
    assert run(store, "qm", "create", "120", "--name", "web", "--numa", "1").code == 0
    usage = "qm set <vmid> [OPTIONS]\n"
    r = run(store, "qm", "set", "120", "--delete", "bogus")
    assert (r.code, r.err) == (
        255, f"400 Parameter verification failed.\ndelete: unknown option 'bogus'\n{usage}",
    )  # fmt: skip
    r = run(store, "qm", "set", "120", "--delete", "numa", "--numa", "0")
    assert r.err == (
        "400 Parameter verification failed.\n"
        f"delete: you can't use '-numa' and -delete numa' at the same time\n{usage}"
    )
    r = run(store, "qm", "set", "120", "--delete", "numa,tags")
    assert (r.code, r.out) == (0, "update VM 120: -delete numa,tags\n")
    assert r.err == "cannot delete 'tags' - not set in current configuration!\n"
    assert "numa" not in run(store, "qm", "config", "120").out


def test_validation_qemu_server_makes(store: Store) -> None:
    assert run(store, "qm", "create", "120").code == 0
    r = run(store, "qm", "set", "120", "--ipconfig0", "ip=10.1.2.3/4")
    assert "ipconfig0.ip: invalid format - value does not look like a valid ipv4 network" in r.err
    assert run(store, "qm", "set", "120", "--ipconfig0", "ip=10.1.2.3/8").code == 0
    r = run(store, "qm", "set", "120", "--sshkeys", "/dev/stdin",
            stdin="# my keys\n" + ED25519_PUB + "\n")  # fmt: skip
    assert (r.code, r.err) == (255, "SSH public key validation error\n")
