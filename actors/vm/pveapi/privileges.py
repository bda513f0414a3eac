"""The least privilege cairn's API driver needs, per PVE release (their names changed), as data.

`roles` says which custom role holds which privileges on which ACL paths; `bootstrap` turns
that into the `pveum` commands an admin runs once; `needs` lists, per cairn operation, the
(path, privileges) PVE checks, for `cairn pve check`.
"""

from __future__ import annotations

import shlex

import attrs

VM_PRIVS = (
    "VM.Allocate", "VM.Audit", "VM.Config.CPU", "VM.Config.Memory", "VM.Config.Disk",
    "VM.Config.CDROM", "VM.Config.Cloudinit", "VM.Config.Network", "VM.Config.HWType",
    "VM.Config.Options", "VM.PowerMgmt", "VM.Migrate", "VM.Snapshot", "VM.Clone", "VM.Console",
)  # fmt: skip

# What templates need beyond an import per install: VM.Clone on the template (PVE's clone_vm
# checks it on the source VM). Making a VM a template wants VM.Allocate, which a create has.
TEMPLATE_PRIVS = ("VM.Clone",)
# The role `bootstrap` gives the VM privileges to (0.1.0's did too, without VM.Clone).
VM_ROLE = "CairnVM"


@attrs.frozen
class Role:
    name: str
    privs: tuple[str, ...]
    paths: tuple[str, ...]


@attrs.frozen
class Layout:
    """What the cluster looks like to cairn: its storages, bridge, pool, PVE release."""

    release: str = "8.4"
    disk_storage: str = "local-lvm"
    import_storage: str = "local"
    bridge: str = "vmbr0"
    pool: str | None = None
    # cairn's VM ids (ASSIGN_IP_START, ASSIGN_IP_END): without a pool, the only VMs whose
    # serial console the token may open.
    vm_ids: tuple[int, int] = (100, 254)


def _at_least(release: str, wanted: tuple[int, int]) -> bool:
    major, _, minor = release.partition(".")
    try:
        return (int(major), int(minor or 0)) >= wanted
    except ValueError:
        return True


CONSOLE = "CairnConsole"
# The pseudo-zone that holds a node's plain Linux bridges in PVE's ACL tree.
LOCAL_BRIDGES = "/sdn/zones/localnetwork"


def roles(layout: Layout) -> list[Role]:
    space = ("Datastore.AllocateSpace", "Datastore.Audit")
    if layout.pool:
        vms = [Role(VM_ROLE, VM_PRIVS, (f"/pool/{layout.pool}",))]
    else:
        # VM.Console on /vms would open every VM's serial line (a login or a root prompt) to
        # the token: only cairn's ids get it.
        first, last = layout.vm_ids
        vms = [
            Role(VM_ROLE, tuple(p for p in VM_PRIVS if p != "VM.Console"), ("/vms",)),
            Role(CONSOLE, ("VM.Console",), tuple(f"/vms/{i}" for i in range(first, last + 1))),
        ]
    out = [
        *vms,
        Role("CairnDisk", space, (f"/storage/{layout.disk_storage}",)),
        Role(
            "CairnImage",
            ("Datastore.AllocateTemplate", *space),
            (f"/storage/{layout.import_storage}",),
        ),
    ]
    if _at_least(layout.release, (8, 2)):
        out.append(Role("CairnNode", ("Sys.Audit", "Sys.AccessNetwork"), ("/nodes",)))
    else:  # before Sys.AccessNetwork (8.2), download-url wants Sys.Audit + Sys.Modify on /
        out.append(Role("CairnNode", ("Sys.Audit", "Sys.Modify"), ("/",)))
    if _at_least(layout.release, (8, 0)):
        # PVE checks SDN.Use on /sdn/zones/localnetwork/<bridge> (and /<vlan> below it for a
        # tagged NIC) for every plain Linux bridge; an install may name any bridge, so the
        # grant is on the zone and propagates to all of them.
        out.append(Role("CairnNet", ("SDN.Use",), (LOCAL_BRIDGES,)))
    return out


def bootstrap(layout: Layout, user: str = "cairn@pve", token: str = "driver") -> list[str]:
    """The `pveum` commands that make the user, the roles, the token and the ACLs."""
    tokenid = f"{user}!{token}"
    lines = [f"pveum user add {shlex.quote(user)} --comment 'cairn VM service'"]
    if layout.pool:
        lines.append(f"pveum pool add {shlex.quote(layout.pool)} --comment 'VMs cairn manages'")
    for role in roles(layout):
        lines.append(f"pveum role add {role.name} --privs {shlex.quote(','.join(role.privs))}")
    lines.append(
        f"pveum user token add {shlex.quote(user)} {shlex.quote(token)} --privsep 1 "
        "--comment 'cairn API driver'   # prints the secret ONCE: keep it for PVE_API_TOKEN"
    )
    for role in roles(layout):
        if role.name == CONSOLE and not layout.pool:
            first, last = layout.vm_ids
            lines += [
                f"for id in $(seq {first} {last}); do",
                f"  pveum acl modify /vms/$id --users {shlex.quote(user)} --roles {CONSOLE}",
                f"  pveum acl modify /vms/$id --tokens {shlex.quote(tokenid)} --roles {CONSOLE}",
                "done",
            ]
            continue
        for path in role.paths:
            # A privilege-separated token gets the intersection of its ACLs and its user's.
            lines.append(f"pveum acl modify {path} --users {shlex.quote(user)} --roles {role.name}")
            lines.append(
                f"pveum acl modify {path} --tokens {shlex.quote(tokenid)} --roles {role.name}"
            )
    lines.append(f"pveum user token permissions {shlex.quote(user)} {shlex.quote(token)}")
    return lines


@attrs.frozen
class Need:
    operation: str
    path: str
    privs: tuple[str, ...]
    any_of: bool = False
    # What cairn does without it, when that is a fallback rather than a failure.
    without: str | None = None


def needs(layout: Layout, node: str) -> list[Need]:
    """What PVE checks for each of cairn's operations, on `node`: a failed call then names the
    missing privilege before a user meets it."""
    vm = f"/pool/{layout.pool}" if layout.pool else "/vms"
    disk, image = f"/storage/{layout.disk_storage}", f"/storage/{layout.import_storage}"
    out = [
        Need("list VMs", vm, ("VM.Audit",)),
        Need("node figures", f"/nodes/{node}", ("Sys.Audit",)),
        Need("install: create", vm, VM_PRIVS[:10]),
        Need("install: disk storage", disk, ("Datastore.AllocateSpace",)),
        Need("install: image storage", image, ("Datastore.AllocateTemplate",)),
        Need("install: import the image", image, ("Datastore.AllocateSpace", "Datastore.Audit"),
             any_of=True),
        Need("start/stop/shutdown/reboot", vm, ("VM.PowerMgmt",)),
        Need("destroy", vm, ("VM.Allocate",)),
        Need("set cpu/memory/disk", vm, ("VM.Config.CPU", "VM.Config.Memory", "VM.Config.Disk")),
        Need("migrate", vm, ("VM.Migrate",)),
        Need("serial console", vm if layout.pool else f"/vms/{layout.vm_ids[0]}", ("VM.Console",)),
        Need("snapshots", vm, ("VM.Snapshot",)),
        Need("install: clone a template", vm, TEMPLATE_PRIVS,
             without="installs import the image each time instead (slower, nothing fails)"),
    ]  # fmt: skip
    if _at_least(layout.release, (8, 2)):
        out.append(Need("install: download the image", f"/nodes/{node}", ("Sys.AccessNetwork",)))
    else:
        out.append(Need("install: download the image", "/", ("Sys.Audit", "Sys.Modify")))
    if _at_least(layout.release, (8, 0)):
        out.append(
            Need("install: network", f"/sdn/zones/localnetwork/{layout.bridge}", ("SDN.Use",))
        )
    return out


def effective(permissions: dict[str, dict[str, int]], path: str) -> set[str]:
    """The privileges `GET /access/permissions` lists on `path` or, propagated, above it."""
    parts = [p for p in path.split("/") if p]
    found: set[str] = set()
    for at in ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]:
        found |= {p for p, v in permissions.get(at, {}).items() if v}
    return found
