"""The fake `qm template` and `qm clone`, with Proxmox's rules and a cost model.

The rules (docs/simulator.md, "Templates and clones") follow qemu-server's `template` and
`clone_vm` endpoints, QemuServer.pm's template_create / destroy_vm and pve-storage's
volume_has_feature, create_base and clone_image:

- `qm template` refuses a running VM, a locked one, one that is a template already; it marks
  the config `template: 1` at once, then turns each disk the storage can make a base of into
  a read-only base volume (`vm-9001-disk-0` becomes `base-9001-disk-0`). A disk on a storage
  without the `template` feature (plain LVM) stays as it is: the VM is a template all the same.
- `qm clone` makes the new VM's config with `lock: clone` before the work (a worker killed
  mid-way leaves it locked, as on a real node), then per disk: a linked clone (`full` 0, the
  default of a template) where the volume is a base and its storage has the `clone` feature,
  else `Linked clone feature is not supported for drive 'scsi0'`; a full copy otherwise. The
  cloud-init drive is always made anew. `target` (another node) needs every disk on shared
  storage.
- A template whose base volume still backs a linked clone cannot be destroyed (`base volume
  '...' is still in use by linked cloned`), and a linked clone on local storage cannot be
  migrated (`can't migrate '...' as it's a clone of '...'`).

Cost: a full clone copies every byte at the storage's copy rate (the same `import_per_gib` as
an import: both are one `qemu-img convert` on the node), a linked clone is one constant
metadata step (`linked_clone`), a template conversion another (`template`). Each copy adds
its bytes to the node's `written` counter, which the benchmark reads (`SimCluster.written`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from . import vmconfig as vc
from .args import CliError, CommandSpec, Opt, check_dns_name, parse
from .context import Ctx, take_failure
from .formats import GIB, format_size, format_transferred
from .state import Txn

VMID = Opt("int", minimum=100, maximum=999999999)
BOOL = Opt("bool")
STR = Opt("str")

SPECS: dict[str, CommandSpec] = {
    "template": CommandSpec("qm template <vmid> [OPTIONS]", (("vmid", VMID),), {"disk": STR}),
    "clone": CommandSpec(
        "qm clone <vmid> <newid> [OPTIONS]",
        (("vmid", VMID), ("newid", VMID)),
        {
            "name": Opt(check=check_dns_name),
            "description": STR,
            "full": BOOL,
            "target": STR,
            "storage": STR,
            "pool": STR,
            "format": Opt(enum=("raw", "qcow2", "vmdk")),
            "snapname": STR,
            "bwlimit": Opt("int", minimum=0),
        },
    ),
}

# pve-storage's feature table per storage type, for what templates and clones ask:
# `template` (create_base works), `clone` (a linked clone of a base volume).
# LvmThinPlugin, ZFSPoolPlugin, RBDPlugin: both. Plugin.pm (dir, nfs, cifs): both, for raw,
# qcow2 and vmdk files (a linked clone is a qcow2 overlay on the base file). LVMPlugin (thick
# lvm): neither (create_base dies "can't create base images in lvm storage"); a full copy only.
_LINKABLE = frozenset({"lvmthin", "zfspool", "rbd", "dir", "nfs", "cifs"})
_FILE_FORMATS = (".raw", ".qcow2", ".vmdk")


def can_template(stype: str, volname: str) -> bool:
    if stype not in _LINKABLE:
        return False
    return not vc.is_file_storage(stype) or volname.endswith(_FILE_FORMATS)


def can_link(stype: str, volname: str) -> bool:
    """volume_has_feature('clone'): a base volume on a storage that links."""
    return can_template(stype, volname) and volname.split("/")[-1].startswith("base-")


def count_written(txn: Txn, node: str, nbytes: int) -> None:
    """Bytes a node's storage wrote for VM disks (imports, full copies, migrations in)."""
    written = txn.cluster.setdefault("written", {})
    written[node] = int(written.get(node, 0)) + int(nbytes)
    txn.save_cluster()


def _disks(conf: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, volid) of the disks that clone or template work on (not cdroms, not cloud-init)."""
    out = []
    for key in vc.drives(conf):
        value = str(conf[key])
        file = vc.parse_drive(value)["file"]
        if vc.is_cdrom(value) or "cloudinit" in file or ":" not in file:
            continue
        out.append((key, file))
    return out


def _stype(txn: Txn, storage: str) -> str:
    return str(txn.storages.get(storage, {}).get("type", ""))


def base_in_use(txn: Txn, node: str, volid: str) -> bool:
    """pve-storage volume_is_base_and_used: a volume of the storage names it as its base."""
    storage, _, volname = volid.partition(":")
    pool = txn.volumes(node).get(storage, {})
    return any(v.get("base") == volname for v in pool.values())


def destroy_refusal(txn: Txn, node: str, conf: Mapping[str, Any]) -> str | None:
    """QemuServer destroy_vm's check on a template: no base volume may back a linked clone."""
    if not conf.get("template"):
        return None
    for _, volid in _disks(conf):
        if base_in_use(txn, node, volid):
            return f"base volume '{volid}' is still in use by linked cloned"
    return None


def migrate_refusal(txn: Txn, node: str, volids: Sequence[str]) -> str | None:
    """QemuMigrate: a local volume whose name says it is a clone of a base (zfspool's
    `base-9000-disk-0/vm-120-disk-0`, a directory's `9000/base-...raw/120/vm-...qcow2`)
    cannot leave the node its base is on. lvm-thin's clone is a plain `vm-120-disk-0` to
    parse_volname: it migrates, as a full copy of its data."""
    volumes = txn.volumes(node)
    for volid in volids:
        storage, _, volname = volid.partition(":")
        base = volumes.get(storage, {}).get(volname, {}).get("base")
        if base and "base-" in volname:
            return f"can't migrate '{volid}' as it's a clone of '{base.split('/')[-1]}'"
    return None


def _base_name(stype: str, volname: str) -> str:
    """`vm-9001-disk-0` -> `base-9001-disk-0` (dir: `9001/base-9001-disk-0.raw`)."""
    head, _, name = volname.rpartition("/")
    name = "base-" + name[len("vm-") :] if name.startswith("vm-") else name
    return f"{head}/{name}" if head else name


def _free_name(pool: Mapping[str, Any], newid: int) -> str:
    i = 0
    while any(f"vm-{newid}-disk-{i}" in n for n in pool):
        i += 1
    return f"vm-{newid}-disk-{i}"


def _clone_volname(stype: str, base: str, newid: int, pool: Mapping[str, Any], full: bool) -> str:
    """The new volume's name as each plugin's clone_image / a fresh allocation names it."""
    name = _free_name(pool, newid)
    if vc.is_file_storage(stype):
        if full:
            fmt = base.rsplit(".", 1)[-1] if "." in base else "raw"
            return f"{newid}/{name}.{fmt}"
        return f"{base}/{newid}/{name}.qcow2"  # ST Plugin clone_image: base/overlay path
    if stype in ("zfspool", "rbd") and not full:
        return f"{base}/{name}"
    return name


def _log(ctx: Ctx, text: str) -> None:
    ctx.out(text + "\n")


def cmd_template(ctx: Ctx, argv: Sequence[str]) -> int:
    p = parse(SPECS["template"], argv)
    vmid: int = p.args["vmid"]
    only: str | None = p.options.get("disk")
    with ctx.store.locked() as txn:
        rec = txn.vm_on(ctx.node, vmid)
        if rec is None:
            raise CliError(
                f"Configuration file 'nodes/{ctx.node}/qemu-server/{vmid}.conf' does not exist"
            )
        conf = rec["config"]
        if lock := conf.get("lock"):
            raise CliError(f"VM is locked ({lock})")
        if conf.get("template") and not only:
            raise CliError("you can't convert a template to a template")
        if rec["status"] == "running":
            raise CliError("you can't convert a VM to template if VM is running")
        conf["template"] = 1
        txn.save_vm(ctx.node, rec)
    ctx.delay("template")
    with ctx.store.locked() as txn:
        failure = take_failure(txn, "qm template", ctx.node, vmid)
        if failure:
            raise CliError(failure.message, failure.exit_code)
        rec = txn.vm_on(ctx.node, vmid)
        if rec is None:
            raise CliError(f"VM {vmid} vanished while it was converted to a template")
        conf = rec["config"]
        volumes = txn.volumes(ctx.node)
        for key, volid in _disks(conf):
            if only and key != only:
                continue
            storage, _, volname = volid.partition(":")
            stype = _stype(txn, storage)
            if not can_template(stype, volname) or volname.split("/")[-1].startswith("base-"):
                continue  # template_create skips what the storage cannot make a base of
            pool = volumes.get(storage, {})
            vol = pool.pop(volname, None)
            new = _base_name(stype, volname)
            if vol is not None:
                pool[new] = vol
            if stype == "lvmthin":
                vg = txn.storages[storage].get("vgname", "pve")
                _log(ctx, f'  Renamed "{volname}" to "{new}" in volume group "{vg}"')
                _log(ctx, f'  Logical volume "{vg}/{new}" changed.')
            drive = vc.parse_drive(str(conf[key]))
            drive["file"] = f"{storage}:{new}"
            conf[key] = vc.print_drive(drive)
        txn.save_volumes(ctx.node, volumes)
        txn.save_vm(ctx.node, rec)
    return 0


def cmd_clone(ctx: Ctx, argv: Sequence[str]) -> int:
    p = parse(SPECS["clone"], argv)
    vmid: int = p.args["vmid"]
    newid: int = p.args["newid"]
    opts = dict(p.options)
    target = str(opts.get("target") or ctx.node)
    if vmid == newid:
        raise CliError("clone: cannot clone VM to itself")
    with ctx.store.locked() as txn:
        if target not in txn.nodes:
            raise CliError(f"no such cluster node '{target}'")
        rec = txn.vm_on(ctx.node, vmid)
        if rec is None:
            raise CliError(
                f"Configuration file 'nodes/{ctx.node}/qemu-server/{vmid}.conf' does not exist"
            )
        conf = rec["config"]
        template = bool(conf.get("template"))
        full = bool(opts["full"]) if "full" in opts else not template
        if not full:
            for name in ("storage", "format"):
                if name in opts:
                    raise CliError(f"parameter '{name}' not allowed for linked clones")
        if lock := conf.get("lock"):
            raise CliError(f"VM is locked ({lock})")
        found = txn.find_vm(newid)
        if found:
            raise CliError(
                f"unable to create VM {newid}: VM {newid} already exists on node '{found[0]}'"
            )
        ct = txn.containers.get(str(newid))
        if ct is not None:
            raise CliError(
                f"unable to create VM {newid}: CT {newid} already exists on node '{ct['node']}'"
            )
        shared = txn.shared_storages()
        plan: list[tuple[str, str, str, bool]] = []  # (key, source volid, storage, full)
        for key in vc.drives(conf):
            value = str(conf[key])
            file = vc.parse_drive(value)["file"]
            if vc.is_cdrom(value) and "cloudinit" not in file:
                continue
            if ":" not in file:
                continue
            storage, _, volname = file.partition(":")
            stype = _stype(txn, storage)
            if target != ctx.node and storage not in shared:
                raise CliError(f"can't clone VM to node '{target}' (VM uses local storage)")
            if full or "cloudinit" in file:
                plan.append((key, file, str(opts.get("storage") or storage), True))
                continue
            if not can_link(stype, volname):
                raise CliError(f"Linked clone feature is not supported for drive '{key}'")
            plan.append((key, file, storage, False))
        cloned = {key for key, *_ in plan}  # written as each is made, never the source's
        newconf: dict[str, Any] = {
            k: v
            for k, v in conf.items()
            if k not in ("template", "lock", "parent", "meta")
            and k not in cloned
            and not vc.UNUSED_RE.match(k)
        }
        if not template:
            conf["lock"] = "clone"  # a VM (not a template) is held while it is copied
            txn.save_vm(ctx.node, rec)
        now = ctx.now()
        # clone_vm settles the new config before any work: name, notes, new MACs and ids.
        if opts.get("name"):
            newconf["name"] = opts["name"]
        if "description" in opts:
            newconf["description"] = vc.stored_description(str(opts["description"]))
        for key in [k for k in newconf if vc.NET_RE.match(k)]:
            newconf[key] = _new_mac(str(newconf[key]))  # clone_vm gives every NIC a new MAC
        newconf["smbios1"] = f"uuid={uuid.uuid4()}"
        newconf["vmgenid"] = str(uuid.uuid4())
        newconf["meta"] = f"creation-qemu=9.2.0,ctime={int(now)}"
        # Its temporary file holds `lock: clone` alone ("# qmclone temporary file"), on the
        # node the task runs on; the config follows once a disk is cloned.
        newrec: dict[str, Any] = {
            "vmid": newid,
            "config": {"lock": "clone"},
            "pending": {},
            "pending_delete": [],
            "status": "stopped",
            "prev_status": "unknown",
            "pid": 0,
            "started_at": None,
            "created_at": now,
            "status_changed_at": now,
            "worker_pid": os.getpid(),
            "worker_source": vmid,  # the task is the source's (`qmclone:<vmid>`)
        }
        task = getattr(ctx, "task", None)
        if task is not None:
            newrec["worker_upid"] = task.upid
        txn.save_vm(ctx.node, newrec)
    made: list[tuple[str, str]] = []  # (storage, volname) of the volumes made so far
    try:
        with _interruptible():
            _copy_disks(ctx, vmid, newid, target, plan, newconf, made)
    except CliError:
        # clone_vm's error path: the new volumes freed, the temporary config unlinked last. A
        # worker killed outright (SIGKILL, a pvedaemon restart) never gets here: its
        # placeholder stays, locked, as on a real node.
        with ctx.store.locked() as txn:
            _release_source(txn, ctx.node, vmid, template)
            volumes = txn.volumes(target)
            for storage, volname in made:
                volumes.get(storage, {}).pop(volname, None)
            txn.save_volumes(target, volumes)
            txn.delete_vm(ctx.node, newid)
        raise
    with ctx.store.locked() as txn:
        newrec = txn.vm_on(ctx.node, newid) or newrec
        newrec["config"] = newconf
        newrec.pop("worker_pid", None)
        newrec.pop("worker_upid", None)
        newrec.pop("worker_source", None)
        if target != ctx.node:  # the config moves to the target node at the very end
            txn.delete_vm(ctx.node, newid)
        txn.save_vm(target, newrec)
        _release_source(txn, ctx.node, vmid, template)
    return 0


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP)


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """clone_vm's own handlers: INT, TERM, QUIT and HUP (an SSH session hung up, an operator's
    ^C) end the work as an error, so the clean-up runs. A task pveproxy runs is a thread,
    which gets no signals (it ends by kill_tasks, like a SIGKILL)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(_signum: int, _frame: Any) -> None:
        raise CliError("clone failed: interrupted by signal", 255)

    previous = {sig: signal.signal(sig, stop) for sig in _SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _new_mac(value: str) -> str:

    return re.sub(r"=([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}", "=" + vc.random_mac(), value, count=1)


def _release_source(txn: Txn, node: str, vmid: int, template: bool) -> None:
    if template:
        return
    rec = txn.vm_on(node, vmid)
    if rec is not None and rec["config"].get("lock") == "clone":
        del rec["config"]["lock"]
        txn.save_vm(node, rec)


def _copy_disks(
    ctx: Ctx,
    vmid: int,
    newid: int,
    target: str,
    plan: list[tuple[str, str, str, bool]],
    newconf: dict[str, Any],
    made: list[tuple[str, str]],
) -> None:
    """Each disk of the plan onto the new VM, its drive in `newconf`; after each, the config
    so far is written, still locked (clone_vm's write_config per drive)."""
    for key, volid, storage, full in plan:
        src_storage, _, volname = volid.partition(":")
        with ctx.store.locked() as txn:
            conf = (txn.vm_on(ctx.node, vmid) or {"config": {}})["config"]
            drive = vc.parse_drive(str(conf.get(key, volid)))
            src = txn.volumes(ctx.node).get(src_storage, {}).get(volname) or {}
            size = int(src.get("size") or vc.drive_size(str(conf.get(key, ""))) or 0)
            stype = _stype(txn, storage)
        if "cloudinit" in volname:
            with ctx.store.locked() as txn:
                new = vc.cloudinit_volname(stype, newid)
                volumes = txn.volumes(target)
                made.append((storage, new))  # before it exists: a signal never misses it
                volumes.setdefault(storage, {})[new] = {
                    "size": 4 * 1024 * 1024,
                    "vmid": newid,
                    "image": None,
                    "format": "raw",
                }
                txn.save_volumes(target, volumes)
            newconf[key] = vc.print_drive({**drive, "file": f"{storage}:{new}"})
            _write_locked(ctx, newid, newconf)
            continue
        kind = "full" if full else "linked"
        _log(ctx, f"create {kind} clone of drive {key} ({volid})")
        with ctx.store.locked() as txn:
            volumes = txn.volumes(target)
            pool = volumes.setdefault(storage, {})
            new = _clone_volname(stype, volname, newid, pool, full)
            made.append((storage, new))
            pool[new] = {
                "size": size,
                "vmid": newid,
                "image": src.get("image"),
                "format": "qcow2"
                if not full and vc.is_file_storage(stype)
                else src.get("format", "raw"),
            }
            if not full:
                pool[new]["base"] = volname
            txn.save_volumes(target, volumes)
        if stype == "lvmthin":
            _log(ctx, f'  Logical volume "{new.split("/")[-1]}" created.')
        if full:
            _copy(ctx, size)
        else:
            ctx.delay("linked_clone")
        with ctx.store.locked() as txn:
            failure = take_failure(txn, "qm clone", ctx.node, vmid)
            if failure:
                raise CliError(failure.message, failure.exit_code)
            if full:
                count_written(txn, target, size)
        out = {**drive, "file": f"{storage}:{new}", "size": format_size(size)}
        newconf[key] = vc.print_drive(out)
        _write_locked(ctx, newid, newconf)


def _write_locked(ctx: Ctx, newid: int, newconf: dict[str, Any]) -> None:
    with ctx.store.locked() as txn:
        rec = txn.vm_on(ctx.node, newid)
        if rec is not None:
            rec["config"] = {**newconf, "lock": "clone"}
            txn.save_vm(ctx.node, rec)


def _copy(ctx: Ctx, size: int) -> None:
    """qemu-img convert's progress, at the storage's copy rate."""
    ctx.out(format_transferred(0, size, 0.0))
    for pct in (25, 50, 75, 100):
        ctx.delay("import_per_gib", max(size, 1) / GIB / 4)
        ctx.out(format_transferred(size * pct // 100, size, float(pct)))


HANDLERS: dict[str, Callable[[Ctx, Sequence[str]], int]] = {
    "template": cmd_template,
    "clone": cmd_clone,
}
