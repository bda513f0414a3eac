"""The tasks a node runs now, as `GET /nodes/<node>/tasks?source=active` lists them.

The simulator keeps no task list on disk: a create or a clone in progress is its new VM's
placeholder (`lock: create`, `lock: clone`), which names the process doing the work
(`worker_pid`; for one pveproxy runs, also its task's UPID). A clone's task is the source's, as
qemu-server forks it (`qmclone:<source vmid>`): asked for the tasks of VM 9001, a node lists
the clones of template 9001 at work, not the new VMs they make. A worker whose process died (a
`qm create` killed with the SSH session or the service that ran it, a pveproxy that went down
with its process) is no longer listed, and its placeholder stays locked, as Proxmox leaves it
(an admin's `qm unlock` is needed).
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


_KINDS = {"create": "qmcreate", "clone": "qmclone"}


def task_of(rec: dict[str, Any]) -> tuple[str, int]:
    """(task type, the VM id its UPID names) of a placeholder's worker."""
    kind = _KINDS[str(rec["config"].get("lock"))]
    return kind, int(rec.get("worker_source") or rec["vmid"])


def upid_for(node: str, rec: dict[str, Any]) -> str:
    pid = int(rec.get("worker_pid", 0))
    started = int(rec.get("created_at") or 0)
    kind, ident = task_of(rec)
    return f"UPID:{node}:{pid:08X}:00000000:{started:08X}:{kind}:{ident}:root@pam:"


def active(
    txn: Txn,
    node: str,
    vmid: int | None,
    alive: Callable[[dict[str, Any]], bool] = lambda rec: pid_alive(int(rec["worker_pid"])),
) -> list[dict[str, Any]]:
    """The running tasks of `node` (of VM `vmid`), newest first, as the API lists them."""
    out: list[dict[str, Any]] = []
    for where, rec in txn.all_vms():
        if where != node or rec["config"].get("lock") not in _KINDS or "worker_pid" not in rec:
            continue
        kind, ident = task_of(rec)
        if (vmid is not None and ident != vmid) or not alive(rec):
            continue
        upid = str(rec.get("worker_upid") or upid_for(node, rec))
        out.append(
            {
                "upid": upid,
                "node": node,
                "type": kind,
                "id": str(ident),
                "user": upid.split(":")[7],
                "starttime": int(rec.get("created_at") or 0),
                "pid": int(rec["worker_pid"]),
                "status": "running",
            }
        )
    return sorted(out, key=lambda t: -t["starttime"])
