"""The tasks a node runs now, as `GET /nodes/<node>/tasks?source=active` lists them.

The simulator keeps no task list on disk: a create in progress is its VM's `lock: create`
placeholder, which names the process doing the work (`worker_pid`; for a create pveproxy runs,
also its task's UPID). A worker whose process died (a `qm create` killed with the SSH session
or the service that ran it, a pveproxy that went down with its process) is no longer listed,
and its placeholder stays locked, as Proxmox leaves it (an admin's `qm unlock` is needed).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .state import Txn


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def upid_for(node: str, rec: dict[str, Any]) -> str:
    pid = int(rec.get("worker_pid", 0))
    started = int(rec.get("created_at") or 0)
    return f"UPID:{node}:{pid:08X}:00000000:{started:08X}:qmcreate:{rec['vmid']}:root@pam:"


def active(
    txn: Txn,
    node: str,
    vmid: int | None,
    alive: Callable[[dict[str, Any]], bool] = lambda rec: pid_alive(int(rec["worker_pid"])),
) -> list[dict[str, Any]]:
    """The running tasks of `node` (of VM `vmid`), newest first, as the API lists them."""
    out: list[dict[str, Any]] = []
    for where, rec in txn.all_vms():
        if where != node or (vmid is not None and int(rec["vmid"]) != vmid):
            continue
        if rec["config"].get("lock") != "create" or "worker_pid" not in rec:
            continue
        if not alive(rec):
            continue
        upid = str(rec.get("worker_upid") or upid_for(node, rec))
        out.append(
            {
                "upid": upid,
                "node": node,
                "type": "qmcreate",
                "id": str(rec["vmid"]),
                "user": upid.split(":")[7],
                "starttime": int(rec.get("created_at") or 0),
                "pid": int(rec["worker_pid"]),
                "status": "running",
            }
        )
    return sorted(out, key=lambda t: -t["starttime"])
