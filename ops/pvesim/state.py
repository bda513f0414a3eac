"""Cluster state on disk, guarded by one `flock` so concurrent fake commands are safe.

Layout under the root directory:
  cluster.json                         nodes, storages, settings
  nodes/<node>/qemu-server/<vmid>.json one VM: config, pending, power state (node = owner)
  nodes/<node>/volumes.json            {storage: {volname: {size, vmid, image, format}}}
  failures.json                        injected failures, consumed in order
  commands.log                         every command run, one line each
The JSON files are written with write-to-temp-then-rename, so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

GIB = 1024**3
TIB = 1024**4

DEFAULT_DELAY_SCALE = 0.05

# x86-64-v3 flags (pve1, pve2) and an older v2-AES host (pve3), so a client that takes the
# lowest level over all nodes has something to find.
FLAGS_V3 = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
    "sse sse2 ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology cpuid pni "
    "pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand "
    "hypervisor lahf_lm abm 3dnowprefetch fsgsbase bmi1 avx2 smep bmi2 erms invpcid rdseed adx "
    "smap clflushopt xsaveopt xsavec xgetbv1 xsaves arat"
)
FLAGS_V2_AES = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
    "sse sse2 ht syscall nx rdtscp lm constant_tsc rep_good nopl xtopology cpuid pni pclmulqdq "
    "ssse3 cx16 sse4_1 sse4_2 x2apic popcnt aes hypervisor lahf_lm arat"
)


STORAGE_LAYOUTS = ("lvm", "zfs")


def installer_storages(layout: str = "lvm") -> dict[str, dict[str, Any]]:
    """storage.cfg as the Proxmox VE installer writes it (pve-installer StorageConfig.pm): the
    `local` directory holds no VM disks; disks go to `local-lvm` (ext4/xfs install, lvmthin) or
    `local-zfs` (ZFS install, zfspool)."""
    if layout not in STORAGE_LAYOUTS:
        raise ValueError(f"unknown storage layout {layout!r}; known: {', '.join(STORAGE_LAYOUTS)}")
    storages: dict[str, dict[str, Any]] = {
        "local": {
            "type": "dir",
            "path": "/var/lib/vz",
            "content": "backup,import,iso,vztmpl",
            "total_kib": 98497780,
            "base_used_kib": 9858012,
        }
    }
    if layout == "zfs":
        storages["local-zfs"] = {
            "type": "zfspool",
            "pool": "rpool/data",
            "sparse": 1,
            "content": "images,rootdir",
            "total_kib": 832888832,
            "base_used_kib": 0,
        }
    else:
        storages["local-lvm"] = {
            "type": "lvmthin",
            "vgname": "pve",
            "thinpool": "data",
            "content": "images,rootdir",
            "total_kib": 832888832,
            "base_used_kib": 0,
        }
    return storages


def storage_info(
    name: str,
    type_: str,
    *,
    content: str = "images,rootdir",
    shared: bool = False,
    total_kib: int = 832888832,
) -> dict[str, Any]:
    """storage.cfg entry of one more storage: `dir`/`nfs` (files), `lvmthin`/`zfspool`, or
    `lvm` (thick LVM: no snapshots, no base volumes, so no linked clones). `shared` is the
    admin's flag (`pvesm set X --shared 1`: every node sees the same volumes, e.g. an LVM group
    on a SAN LUN); an nfs storage has it whatever is asked, as on Proxmox."""
    if type_ not in ("dir", "nfs", "lvmthin", "zfspool", "lvm"):
        raise ValueError(f"unknown storage type {type_!r}")
    info: dict[str, Any] = {"type": type_, "content": content, "total_kib": total_kib,
                            "base_used_kib": 0}  # fmt: skip
    if type_ in ("dir", "nfs"):
        info["path"] = f"/mnt/pve/{name}" if type_ == "nfs" else f"/srv/{name}"
    elif type_ == "lvmthin":
        info.update(vgname=name, thinpool="data")
    elif type_ == "lvm":
        info.update(vgname=name)
    else:
        info.update(pool=f"{name}/data", sparse=1)
    if shared or type_ == "nfs":  # pve-storage forces the flag for network storages
        info["shared"] = 1
    return info


def images_storage(layout: str) -> str:
    """The storage a stock node of this layout keeps VM disks on."""
    return "local-zfs" if layout == "zfs" else "local-lvm"


def default_cluster(
    nodes: dict[str, str],
    main: str,
    delay_scale: float,
    statd_lag: float | None,
    storage_layout: str = "lvm",
) -> dict[str, Any]:
    node_info = {}
    for i, (name, ip) in enumerate(nodes.items()):
        big = name == main
        node_info[name] = {
            "ip": ip,
            "maxcpu": 16 if big else 8,
            "maxmem": (64 if big else 32) * GIB,
            "maxdisk": 100861726720,
            "rootfs_used": 9858012160 + i * 1048576,
            "mem_base": (6 if big else 3) * GIB,
            "online": True,
            "flags": FLAGS_V2_AES if i == 2 else FLAGS_V3,
            "started_at": time.time() - 1234567 - i * 1000,
            "bridges": ["vmbr0"],
        }
    return {
        "main": main,
        "nodes": node_info,
        "storages": installer_storages(storage_layout),
        "settings": {"delay_scale": delay_scale, "statd_lag": statd_lag},
    }


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{id(value)}.tmp")
    tmp.write_text(json.dumps(value, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default


class Txn:
    """One locked view of the state; `save_*` writes immediately (the lock is held)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cluster: dict[str, Any] | None = None

    @property
    def cluster(self) -> dict[str, Any]:
        if self._cluster is None:
            self._cluster = _read_json(self.root / "cluster.json", None)
            if self._cluster is None:
                raise FileNotFoundError(f"no simulated cluster in {self.root}")
        return self._cluster

    def save_cluster(self) -> None:
        _write_json(self.root / "cluster.json", self.cluster)

    @property
    def main(self) -> str:
        return str(self.cluster["main"])

    @property
    def nodes(self) -> dict[str, dict[str, Any]]:
        return dict(self.cluster["nodes"])

    @property
    def storages(self) -> dict[str, dict[str, Any]]:
        return dict(self.cluster["storages"])

    def setting(self, name: str) -> Any:
        return self.cluster["settings"].get(name)

    def _vm_path(self, node: str, vmid: int) -> Path:
        return self.root / "nodes" / node / "qemu-server" / f"{vmid}.json"

    def vm_on(self, node: str, vmid: int) -> dict[str, Any] | None:
        result: dict[str, Any] | None = _read_json(self._vm_path(node, vmid), None)
        return result

    @property
    def containers(self) -> dict[str, dict[str, Any]]:
        """LXC guests (only listed and counted; `pct` is not simulated): {vmid: {node, ...}}."""
        return dict(self.cluster.get("containers", {}))

    def find_vm(self, vmid: int) -> tuple[str, dict[str, Any]] | None:
        for node in self.nodes:
            rec = self.vm_on(node, vmid)
            if rec is not None:
                return node, rec
        return None

    def all_vms(self) -> list[tuple[str, dict[str, Any]]]:
        found = []
        for node in self.nodes:
            folder = self.root / "nodes" / node / "qemu-server"
            if not folder.is_dir():
                continue
            for path in folder.glob("*.json"):
                rec = _read_json(path, None)
                if rec is not None:
                    found.append((node, rec))
        return found

    def save_vm(self, node: str, rec: dict[str, Any]) -> None:
        _write_json(self._vm_path(node, int(rec["vmid"])), rec)

    def delete_vm(self, node: str, vmid: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._vm_path(node, vmid).unlink()

    def shared_storages(self) -> set[str]:
        """Storages every node sees the same (nfs and the like): their volumes live once."""
        return {name for name, info in self.cluster["storages"].items() if info.get("shared")}

    def volumes(self, node: str) -> dict[str, dict[str, dict[str, Any]]]:
        """{storage: {volname: volume}} as node `node` sees it, shared storages included."""
        result: dict[str, dict[str, dict[str, Any]]] = _read_json(
            self.root / "nodes" / node / "volumes.json", {}
        )
        shared = self.shared_storages()
        if shared:
            common = _read_json(self.root / "shared" / "volumes.json", {})
            result.update({name: common[name] for name in shared if name in common})
        return result

    def save_volumes(self, node: str, volumes: dict[str, dict[str, dict[str, Any]]]) -> None:
        shared = self.shared_storages()
        local = {name: pool for name, pool in volumes.items() if name not in shared}
        _write_json(self.root / "nodes" / node / "volumes.json", local)
        if shared & set(volumes):
            path = self.root / "shared" / "volumes.json"
            common = _read_json(path, {})
            common.update({name: pool for name, pool in volumes.items() if name in shared})
            _write_json(path, common)

    def failures(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = _read_json(self.root / "failures.json", [])
        return result

    def save_failures(self, failures: list[dict[str, Any]]) -> None:
        _write_json(self.root / "failures.json", failures)


class Store:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def exists(self) -> bool:
        return (self.root / "cluster.json").is_file()

    def init(self, cluster: dict[str, Any]) -> None:
        with self.locked() as txn:
            if not self.exists():
                txn._cluster = cluster
                txn.save_cluster()

    def update_settings(self, **values: Any) -> None:
        """Change cluster-wide settings (delay scale, statd lag, ...); the fake commands read
        them at their next run."""
        with self.locked() as txn:
            txn.cluster["settings"].update(values)
            txn.save_cluster()

    def add_storage(self, name: str, info: dict[str, Any]) -> None:
        with self.locked() as txn:
            txn.cluster["storages"][name] = info
            txn.save_cluster()

    @contextlib.contextmanager
    def locked(self) -> Iterator[Txn]:
        self.root.mkdir(parents=True, exist_ok=True)
        # flock locks belong to the open file description, so threads of one process that each
        # open the file exclude each other too.
        with open(self.root / ".lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield Txn(self.root)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def log_command(self, node: str, argv: list[str]) -> None:
        shown = list(argv)
        for i, arg in enumerate(shown):
            name, eq, _ = arg.lstrip("-").partition("=")
            if arg.startswith("-") and name in ("cipassword", "password"):
                if eq:
                    shown[i] = f"{arg.split('=', 1)[0]}=<hidden>"
                elif i + 1 < len(shown):
                    shown[i + 1] = "<hidden>"
        line = json.dumps({"t": time.time(), "node": node, "argv": shown}) + "\n"
        fd = os.open(self.root / "commands.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def delay_scale(self) -> float:
        env = os.environ.get("PVESIM_DELAY_SCALE")
        if env:
            return float(env)
        with self.locked() as txn:
            value = txn.setting("delay_scale")
        return DEFAULT_DELAY_SCALE if value is None else float(value)


def set_status(rec: dict[str, Any], status: str, now: float) -> None:
    """A VM record's power state changed at ``now``: qm's start/stop and a snapshot's rollback
    both go through here, so the record keeps the same fields whoever changed it."""
    rec["prev_status"] = rec.get("status", "unknown")
    rec["status"] = status
    rec["status_changed_at"] = now
    if status == "running":
        rec["started_at"] = now
        rec["pid"] = random.randint(1000, 4000000)
    else:
        rec["started_at"] = None
        rec["pid"] = 0
