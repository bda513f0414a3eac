"""The fake `qm snapshot/rollback/delsnapshot/listsnapshot`, with Proxmox's rules.

The rules (docs/simulator.md, "Snapshots") follow qemu-server's snapshot endpoints and
pve-guest-common's snapshot_create / snapshot_rollback / snapshot_delete: a `snapshot`,
`rollback` or `snapshot-delete` lock while the work runs (a task killed mid-way leaves it, as
on a real node), the storage check before anything changes, a config copy per snapshot with
`snaptime`, `description`, `parent` and, on a running VM only, the saved RAM (`vmstate`).
A snapshot lives in the VM's record under `snapshots`; the current config names its `parent`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from . import guestfs
from . import vmconfig as vc
from .args import CliError, CommandSpec, Opt, parse_vm
from .context import Ctx, take_failure
from .state import Txn, set_status

VMID = Opt("int", minimum=100, maximum=999999999)
BOOL = Opt("bool")
STR = Opt("str")
_CONFIG_ID = re.compile(r"[a-z][a-z0-9_-]+", re.IGNORECASE)
# Keys of a snapshot entry that are about the snapshot, not the VM's config.
SNAP_KEYS = ("snaptime", "description", "vmstate", "parent", "snapstate")
SNAPSHOT_TYPES = ("lvmthin", "zfspool")  # volumes snapshotted in place


def check_snapname(value: str) -> str | None:
    """pve-snapshot-name: a configuration id, at most 40 characters."""
    if len(value) > 40:
        return "value may only be 40 characters long"
    if not _CONFIG_ID.fullmatch(value):
        return f"invalid format - invalid configuration ID '{value}'"
    return None


SNAPNAME = Opt(check=check_snapname)
SPECS: dict[str, CommandSpec] = {
    "snapshot": CommandSpec(
        "qm snapshot <vmid> <snapname> [OPTIONS]",
        (("vmid", VMID), ("snapname", SNAPNAME)),
        {"description": STR, "vmstate": BOOL},
    ),
    "rollback": CommandSpec(
        "qm rollback <vmid> <snapname> [OPTIONS]",
        (("vmid", VMID), ("snapname", SNAPNAME)),
        {"start": BOOL},
    ),
    "delsnapshot": CommandSpec(
        "qm delsnapshot <vmid> <snapname> [OPTIONS]",
        (("vmid", VMID), ("snapname", SNAPNAME)),
        {"force": BOOL},
    ),
    "listsnapshot": CommandSpec("qm listsnapshot <vmid>", (("vmid", VMID),)),
}


def reserved_name_error(name: str) -> str | None:
    """The API's own refusals, before the worker starts."""
    if name == "current" or name.lower() == "pending":
        return f"unable to use snapshot name '{name}' (reserved name)"
    return None


def _disks(conf: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, volid) of the disks a snapshot covers: cdrom and cloud-init drives do not count."""
    out = []
    for key in vc.drives(conf):
        value = str(conf[key])
        if vc.is_cdrom(value) or "cloudinit" in value.split(",")[0]:
            continue
        out.append((key, vc.parse_drive(value)["file"]))
    return out


def can_snapshot(txn: Txn, conf: Mapping[str, Any]) -> bool:
    """pve-storage's volume_has_feature('snapshot') for every disk: lvmthin and zfspool always,
    file storages (dir, nfs) only for qcow2 images, plain lvm never."""
    for _, volid in _disks(conf):
        storage, _, volname = volid.partition(":")
        stype = str(txn.storages.get(storage, {}).get("type", ""))
        if stype in SNAPSHOT_TYPES:
            continue
        if vc.is_file_storage(stype) and volname.endswith(".qcow2"):
            continue
        return False
    return True


def listing(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`GET .../snapshot`: every snapshot, then `current` (where the VM is now)."""
    out: list[dict[str, Any]] = []
    for name, snap in sorted(rec.get("snapshots", {}).items()):
        item = {
            "name": name,
            "snaptime": snap.get("snaptime", 0),
            "vmstate": 1 if snap.get("vmstate") else 0,
            "description": snap.get("description", ""),
        }
        for key in ("parent", "snapstate"):
            if snap.get(key):
                item[key] = snap[key]
        out.append(item)
    current: dict[str, Any] = {
        "name": "current",
        "running": 1 if rec.get("status") == "running" else 0,
        "description": "You are here!",
    }
    if rec["config"].get("parent"):
        current["parent"] = rec["config"]["parent"]
    out.append(current)
    return out


def _load(txn: Txn, node: str, vmid: int) -> dict[str, Any]:
    rec = txn.vm_on(node, vmid)
    if rec is None:
        raise CliError(f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist")
    return rec


def _check_lock(rec: Mapping[str, Any]) -> None:
    if lock := rec["config"].get("lock"):
        raise CliError(f"VM is locked ({lock})")


def _unlock(txn: Txn, node: str, vmid: int, lock: str) -> dict[str, Any]:
    rec = _load(txn, node, vmid)
    if rec["config"].get("lock") != lock:
        raise CliError(f"encountered invalid lock, expected '{lock}'")
    del rec["config"]["lock"]
    return rec


def _volume_line(txn: Txn, volid: str, snapname: str, action: str) -> str:
    """What the storage prints for one volume's snapshot (lvm's words on lvmthin)."""
    storage, _, volname = volid.partition(":")
    stype = txn.storages.get(storage, {}).get("type")
    if stype == "lvmthin":
        lv = f"snap_{volname}_{snapname}"
        return {
            "create": f'  Logical volume "{lv}" created.',
            "delete": f'  Logical volume "{lv}" successfully removed.',
            "rollback": f'  Logical volume "{volname}" successfully removed.\n'
            f'  Logical volume "{volname}" created.',
        }[action]
    return ""


def cmd_snapshot(ctx: Ctx, argv: Sequence[str]) -> int:
    p, vmid = parse_vm(SPECS["snapshot"], argv)
    name: str = p.args["snapname"]
    if error := reserved_name_error(name):
        raise CliError(error)
    # __snapshot_prepare: checks and the lock, in one config update
    with ctx.store.locked() as txn:
        rec = _load(txn, ctx.node, vmid)
        conf = rec["config"]
        if conf.get("template"):
            raise CliError("you can't take a snapshot if it's a template")
        _check_lock(rec)
        snapshots = rec.setdefault("snapshots", {})
        if name in snapshots:
            raise CliError(f"snapshot name '{name}' already used")
        if not can_snapshot(txn, conf):
            raise CliError("snapshot feature is not available")
        running = rec["status"] == "running"
        snap: dict[str, Any] = {k: v for k, v in conf.items() if k not in ("lock", "parent")}
        if p.options.get("vmstate") and running:
            # QemuConfig's find_vmstate_storage: vmstatestorage, else the first disk's storage
            disks = _disks(conf)
            first = disks[0][1].split(":")[0] if disks else "local"
            state_storage = str(conf.get("vmstatestorage") or first)
            snap["vmstate"] = f"{state_storage}:vm-{vmid}-state-{name}"
        if conf.get("parent"):
            snap["parent"] = conf["parent"]
        snap |= {"snapstate": "prepare", "snaptime": int(ctx.now())}
        if p.options.get("description"):
            snap["description"] = p.options["description"]
        snapshots[name] = snap
        guestfs.snapshot(rec, name)
        conf["lock"] = "snapshot"
        txn.save_vm(ctx.node, rec)
        disks = _disks(conf)
    if snap.get("vmstate"):
        ctx.out(f"saving VM state and RAM using storage '{snap['vmstate'].split(':')[0]}'\n")
        ctx.delay("snapshot", 2.0)
        ctx.out("completed saving the VM state in 2s, saved 412.23 MiB\n")
    ctx.delay("snapshot")
    with ctx.store.locked() as txn:
        failure = take_failure(txn, "qm snapshot", ctx.node, vmid)
        if failure:
            # snapshot_create's cleanup: the half-made snapshot goes, the lock with it
            rec = _unlock(txn, ctx.node, vmid, "snapshot")
            rec["snapshots"].pop(name, None)
            guestfs.forget(rec, name)
            txn.save_vm(ctx.node, rec)
            ctx.out("snapshot create failed: starting cleanup\n")
            raise CliError(failure.message, failure.exit_code)
        for key, volid in disks:
            if running:
                ctx.out(f"snapshotting 'drive-{key}' ({volid})\n")
            if line := _volume_line(txn, volid, name, "create"):
                ctx.out(line + "\n")
        # __snapshot_commit
        rec = _unlock(txn, ctx.node, vmid, "snapshot")
        rec["snapshots"][name].pop("snapstate", None)
        rec["config"]["parent"] = name
        txn.save_vm(ctx.node, rec)
    return 0


def cmd_rollback(ctx: Ctx, argv: Sequence[str]) -> int:
    p, vmid = parse_vm(SPECS["rollback"], argv)
    name: str = p.args["snapname"]
    with ctx.store.locked() as txn:
        rec = _load(txn, ctx.node, vmid)
        conf = rec["config"]
        if conf.get("template"):
            raise CliError("you can't rollback if vm is a template")
        snap = rec.get("snapshots", {}).get(name)
        if snap is None:
            raise CliError(f"snapshot '{name}' does not exist")
        _rollback_possible(txn, rec, name)
        if snap.get("snapstate"):
            raise CliError(
                f"unable to rollback to incomplete snapshot (snapstate = {snap['snapstate']})"
            )
        _check_lock(rec)
        was_running = rec["status"] == "running"
        conf["lock"] = "rollback"
        txn.save_vm(ctx.node, rec)
    if was_running:
        # __snapshot_rollback_vm_stop: a hard stop, the guest gets no shutdown
        ctx.delay("stop")
        with ctx.store.locked() as txn:
            rec = _load(txn, ctx.node, vmid)
            set_status(rec, "stopped", ctx.now())
            txn.save_vm(ctx.node, rec)
        ctx.notify(f"stop {vmid}")
    ctx.delay("snapshot")
    with ctx.store.locked() as txn:
        failure = take_failure(txn, "qm rollback", ctx.node, vmid)
        if failure:
            raise CliError(failure.message, failure.exit_code)  # the lock stays, as on PVE
        rec = _unlock(txn, ctx.node, vmid, "rollback")
        snap = rec["snapshots"][name]
        for _, volid in _disks(snap):
            if line := _volume_line(txn, volid, name, "rollback"):
                ctx.out(line + "\n")
        _restore_sizes(txn, ctx.node, snap)
        rec["config"] = {k: v for k, v in snap.items() if k not in SNAP_KEYS} | {"parent": name}
        rec["pending"], rec["pending_delete"] = {}, []
        guestfs.rollback(rec, name)
        resume = bool(snap.get("vmstate")) or bool(p.options.get("start"))
        if resume:
            set_status(rec, "running", ctx.now())
        txn.save_vm(ctx.node, rec)
    if resume:
        ctx.notify(f"start {vmid}")
    return 0


def _rollback_possible(txn: Txn, rec: Mapping[str, Any], name: str) -> None:
    """ZFS can only roll back to a volume's most recent snapshot (zfs rollback without -r);
    lvmthin and qcow2 to any."""
    snaps = rec.get("snapshots", {})
    then = snaps[name].get("snaptime", 0)

    def descends(other: str) -> bool:
        seen = set()
        while other in snaps and other not in seen:
            seen.add(other)
            other = snaps[other].get("parent", "")
            if other == name:
                return True
        return False

    # snaptime has one-second steps: within the same second, a descendant is the newer one
    newer = [
        s
        for s, v in snaps.items()
        if v.get("snaptime", 0) > then or (v.get("snaptime", 0) == then and descends(s))
    ]
    for _, volid in _disks(snaps[name]):
        storage, _, volname = volid.partition(":")
        if txn.storages.get(storage, {}).get("type") == "zfspool" and newer:
            raise CliError(f"can't rollback, '{name}' is not most recent snapshot on '{volname}'")


def _restore_sizes(txn: Txn, node: str, snap: Mapping[str, Any]) -> None:
    """A volume rolled back has the size it had then: the snapshot's drive `size=`."""
    volumes = txn.volumes(node)
    for key, volid in _disks(snap):
        storage, _, volname = volid.partition(":")
        vol = volumes.get(storage, {}).get(volname)
        if vol is not None:
            vol["size"] = vc.drive_size(str(snap[key]))
    txn.save_volumes(node, volumes)


def cmd_delsnapshot(ctx: Ctx, argv: Sequence[str]) -> int:
    p, vmid = parse_vm(SPECS["delsnapshot"], argv)
    name: str = p.args["snapname"]
    with ctx.store.locked() as txn:
        rec = _load(txn, ctx.node, vmid)
        snap = rec.get("snapshots", {}).get(name)
        if snap is None:
            raise CliError(f"snapshot '{name}' does not exist")
        _check_lock(rec)
        if rec["config"].get("template"):
            raise CliError("you can't delete a snapshot if vm is a template")
        rec["config"]["lock"] = "snapshot-delete"
        snap["snapstate"] = "delete"
        txn.save_vm(ctx.node, rec)
    ctx.delay("snapshot", 0.5)
    with ctx.store.locked() as txn:
        failure = take_failure(txn, "qm delsnapshot", ctx.node, vmid)
        if failure:
            raise CliError(failure.message, failure.exit_code)  # lock and snapstate stay
        rec = _unlock(txn, ctx.node, vmid, "snapshot-delete")
        snap = rec["snapshots"].pop(name)
        guestfs.forget(rec, name)
        for _, volid in _disks(snap):
            if line := _volume_line(txn, volid, name, "delete"):
                ctx.out(line + "\n")
        # Children (and the current state) move up to the deleted snapshot's parent: the
        # parent chain never blocks a delete.
        for entry in [rec["config"], *rec["snapshots"].values()]:
            if entry.get("parent") == name:
                if snap.get("parent"):
                    entry["parent"] = snap["parent"]
                else:
                    del entry["parent"]
        txn.save_vm(ctx.node, rec)
    return 0


def cmd_listsnapshot(ctx: Ctx, argv: Sequence[str]) -> int:
    """GuestHelpers print_snapshot_tree: roots and children by snaptime, `current` last."""
    _, vmid = parse_vm(SPECS["listsnapshot"], argv)
    with ctx.store.locked() as txn:
        rec = _load(txn, ctx.node, vmid)
    entries = {e["name"]: e for e in listing(rec)}
    children: dict[str, list[str]] = {}
    roots = []
    for name, e in entries.items():
        parent = e.get("parent")
        if parent and parent in entries:
            children.setdefault(parent, []).append(name)
        else:
            roots.append(name)

    def order(name: str) -> tuple[int, float]:
        t = entries[name].get("snaptime")
        return (1, 0) if t is None else (0, t)

    def show(prefix: str, name: str) -> None:
        e = entries[name]
        description = (e.get("description") or "no-description").split("\n")[0]
        t = e.get("snaptime")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t is not None else ""
        width = max(30 - len(prefix), 0)
        ctx.out(f"{prefix} {name:<{width}} {stamp:<23} {description}\n")
        for child in sorted(children.get(name, []), key=order):
            show(" " + prefix, child)

    for root in sorted(roots, key=order):
        show("`->", root)
    return 0


HANDLERS = {
    "snapshot": cmd_snapshot,
    "rollback": cmd_rollback,
    "delsnapshot": cmd_delsnapshot,
    "listsnapshot": cmd_listsnapshot,
}
