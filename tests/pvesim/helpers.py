"""Run fake commands in-process against a fresh on-disk cluster state."""

from __future__ import annotations

import struct
from pathlib import Path

import attrs
from pvesim.commands import execute
from pvesim.context import Ctx
from pvesim.state import Store, default_cluster, storage_info

NODES = {"pve1": "127.0.0.1", "pve2": "127.0.0.2", "pve3": "127.0.0.3"}
ED25519_PUB = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH3HfEOVaQCnlCpuRJ50vo+/3c9oEJSjElKgwsbIcdQK root@vm"
)


@attrs.frozen
class Result:
    code: int
    out: str
    err: str


def new_store(root: Path, statd_lag: float | None = 0.0) -> Store:
    """A stock PVE 8 layout (`local` holds no disks, `local-lvm` does) plus `vmfiles`, a
    directory storage for VM disks, for the file-storage paths."""
    store = Store(root)
    store.init(default_cluster(NODES, "pve1", 0.0, statd_lag))
    store.add_storage("vmfiles", storage_info("vmfiles", "dir"))
    return store


def run(store: Store, *argv: str, node: str = "pve1", stdin: str = "") -> Result:
    out: list[str] = []
    err: list[str] = []
    ctx = Ctx(store, node, out.append, err.append, lambda: stdin, scale=0.0)
    code = execute(ctx, list(argv))
    return Result(code, "".join(out), "".join(err))


def qcow2_image(path: Path, virtual_size: int = 2 * 1024**3) -> Path:
    """A file with a qcow2 header announcing `virtual_size` (all `qm disk import` reads)."""
    path.write_bytes(b"QFI\xfb" + b"\0" * 20 + struct.pack(">Q", virtual_size) + b"\0" * 64)
    return path


def installed_vm(store: Store, tmp: Path, vmid: int = 120, storage: str = "local-lvm",
                 extra: tuple[str, ...] = ()) -> None:  # fmt: skip
    """The command sequence of a correct install, up to (not including) `qm start`."""
    image = qcow2_image(tmp / f"debian-12-generic-amd64-{vmid}.qcow2")
    steps = [
        ("qm", "create", str(vmid), "--name", f"web-{vmid}", "--cores", "2", "--memory", "2048",
         "--net0", "virtio,bridge=vmbr0", "--scsihw", "virtio-scsi-pci", "--ostype", "l26",
         "--agent", "1", "--serial0", "socket", *extra),
        ("qm", "importdisk", str(vmid), str(image), storage),
    ]  # fmt: skip
    for step in steps:
        r = run(store, *step)
        assert r.code == 0, r.err
    r = run(store, "qm", "set", str(vmid), "--sshkeys", "/dev/stdin", stdin=ED25519_PUB + "\n")
    assert r.code == 0, r.err
    volid = (
        f"{storage}:{vmid}/vm-{vmid}-disk-0.raw"
        if storage in ("vmfiles", "nfs-vm")  # file storages (dir, nfs)
        else f"{storage}:vm-{vmid}-disk-0"
    )
    for opts in (
        ("--tags", "debian", "--ciupgrade", "0"),
        ("--scsi0", volid),
        ("--ide2", f"{storage}:cloudinit"),
        ("--boot", "order=scsi0"),
        ("--ipconfig0", f"ip=127.0.0.{vmid}/24,gw=127.0.0.1"),
    ):
        r = run(store, "qm", "set", str(vmid), *opts)
        assert r.code == 0, r.err
