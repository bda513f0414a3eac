"""API tokens, ACLs and privileges of the simulated pveproxy, checked as PVE checks them.

Kept in `cluster.json` under `settings.api`: the PVE version the cluster claims, the tokens
(`user@realm!name` -> secret, privsep, ACL entries `{path: [privileges]}` that propagate to
sub-paths), and resource pools (`{pool: [vmids]}`). A privsep token's privileges on a path are
the intersection of its own and its user's; here both are granted together, as
`cairn pve bootstrap` tells the admin to, so one ACL per token stands for both.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

VERSIONS: dict[str, str] = {"7.4": "7.4-17", "8.2": "8.2.7", "8.4": "8.4.1", "9.1": "9.1.2"}
DEFAULT_VERSION = "8.4"

_BASE_PRIVS = {
    "VM.Allocate",
    "VM.Audit",
    "VM.Backup",
    "VM.Clone",
    "VM.Config.CDROM",
    "VM.Config.CPU",
    "VM.Config.Cloudinit",
    "VM.Config.Disk",
    "VM.Config.HWType",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.Options",
    "VM.Console",
    "VM.Migrate",
    "VM.PowerMgmt",
    "VM.Snapshot",
    "VM.Snapshot.Rollback",
    "Datastore.Allocate",
    "Datastore.AllocateSpace",
    "Datastore.AllocateTemplate",
    "Datastore.Audit",
    "Sys.Audit",
    "Sys.Console",
    "Sys.Modify",
    "Sys.PowerMgmt",
    "Sys.Syslog",
    "Pool.Allocate",
    "Pool.Audit",
    "Permissions.Modify",
    "User.Modify",
    "Group.Allocate",
    "Realm.Allocate",
    "Realm.AllocateUser",
}


def known_privileges(version: str) -> set[str]:
    """AC AccessControl.pm $privgroups by release: a role naming an unknown one fails."""
    privs = set(_BASE_PRIVS)
    if version >= "8.0":
        privs |= {"SDN.Use", "SDN.Audit", "SDN.Allocate"}
    if version >= "8.2":
        privs.add("Sys.AccessNetwork")
    if version >= "9.0":
        privs |= {"VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted", "VM.Replicate"}
    else:
        privs.add("VM.Monitor")
    return privs


# What an admin grants after `cairn pve bootstrap`, on the simulator's storages.
def cairn_acl(version: str, images_storage: str, pool: str | None = None) -> dict[str, list[str]]:
    vm = [
        "VM.Allocate",
        "VM.Audit",
        "VM.Config.CPU",
        "VM.Config.Memory",
        "VM.Config.Disk",
        "VM.Config.CDROM",
        "VM.Config.Cloudinit",
        "VM.Config.Network",
        "VM.Config.HWType",
        "VM.Config.Options",
        "VM.PowerMgmt",
        "VM.Migrate",
        "VM.Snapshot",
        "VM.Clone",
        "VM.Console",
    ]
    # Without a pool, VM.Console only on cairn's ids (cairn pve bootstrap's CairnConsole).
    console = {} if pool else {f"/vms/{i}": ["VM.Console"] for i in range(100, 255)}
    acl: dict[str, list[str]] = {
        f"/pool/{pool}" if pool else "/vms": vm if pool else vm[:-1],
        **console,
        f"/storage/{images_storage}": ["Datastore.AllocateSpace", "Datastore.Audit"],
        "/storage/local": [
            "Datastore.AllocateTemplate",
            "Datastore.AllocateSpace",
            "Datastore.Audit",
        ],
        "/nodes": ["Sys.Audit"] + (["Sys.AccessNetwork"] if version >= "8.2" else []),
    }
    if version >= "8.0":
        acl["/sdn/zones/localnetwork"] = ["SDN.Use"]
    if version < "8.2":
        acl["/"] = ["Sys.Audit", "Sys.Modify"]
    return acl


def api_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    api = settings.get("api")
    return dict(api) if isinstance(api, dict) else {}


def new_token(acl: Mapping[str, Iterable[str]]) -> dict[str, Any]:
    """A token as `pveum user token add` makes it: a UUID secret, shown once."""
    return {
        "secret": str(uuid.uuid4()),
        "acl": {path: sorted(set(privs)) for path, privs in acl.items()},
        "expire": 0,
        "enabled": True,
    }


def _ancestors(path: str) -> list[str]:
    parts = [p for p in path.split("/") if p]
    return ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def privileges(token: Mapping[str, Any], path: str, pools: Mapping[str, Iterable[int]]) -> set[str]:
    """The token's privileges on `path`: every ACL on the path or above it (propagate=1), and
    for `/vms/<id>` also those on the pool the VM belongs to."""
    acl: Mapping[str, Iterable[str]] = token.get("acl", {})
    found: set[str] = set()
    for where in _ancestors(path):
        found |= set(acl.get(where, ()))
    parts = [p for p in path.split("/") if p]
    if len(parts) == 2 and parts[0] == "vms" and parts[1].isdigit():
        for pool, members in pools.items():
            if int(parts[1]) in {int(m) for m in members}:
                for where in _ancestors(f"/pool/{pool}"):
                    found |= set(acl.get(where, ()))
    return found
