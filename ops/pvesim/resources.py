"""The API objects `pvesh get` returns, built from the state (pure functions).

Field sets follow MG API2Tools.pm extract_vm_stats / extract_node_stats and API2/Nodes.pm.
pvestatd publishes VM figures every 10 s, so `/cluster/resources` lags: a VM
younger than the lag is `status: "unknown"` with no name or max* fields, and a power change shows
up only once the lag has passed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import vmconfig as vc

PVE_VERSION = "pve-manager/9.2.1/14a22df35955"
KERNEL = "6.17.2-1-pve"


def _status_seen(rec: Mapping[str, Any], now: float, lag: float) -> str:
    if now - float(rec.get("created_at", 0)) < lag:
        return "unknown"
    if now - float(rec.get("status_changed_at", 0)) < lag:
        return str(rec.get("prev_status", "unknown"))
    return str(rec["status"])


def vm_resource(
    node: str, rec: Mapping[str, Any], host_cpus: int, now: float, lag: float
) -> dict[str, Any]:
    vmid = int(rec["vmid"])
    entry: dict[str, Any] = {"id": f"qemu/{vmid}", "node": node, "type": "qemu", "vmid": vmid}
    status = _status_seen(rec, now, lag)
    entry["status"] = status
    conf = rec["config"]
    # `lock` and `tags` come from the config, so they show even before pvestatd has data
    # (PM8 API2/Cluster.pm resources).
    if conf.get("tags"):
        entry["tags"] = str(conf["tags"])
    if conf.get("lock"):
        entry["lock"] = str(conf["lock"])
    if status == "unknown":
        return entry
    maxmem = vc.memory_bytes(conf)
    running = status == "running"
    uptime = int(now - float(rec["started_at"])) if running and rec.get("started_at") else 0
    entry.update(
        name=str(conf.get("name", f"VM {vmid}")),
        maxcpu=vc.maxcpu(conf, host_cpus),
        maxmem=maxmem,
        maxdisk=vc.boot_disk_size(conf),
        disk=0,
        cpu=round(0.0123 + (vmid % 7) / 1000, 4) if running else 0,
        mem=maxmem * 2 // 5 if running else 0,
        uptime=uptime,
        template=int(bool(conf.get("template"))),
        netin=uptime * 512 if running else 0,
        netout=uptime * 64 if running else 0,
        diskread=uptime * 4096 if running else 0,
        diskwrite=uptime * 1024 if running else 0,
    )
    return entry


def ct_resource(vmid: int, ct: Mapping[str, Any], now: float) -> dict[str, Any]:
    """An LXC guest as /cluster/resources lists it (`pct` itself is not simulated)."""
    running = ct.get("status", "running") == "running"
    maxmem = int(ct.get("maxmem", 512 * 1024**2))
    return {
        "cpu": 0.0031 if running else 0,
        "disk": 1073741824,
        "diskread": 0,
        "diskwrite": 0,
        "id": f"lxc/{vmid}",
        "maxcpu": int(ct.get("maxcpu", 1)),
        "maxdisk": 8 * 1024**3,
        "maxmem": maxmem,
        "mem": maxmem // 4 if running else 0,
        "name": str(ct.get("name", f"CT{vmid}")),
        "netin": 0,
        "netout": 0,
        "node": str(ct["node"]),
        "status": "running" if running else "stopped",
        "template": 0,
        "type": "lxc",
        "uptime": 3600 if running else 0,
        "vmid": vmid,
    }


def node_mem_used(info: Mapping[str, Any], vms: Iterable[Mapping[str, Any]]) -> int:
    used = int(info["mem_base"])
    for rec in vms:
        if rec["status"] == "running":
            used += vc.memory_bytes(rec["config"]) * 2 // 5
    return used


def node_resource(
    name: str, info: Mapping[str, Any], vms: Sequence[Mapping[str, Any]], now: float
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": f"node/{name}",
        "level": "",
        "maxcpu": int(info["maxcpu"]),
        "maxdisk": int(info["maxdisk"]),
        "maxmem": int(info["maxmem"]),
        "node": name,
        "status": "online" if info.get("online", True) else "offline",
        "type": "node",
    }
    if entry["status"] == "online":
        running = sum(1 for r in vms if r["status"] == "running")
        entry.update(
            {
                "cgroup-mode": 2,
                "cpu": round(0.0213 + running * 0.01 / int(info["maxcpu"]), 4),
                "disk": int(info["rootfs_used"]),
                "mem": node_mem_used(info, vms),
                "uptime": int(now - float(info["started_at"])),
            }
        )
    return entry


def storage_used_bytes(volumes: Mapping[str, Mapping[str, Any]]) -> int:
    return sum(int(v["size"]) for v in volumes.values())


def storage_row(
    name: str, info: Mapping[str, Any], volumes: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """One `pvesm status` row, KiB."""
    total = int(info["total_kib"])
    used = min(int(info.get("base_used_kib", 0)) + storage_used_bytes(volumes) // 1024, total)
    status = "disabled" if info.get("disable") else str(info.get("state", "active"))
    if status != "active":
        return {
            "name": name,
            "type": info["type"],
            "status": status,
            "total": 0,
            "used": 0,
            "avail": 0,
        }
    return {
        "name": name,
        "type": info["type"],
        "status": status,
        "total": total,
        "used": used,
        "avail": total - used,
    }


def storage_entry(name: str, info: Mapping[str, Any], volumes: Mapping[str, Any]) -> dict[str, Any]:
    """One storage as the API answers it (`/nodes/{node}/storage` items; without `storage`, its
    `status`): bytes, 0/1 flags, Proxmox's own `shared` flag."""
    row = storage_row(name, info, volumes)
    total, used = int(row["total"]) * 1024, int(row["used"]) * 1024
    entry: dict[str, Any] = {
        "storage": name,
        "type": info["type"],
        "content": info["content"],
        "active": int(row["status"] == "active"),
        "enabled": int(not info.get("disable")),
        "shared": int(bool(info.get("shared"))),
        "total": total,
        "used": used,
        "avail": total - used,
    }
    if total:
        entry["used_fraction"] = used / total
    return entry


def storage_resource(
    node: str, name: str, info: Mapping[str, Any], volumes: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    row = storage_row(name, info, volumes)
    return {
        "content": info["content"],
        "disk": row["used"] * 1024,
        "id": f"storage/{node}/{name}",
        "maxdisk": row["total"] * 1024,
        "node": node,
        "plugintype": info["type"],
        "shared": int(bool(info.get("shared"))),
        "status": "available",
        "storage": name,
        "type": "storage",
    }


def nodes_index(
    nodes: Mapping[str, Mapping[str, Any]],
    vms: Mapping[str, Sequence[Mapping[str, Any]]],
    now: float,
) -> list[dict[str, Any]]:
    out = []
    for name in sorted(nodes):
        res = node_resource(name, nodes[name], vms.get(name, []), now)
        entry = {k: v for k, v in res.items() if k != "cgroup-mode"}
        digest = hashlib.sha256(name.encode()).hexdigest().upper()
        entry["ssl_fingerprint"] = ":".join(digest[i : i + 2] for i in range(0, 64, 2))
        out.append(entry)
    return out


def node_status(
    name: str, info: Mapping[str, Any], vms: Sequence[Mapping[str, Any]], now: float
) -> dict[str, Any]:
    total = int(info["maxmem"])
    used = node_mem_used(info, vms)
    cpus = int(info["maxcpu"])
    return {
        "boot-info": {"mode": "efi", "secureboot": 0},
        "cpu": round(0.0213 + sum(1 for r in vms if r["status"] == "running") * 0.01 / cpus, 4),
        "cpuinfo": {
            "cores": cpus // 2,
            "cpus": cpus,
            "flags": info["flags"],
            "hvm": "1",
            "mhz": "2999.998",
            "model": "Intel(R) Xeon(R) CPU E-2288G @ 3.70GHz",
            "sockets": 1,
            "user_hz": 100,
        },
        "current-kernel": {
            "machine": "x86_64",
            "release": KERNEL,
            "sysname": "Linux",
            "version": "#1 SMP PREEMPT_DYNAMIC PMX 6.17.2-1 (2025-10-21T11:55Z)",
        },
        "idle": 0,
        "ksm": {"shared": 0},
        "kversion": f"Linux {KERNEL} #1 SMP PREEMPT_DYNAMIC PMX 6.17.2-1 (2025-10-21T11:55Z)",
        "loadavg": ["0.12", "0.18", "0.15"],
        "memory": {"available": total - used, "free": total - used, "total": total, "used": used},
        "pveversion": PVE_VERSION,
        "rootfs": {
            "avail": int(info["maxdisk"]) - int(info["rootfs_used"]),
            "free": int(info["maxdisk"]) - int(info["rootfs_used"]),
            "total": int(info["maxdisk"]),
            "used": int(info["rootfs_used"]),
        },
        "swap": {"free": 8589930496, "total": 8589930496, "used": 0},
        "uptime": int(now - float(info["started_at"])),
        "wait": 0,
    }


# `type` of GET /nodes/{node}/network (PM8 API2/Network.pm $network_type_enum plus its two
# pseudo-types).
NETWORK_TYPES = (
    "bridge",
    "bond",
    "eth",
    "alias",
    "vlan",
    "OVSBridge",
    "OVSBond",
    "OVSPort",
    "OVSIntPort",
    "vnet",
    "any_bridge",
    "any_local_bridge",
)


def node_network(info: Mapping[str, Any], kind: str | None) -> list[dict[str, Any]]:
    """GET /nodes/{node}/network: the node's uplink and its Linux bridges (the node's
    `bridges`, vmbr0 unless a test added others; `bridge_mtu` names those with their own MTU),
    filtered by `type` as Proxmox does (`any_bridge`: every kind of bridge)."""
    out: list[dict[str, Any]] = [
        {
            "iface": "eno1",
            "type": "eth",
            "active": 1,
            "exists": 1,
            "families": ["inet"],
            "method": "manual",
            "priority": 3,
        }
    ]
    mtus = info.get("bridge_mtu", {})
    for i, name in enumerate(sorted(info.get("bridges", ["vmbr0"]))):
        entry = {
            "iface": name,
            "type": "bridge",
            "active": 1,
            "autostart": 1,
            "bridge_ports": "eno1" if i == 0 else "",
            "bridge_stp": "off",
            "bridge_fd": "0",
            "families": ["inet"],
            "method": "manual",
            "priority": 4 + i,
        }
        if name in mtus:
            entry["mtu"] = int(mtus[name])
        out.append(entry)
    if kind in ("any_bridge", "any_local_bridge"):
        return [e for e in out if e["type"] in ("bridge", "OVSBridge")]
    return [e for e in out if kind is None or e["type"] == kind]
