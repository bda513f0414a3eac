"""The fake `qm`: one function per subcommand, each working on the locked on-disk state.

Behaviour, messages and exit codes are those of the real `qm`, so a driver tested here meets
the same words and statuses on a node.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import struct
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import clones, cloudinit, snapshots
from . import vmconfig as vc
from .args import (
    NET_MODELS,
    CliError,
    CommandSpec,
    Opt,
    check_bus_id,
    check_dns_name,
    check_drive,
    check_nameserver,
    check_tags,
    cpu_model_error,
    make_ipconfig_check,
    make_net_check,
    param_error,
    parse,
    parse_vm,
)
from .context import Ctx, raise_injected, take_failure, take_injection
from .formats import (
    GIB,
    format_dd_copied,
    format_duration,
    format_key_values,
    format_qm_config,
    format_qm_list,
    format_qm_status,
    format_size,
    format_task_line,
    format_transferred,
    format_update_line,
    format_zfs_size,
    uri_escape,
)
from .state import Txn, set_status
from .vmconfig import random_mac, stored_description

VMID = Opt("int", minimum=100, maximum=999999999)
INT = Opt("int")
BOOL = Opt("bool")
STR = Opt("str")

QEMU_VERSION = "9.2.0"
# Options applied at once on a running VM; everything else waits in [PENDING] (QS fast_plug
# options, hotplug network/disk/usb, and the cloud-init keys that only matter at next start).
HOT_OPTIONS = {
    "name", "tags", "description", "onboot", "protection", "startup", "lock", "ciuser",
    "cipassword", "sshkeys", "ciupgrade", "nameserver", "searchdomain", "citype",
}  # fmt: skip


def _vm_options(create: bool) -> dict[str, Opt]:
    opts: dict[str, Opt] = {
        "name": Opt(check=check_dns_name),
        "memory": Opt("int", minimum=16),
        "balloon": Opt("int", minimum=0),
        "shares": Opt("int", minimum=0, maximum=50000),
        "cores": Opt("int", minimum=1),
        "sockets": Opt("int", minimum=1),
        "vcpus": Opt("int", minimum=1),
        "cpu": Opt(check=cpu_model_error),
        "numa": BOOL,
        "agent": STR,
        "ostype": Opt(
            enum=tuple(
                "other wxp w2k w2k3 w2k8 wvista win7 win8 win10 win11 l24 l26 solaris".split()  # noqa: SIM905
            )
        ),
        "scsihw": Opt(
            enum=("lsi", "lsi53c810", "virtio-scsi-pci", "virtio-scsi-single", "megasas", "pvscsi")
        ),
        "vga": STR,
        "boot": STR,
        "bootdisk": Opt(check=check_bus_id),
        "ciuser": STR,
        "cipassword": STR,
        "sshkeys": STR,
        "ciupgrade": BOOL,
        "citype": Opt(enum=("configdrive2", "nocloud", "opennebula")),
        "nameserver": Opt(check=check_nameserver),
        "searchdomain": STR,
        "tags": Opt(check=check_tags),
        "description": STR,
        "onboot": BOOL,
        "protection": BOOL,
        "kvm": BOOL,
        "bios": Opt(enum=("seabios", "ovmf")),
        "machine": STR,
        "hotplug": STR,
        "template": BOOL,
        "startup": STR,
    }
    for i in range(32):
        opts[f"net{i}"] = Opt(check=make_net_check(f"net{i}"))
        opts[f"ipconfig{i}"] = Opt(check=make_ipconfig_check(f"ipconfig{i}"))
    for i in range(4):
        opts[f"serial{i}"] = STR
    for key in vc.DRIVE_KEYS:
        opts[key] = Opt(check=check_drive)
    if create:
        opts.update(start=BOOL, storage=STR, unique=BOOL, pool=STR, force=BOOL, archive=STR)
    else:
        opts.update(delete=STR, revert=STR, skiplock=BOOL, digest=STR, force=BOOL)
    return opts


_SPEC_BUILDERS: dict[str, Callable[[], CommandSpec]] = {
    "create": lambda: CommandSpec(
        "qm create <vmid> [OPTIONS]", (("vmid", VMID),), _vm_options(True)
    ),
    "set": lambda: CommandSpec("qm set <vmid> [OPTIONS]", (("vmid", VMID),), _vm_options(False)),
    "importdisk": lambda: CommandSpec(
        "qm importdisk <vmid> <source> <storage> [OPTIONS]",
        (("vmid", VMID), ("source", STR), ("storage", STR)),
        {"format": Opt(enum=("raw", "vmdk", "qcow2")), "target-disk": Opt(check=check_bus_id)},
    ),
    "resize": lambda: CommandSpec(
        "qm resize <vmid> <disk> <size> [OPTIONS]",
        (("vmid", VMID), ("disk", Opt(check=check_bus_id)), ("size", STR)),
        {"skiplock": BOOL, "digest": STR},
    ),
    "start": lambda: CommandSpec(
        "qm start <vmid> [OPTIONS]", (("vmid", VMID),),
        {"skiplock": BOOL, "timeout": Opt("int", minimum=0), "machine": STR, "migratedfrom": STR},
    ),
    "stop": lambda: CommandSpec(
        "qm stop <vmid> [OPTIONS]", (("vmid", VMID),),
        {"skiplock": BOOL, "timeout": Opt("int", minimum=0), "keepActive": BOOL,
         "overrule-shutdown": BOOL},
    ),
    "shutdown": lambda: CommandSpec(
        "qm shutdown <vmid> [OPTIONS]", (("vmid", VMID),),
        {"skiplock": BOOL, "timeout": Opt("int", minimum=0), "forceStop": BOOL, "keepActive": BOOL},
    ),
    "reboot": lambda: CommandSpec(
        "qm reboot <vmid> [OPTIONS]", (("vmid", VMID),), {"timeout": Opt("int", minimum=0)}
    ),
    "destroy": lambda: CommandSpec(
        "qm destroy <vmid> [OPTIONS]", (("vmid", VMID),),
        {"purge": BOOL, "skiplock": BOOL, "destroy-unreferenced-disks": BOOL},
    ),
    "migrate": lambda: CommandSpec(
        "qm migrate <vmid> <target> [OPTIONS]", (("vmid", VMID), ("target", STR)),
        {"online": BOOL, "with-local-disks": BOOL, "targetstorage": STR, "force": BOOL,
         "migration_type": Opt(enum=("secure", "insecure")), "bwlimit": INT},
    ),
    "status": lambda: CommandSpec(
        "qm status <vmid> [OPTIONS]", (("vmid", VMID),), {"verbose": BOOL}
    ),
    "config": lambda: CommandSpec(
        "qm config <vmid> [OPTIONS]", (("vmid", VMID),), {"current": BOOL, "snapshot": STR}
    ),
    "list": lambda: CommandSpec("qm list  [OPTIONS]", (), {"full": BOOL}),
    "unlock": lambda: CommandSpec("qm unlock <vmid>", (("vmid", VMID),), {}),
    "cloudinit dump": lambda: CommandSpec(
        "qm cloudinit dump <vmid> <type>",
        (("vmid", VMID), ("type", Opt(enum=cloudinit.TYPES))), {},
    ),
}  # fmt: skip


class _Specs(dict[str, CommandSpec]):
    """Built on first use: a fake command only pays for the parser it needs."""

    def __missing__(self, name: str) -> CommandSpec:
        spec = _SPEC_BUILDERS[name]()
        self[name] = spec
        return spec


SPECS = _Specs()
COMMAND_NAMES = sorted([*(n for n in _SPEC_BUILDERS if " " not in n), "cloudinit", "disk"])


# --- helpers ------------------------------------------------------------------------------------


def not_found(node: str, vmid: int, code: int = 2) -> CliError:
    return CliError(
        f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist", code
    )


def existing_vm(txn: Txn, node: str, vmid: int, code: int = 2) -> dict[str, Any]:
    """The VM's record; most commands fail alike, with `not_found`, when it is gone."""
    rec = txn.vm_on(node, vmid)
    if rec is None:
        raise not_found(node, vmid, code)
    return rec


def no_config_on_node(node: str, vmid: int) -> str:
    return f"unable to find configuration file for VM {vmid} on node '{node}'"


def check_lock(rec: Mapping[str, Any], skiplock: bool = False, code: int = 255) -> None:
    lock = rec["config"].get("lock")
    if lock and not skiplock:
        raise CliError(f"VM is locked ({lock})", code)


def merged(rec: Mapping[str, Any]) -> dict[str, Any]:
    conf = dict(rec["config"])
    conf.update(rec.get("pending", {}))
    for key in rec.get("pending_delete", []):
        conf.pop(key, None)
    return conf


def apply_pending(rec: dict[str, Any]) -> None:
    rec["config"].update(rec.get("pending", {}))
    for key in rec.get("pending_delete", []):
        rec["config"].pop(key, None)
    rec["pending"] = {}
    rec["pending_delete"] = []


def boot_snapshot(txn: Txn, node: str, rec: Mapping[str, Any]) -> dict[str, Any]:
    """What cloud-init and the firmware see at this start (the ISO is built at qm start)."""
    conf = rec["config"]
    volumes = txn.volumes(node)
    bootable_dev = None
    pxe_first = False
    image = None
    for dev in vc.boot_devices(conf):
        if vc.NET_RE.match(dev) and dev in conf:
            pxe_first = True
            continue
        if dev not in conf or not vc.DRIVE_RE.match(dev) or vc.is_cdrom(str(conf[dev])):
            continue
        storage, _, volname = vc.parse_drive(str(conf[dev]))["file"].partition(":")
        vol = volumes.get(storage, {}).get(volname)
        if vol and vol.get("image"):
            bootable_dev = dev
            image = vol["image"]
            break
    has_ci = any("cloudinit" in vc.parse_drive(str(conf[k]))["file"] for k in vc.drives(conf))
    return {
        "bootable": bootable_dev is not None,
        "pxe_first": pxe_first,
        "cloudinit": has_ci,
        "ip": vc.static_ip(conf) if has_ci else None,
        "user": vc.cloud_user(conf, os.path.basename(image) if image else None) if has_ci else None,
        "keys": vc.decode_sshkeys(conf) if has_ci else [],
        # What cloud-init sets as that user's password: the user-data's `password:` .
        "password_hash": cloudinit.login(cloudinit.userdata(conf, rec["vmid"]))[1]
        if has_ci
        else None,
        "name": str(conf.get("name", f"VM{rec['vmid']}")),
    }


def image_virtual_size(path: Path) -> int:
    """qcow2 header's virtual size, or the file size for raw images."""
    with open(path, "rb") as fh:
        head = fh.read(32)
    if len(head) >= 32 and head[:4] == b"QFI\xfb":
        return int(struct.unpack(">Q", head[24:32])[0])
    return path.stat().st_size


def validate_ssh_keys(text: str) -> bool:
    """Structural check of each key line, standing in for PVE's `ssh-keygen -l`."""
    known = {"ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
             "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com", "ssh-dss",
             "sk-ecdsa-sha2-nistp256@openssh.com"}  # fmt: skip
    for line in text.splitlines():
        line = line.strip()
        if not line:  # a `# comment` line fails `ssh-keygen -l` like any other non-key
            continue
        fields = line.split()
        # An options prefix (authorized_keys style) is allowed before the key type.
        idx = next((i for i, f in enumerate(fields) if f in known), None)
        if idx is None or idx + 1 >= len(fields):
            return False
        try:
            blob = base64.b64decode(fields[idx + 1], validate=True)
            (length,) = struct.unpack(">I", blob[:4])
            if blob[4 : 4 + length].decode() != fields[idx] or len(blob) < 4 + length + 4:
                return False
        except (ValueError, struct.error, UnicodeDecodeError):
            return False
    return True


def hash_password(password: str) -> str:
    salt = base64.b64encode(os.urandom(12), b"./").decode()[:16]
    digest = base64.b64encode(hashlib.sha256((salt + password).encode()).digest(), b"./").decode()
    return f"$5${salt}${digest.rstrip('=')}"


def storage_checked(txn: Txn, storage: str) -> dict[str, Any]:
    info = txn.storages.get(storage)
    if info is None:
        raise CliError(f"storage '{storage}' does not exist")
    if info.get("disable"):
        raise CliError(f"storage '{storage}' is disabled")
    if info.get("state") == "inactive":
        raise CliError(f"storage '{storage}' is not online")
    if "images" not in str(info.get("content", "")).split(","):
        raise CliError(f"storage {storage} does not support vm images")
    return info


def allocation_chatter(info: Mapping[str, Any], volname: str, size: int, fmt: str) -> str:
    """What the storage tool prints for a new volume: qemu-img's `Formatting` line on file
    storages, lvcreate's on lvm-thin; `zfs create` prints nothing."""
    if vc.is_file_storage(info["type"]):
        path = f"{info['path']}/images/{volname}"
        if fmt == "qcow2":
            return (
                f"Formatting '{path}', fmt=qcow2 cluster_size=65536 extended_l2=off "
                f"preallocation=metadata compression_type=zlib size={size} "
                f"lazy_refcounts=off refcount_bits=16\n"
            )
        return f"Formatting '{path}', fmt={fmt} size={size}\n"
    if info["type"] == "lvmthin":
        return f'  Logical volume "{volname}" created.\n'
    return ""


def allocate(
    txn: Txn,
    node: str,
    storage: str,
    vmid: int,
    size: int,
    image: str | None,
    fmt: str | None,
    out: Callable[[str], None],
) -> str:
    """Allocate a new volume; returns its volid and prints the storage tool's chatter."""
    info = storage_checked(txn, storage)
    volumes = txn.volumes(node)
    pool = volumes.setdefault(storage, {})
    volname = vc.new_volname(info["type"], vmid, set(pool), fmt)
    out(allocation_chatter(info, volname, size, fmt or "raw"))
    pool[volname] = {"size": size, "vmid": vmid, "image": image, "format": fmt or "raw"}
    txn.save_volumes(node, volumes)
    return f"{storage}:{volname}"


def print_transfer(ctx: Ctx, total: int) -> None:
    """qemu-img convert -p progress, as QS QemuImage::convert re-prints it."""
    ctx.out(format_transferred(0, total, 0.0))
    for pct in range(1, 101):
        ctx.delay("import_per_gib", max(total, 1) / GIB / 100)
        ctx.out(format_transferred(total * pct // 100, total, float(pct)))


def volume_info(txn: Txn, node: str, volid: str) -> dict[str, Any] | None:
    storage, _, volname = volid.partition(":")
    result: dict[str, Any] | None = txn.volumes(node).get(storage, {}).get(volname)
    return result


def drop_volumes(txn: Txn, node: str, volids: Sequence[str], out: Callable[[str], None]) -> None:
    volumes = txn.volumes(node)
    for volid in volids:
        storage, _, volname = volid.partition(":")
        if volumes.get(storage, {}).pop(volname, None) is None:
            continue
        if txn.storages.get(storage, {}).get("type") == "lvmthin":
            out(f'  Logical volume "{volname}" successfully removed.\n')
    txn.save_volumes(node, volumes)


# --- disk creation shared by create and set (QS create_disks) ----------------------------------


def apply_drive(
    ctx: Ctx, txn: Txn, node: str, rec: dict[str, Any], key: str, value: str
) -> tuple[str, list[str]]:
    """Turn a drive option into the stored drive string; returns (value, lines for stdout)."""
    vmid = int(rec["vmid"])
    drive = vc.parse_drive(value)
    file = drive["file"]
    lines: list[str] = []
    if file in ("none", "cdrom") or ":" not in file:
        if file.startswith("/"):
            return value, lines
        if file in ("none", "cdrom"):
            drive.setdefault("media", "cdrom")
            return vc.print_drive(drive), lines
        raise CliError(f"unable to parse volume ID '{file}'")
    storage, _, volname = file.partition(":")
    conf = rec["config"]
    if volname == "cloudinit":
        info = storage_checked(txn, storage)
        for other in vc.drives(conf):
            if other != key and "cloudinit" in vc.parse_drive(str(conf[other]))["file"]:
                raise CliError(f"{key} - cloud-init drive is already attached at '{other}'")
        volname = vc.cloudinit_volname(info["type"], vmid)
        volumes = txn.volumes(node)
        pool = volumes.setdefault(storage, {})
        lines.append(allocation_chatter(info, volname, 4 * 1024 * 1024, "qcow2"))
        pool[volname] = {"size": 4 * 1024 * 1024, "vmid": vmid, "image": None, "format": "raw"}
        txn.save_volumes(node, volumes)
        stored = {"file": f"{storage}:{volname}", "media": "cdrom"}
        stored.update({k: v for k, v in drive.items() if k not in ("file", "media")})
        text = vc.print_drive(stored)
        lines.append(f"{key}: successfully created disk '{text}'\n")
        return text, lines
    if re.fullmatch(r"\d+(\.\d+)?", volname):
        source = drive.pop("import-from", None)
        fmt = drive.pop("format", None)
        image = None
        if source is not None:
            path = Path(source)
            if not path.is_absolute() or not path.is_file():
                raise CliError(f"{source}: non-existent or non-regular file")
            size = image_virtual_size(path)
            image = str(path)
        else:
            size = int(float(volname) * GIB)
        collected: list[str] = []
        volid = allocate(txn, node, storage, vmid, size, image, fmt, collected.append)
        lines += collected
        if source is not None:
            ctx.out("".join(lines))
            lines = []
            print_transfer(ctx, size)
            clones.count_written(txn, node, size)
        stored = {"file": volid, **{k: v for k, v in drive.items() if k != "file"}}
        stored["size"] = format_size(size)
        text = vc.print_drive(stored)
        lines.append(f"{key}: successfully created disk '{text}'\n")
        return text, lines
    info = storage_checked(txn, storage)
    parsed = vc.parse_volname(info["type"], volname)
    if isinstance(parsed, str):
        raise CliError(parsed)
    vol = volume_info(txn, node, file)
    if vol is None:
        raise CliError(f"volume {file} does not exist")
    drive["size"] = format_size(int(vol["size"]))
    # QS write_vm_config: "remove 'unusedX' settings if we re-add a volume"
    for k in [k for k in conf if vc.UNUSED_RE.match(k) and conf[k] == file]:
        del conf[k]
    return vc.print_drive(drive), lines


# --- subcommands --------------------------------------------------------------------------------


def cmd_create(ctx: Ctx, argv: Sequence[str]) -> int:
    p, vmid = parse_vm(SPECS["create"], argv)
    opts = dict(p.options)
    if "sshkeys" in opts:
        opts["sshkeys"] = read_checked_sshkeys(ctx, str(opts["sshkeys"]))
    # No balloon <= memory check here: qemu-server makes it in `qm set` only.
    with ctx.store.locked() as txn:
        ct = txn.containers.get(str(vmid))
        if ct is not None:
            raise CliError(
                f"unable to create VM {vmid} - CT {vmid} already exists on node '{ct['node']}'"
            )
        found = txn.find_vm(vmid)
        if found:
            raise CliError(
                f"unable to create VM {vmid} - VM {vmid} already exists on node '{found[0]}'"
            )
        now = ctx.now()
        rec: dict[str, Any] = {
            "vmid": vmid, "config": {"lock": "create"}, "pending": {}, "pending_delete": [],
            "status": "stopped", "prev_status": "unknown", "pid": 0, "started_at": None,
            "created_at": now, "status_changed_at": now,
        }  # fmt: skip
        # Who does the work while the placeholder is locked (workers.py lists it as a task).
        rec["worker_pid"] = os.getpid()
        task = getattr(ctx, "task", None)
        if task is not None:
            rec["worker_upid"] = task.upid
        txn.save_vm(ctx.node, rec)
    ctx.delay("create")
    with ctx.store.locked() as txn:
        try:
            raise_injected(txn, "qm create", ctx.node, vmid)
            conf = rec["config"]
            out_lines: list[str] = []
            for key, value in opts.items():
                if key in ("start", "storage", "unique", "pool", "force", "archive"):
                    continue
                if vc.DRIVE_RE.match(key):
                    continue
                conf[key] = _stored_value(key, value)
            for key in sorted((k for k in opts if vc.DRIVE_RE.match(k)), key=vc.drive_sort_key):
                text, lines = apply_drive(ctx, txn, ctx.node, rec, key, str(opts[key]))
                conf[key] = text
                out_lines += lines
            if "boot" not in conf:
                order = vc.default_boot_order(conf)
                if order:
                    conf["boot"] = order
            conf["meta"] = f"creation-qemu={QEMU_VERSION},ctime={int(now)}"
            conf["smbios1"] = f"uuid={uuid.uuid4()}"
            conf["vmgenid"] = str(uuid.uuid4())
            del conf["lock"]
            rec.pop("worker_pid", None)
            rec.pop("worker_upid", None)
            txn.save_vm(ctx.node, rec)
        except CliError as exc:
            drop_volumes(txn, ctx.node, vc.referenced_volids(rec["config"]), lambda _s: None)
            txn.delete_vm(ctx.node, vmid)
            raise CliError(f"unable to create VM {vmid} - {exc.text.strip()}", 255) from exc
    if out_lines:
        ctx.out("".join(out_lines))
    if opts.get("start"):
        return cmd_start(ctx, [str(vmid)])
    return 0


def _stored_value(key: str, value: Any) -> Any:
    if key == "cpu":
        err = cpu_model_error(str(value))
        if err:
            raise CliError(err)
    if vc.NET_RE.match(key):
        # Stored as `<model>=<MAC>,...` whichever way it was given; add_random_macs gives
        # every NIC without one a MAC.
        model = mac = None
        rest = []
        for part in (p for p in str(value).split(",") if p):
            name, _, val = part.partition("=")
            if name in NET_MODELS:
                model, mac = name, val or None
            elif name == "model":
                model = val
            elif name == "macaddr":
                mac = val
            else:
                rest.append(part)
        if model is None:
            return value
        return ",".join([f"{model}={mac or random_mac()}", *rest])
    if key == "description":
        return stored_description(str(value))
    if key == "cipassword":
        # qemu-server hashes only what is not already a crypt string (API2/Qemu.pm:
        # `encrypt_pw(...) if $param->{cipassword} !~ /^\$(?:[156]|2[ay])(\$.+){2}/`).
        if _CRYPT_HASH.match(str(value)):
            return str(value)
        return hash_password(str(value))
    return value


def add_gui_vm(
    txn: Txn, node: str, vmid: int, now: float, *, running: bool = True, name: str | None = None
) -> dict[str, Any]:
    """A VM as the web GUI's "Create VM" wizard makes it, with a 32 GiB disk on the node's first
    storage for disk images: someone else's VM, nothing of cairn in it."""
    storage, info = next(
        (n, i) for n, i in sorted(txn.storages.items())
        if "images" in str(i.get("content", "")).split(",") and not vc.is_file_storage(i["type"])
    )  # fmt: skip
    volumes = txn.volumes(node)
    pool = volumes.setdefault(storage, {})
    volname = vc.new_volname(info["type"], vmid, set(pool), None)
    size = 32 * GIB
    pool[volname] = {"size": size, "vmid": vmid, "image": None, "format": "raw"}
    txn.save_volumes(node, volumes)
    config: dict[str, Any] = {
        "boot": "order=scsi0;ide2;net0",
        "cores": 2,
        "cpu": "x86-64-v2-AES",
        "ide2": "none,media=cdrom",
        "memory": 2048,
        "meta": f"creation-qemu={QEMU_VERSION},ctime={int(now)}",
        "name": name or f"gui-{vmid}",
        "net0": f"virtio={random_mac()},bridge=vmbr0,firewall=1",
        "numa": 0,
        "ostype": "l26",
        "scsi0": f"{storage}:{volname},iothread=1,size=32G",
        "scsihw": "virtio-scsi-single",
        "smbios1": f"uuid={uuid.uuid4()}",
        "sockets": 1,
        "vmgenid": str(uuid.uuid4()),
    }
    rec: dict[str, Any] = {
        "vmid": vmid, "config": config, "pending": {}, "pending_delete": [],
        "status": "stopped", "prev_status": "unknown", "pid": 0, "started_at": None,
        "created_at": now, "status_changed_at": now,
    }  # fmt: skip
    if running:
        set_status(rec, "running", now)
        rec["boot"] = boot_snapshot(txn, node, rec)
    txn.save_vm(node, rec)
    return rec


_CRYPT_HASH = re.compile(r"^\$(?:[156]|2[ay])(\$.+){2}")


def read_sshkeys_file(ctx: Ctx, path: str) -> str:
    if path in ("/dev/stdin", "-"):
        return ctx.read_stdin()
    try:
        return Path(path).read_text()
    except FileNotFoundError as exc:
        raise CliError(f"can't open '{path}' - No such file or directory") from exc
    except OSError as exc:
        raise CliError(f"can't open '{path}' - {exc.strerror}") from exc


def read_checked_sshkeys(ctx: Ctx, path: str) -> str:
    """The CLI reads the file, checks every key and stores it URL-encoded (QS param_mapping)."""
    text = read_sshkeys_file(ctx, path)
    if not validate_ssh_keys(text):
        raise CliError("SSH public key validation error")
    return uri_escape(text)


def cmd_set(ctx: Ctx, argv: Sequence[str]) -> int:
    p, vmid = parse_vm(SPECS["set"], argv)
    opts = dict(p.options)
    skiplock = bool(opts.pop("skiplock", 0))
    opts.pop("digest", None)
    if "sshkeys" in opts:
        opts["sshkeys"] = read_checked_sshkeys(ctx, str(opts["sshkeys"]))
    if not opts:
        raise CliError("no options specified")
    deletes = [k.strip() for k in re.split(r"[,; ]", str(opts.pop("delete", ""))) if k.strip()]
    settable = SPECS["set"].options
    for key in deletes:  # checked before any work (API2/Qemu.pm update_vm_api)
        if key in opts:
            raise param_error(
                {"delete": f"you can't use '-{key}' and -delete {key}' at the same time"},
                SPECS["set"].usage,
            )
        if key not in settable or key in ("delete", "revert", "skiplock", "digest", "force"):
            raise param_error({"delete": f"unknown option '{key}'"}, SPECS["set"].usage)
    ctx.delay("set")
    with ctx.store.locked() as txn:
        rec = existing_vm(txn, ctx.node, vmid)
        check_lock(rec, skiplock)
        raise_injected(txn, "qm set", ctx.node, vmid)
        running = rec["status"] == "running"
        conf = rec["config"]
        view = merged(rec)
        # A plain die before anything is printed (API2/Qemu.pm update_vm).
        new_memory = int(opts.get("memory", view.get("memory", 512)))
        new_balloon = opts.get("balloon", view.get("balloon"))
        if new_balloon is not None and int(new_balloon) > new_memory:
            raise CliError("balloon value too large (must be smaller than assigned memory)")
        ctx.out(format_update_line(vmid, {**opts, **({"delete": ",".join(deletes)} if deletes
                                                    else {})}))  # fmt: skip
        for key in deletes:
            if key not in conf and key not in rec.get("pending", {}):
                ctx.err(f"cannot delete '{key}' - not set in current configuration!\n")
                continue
            hot = key in HOT_OPTIONS or vc.DRIVE_RE.match(key) or vc.NET_RE.match(key)
            if running and not hot:
                rec.setdefault("pending_delete", []).append(key)
            else:
                if vc.DRIVE_RE.match(key) and key in conf:
                    file = vc.parse_drive(str(conf[key]))["file"]
                    if "cloudinit" in file:
                        drop_volumes(txn, ctx.node, [file], ctx.out)
                    elif ":" in file:
                        conf[vc.next_free_key(conf, "unused")] = file
                conf.pop(key, None)
        opts.pop("revert", None)
        opts.pop("force", None)
        for key in sorted(opts, key=lambda k: (not vc.DRIVE_RE.match(k), k)):
            value = opts[key]
            if vc.DRIVE_RE.match(key):
                text, lines = apply_drive(ctx, txn, ctx.node, rec, key, str(value))
                old = conf.get(key)
                if old:
                    old_file = vc.parse_drive(str(old))["file"]
                    if old_file != vc.parse_drive(text)["file"] and ":" in old_file:
                        conf[vc.next_free_key(conf, "unused")] = old_file
                conf[key] = text
                ctx.out("".join(lines))
                # A new CD drive joins an `order=` boot list; a cloud-init drive does not
                # (QS update_vm: drive_is_cdrom($drive, 1) excludes cloud-init).
                if vc.is_cdrom(str(value)) and "cloudinit" not in vc.parse_drive(text)["file"]:
                    _append_boot(conf, key)
                continue
            if key == "boot":
                _check_boot(conf, str(value))
            stored = _stored_value(key, value)
            if (
                running
                and key not in HOT_OPTIONS
                and not vc.NET_RE.match(key)
                and not key.startswith("ipconfig")
            ):
                rec.setdefault("pending", {})[key] = stored
            else:
                conf[key] = stored
                if key == "boot" and str(value).startswith("order="):
                    conf.pop("bootdisk", None)
        txn.save_vm(ctx.node, rec)
    return 0


def _append_boot(conf: dict[str, Any], key: str) -> None:
    boot = str(conf.get("boot", ""))
    if boot.startswith("order="):
        devices = [d for d in boot[6:].split(";") if d]
        if key not in devices:
            conf["boot"] = "order=" + ";".join([*devices, key])


def _check_boot(conf: Mapping[str, Any], value: str) -> None:
    if value.startswith("order="):
        for dev in [d for d in value[6:].split(";") if d]:
            if dev not in conf:
                raise CliError(f"invalid bootorder: device '{dev}' does not exist'")


def cmd_importdisk(ctx: Ctx, argv: Sequence[str], usage: str) -> int:
    spec = SPECS["importdisk"]
    p = parse(CommandSpec(usage, spec.positionals, spec.options), argv)
    vmid: int = p.args["vmid"]
    source = Path(p.args["source"])
    storage: str = p.args["storage"]
    fmt = p.options.get("format")
    target = p.options.get("target-disk")
    with ctx.store.locked() as txn:
        check_lock(existing_vm(txn, ctx.node, vmid))
        if not source.is_file():
            raise CliError(f"{source}: non-existent or non-regular file")
        storage_checked(txn, storage)
        size = image_virtual_size(source)
    ctx.out(f"importing disk '{source}' to VM {vmid} ...\n")
    with ctx.store.locked() as txn:
        info = storage_checked(txn, storage)
        volid = allocate(
            txn,
            ctx.node,
            storage,
            vmid,
            size,
            str(source),
            fmt if vc.is_file_storage(info["type"]) else None,
            ctx.out,
        )
    ctx.out(format_transferred(0, size, 0.0))
    for pct in range(1, 101):
        ctx.delay("import_per_gib", max(size, 1) / GIB / 100)
        if pct == 100:
            with ctx.store.locked() as txn:
                failure = take_failure(
                    txn, "qm importdisk", ctx.node, vmid, {"source": str(source)}
                )
                if failure:
                    drop_volumes(txn, ctx.node, [volid], lambda _s: None)
                    raise CliError(failure.message, failure.exit_code)
        ctx.out(format_transferred(size * pct // 100, size, float(pct)))
    with ctx.store.locked() as txn:
        rec = txn.vm_on(ctx.node, vmid)
        if rec is None:
            drop_volumes(txn, ctx.node, [volid], lambda _s: None)
            raise not_found(ctx.node, vmid)
        conf = rec["config"]
        clones.count_written(txn, ctx.node, size)
        if target:
            conf[target] = f"{volid},size={format_size(size)}"
            key = target
        else:
            key = vc.next_free_key(conf, "unused")
            conf[key] = volid
        txn.save_vm(ctx.node, rec)
    ctx.out(f"{key}: successfully imported disk '{volid}'\n")
    return 0


_RESIZE_RE = re.compile(r"^(\+?)(\d+(?:\.\d+)?)([KMGT]?)$")


def cmd_resize(ctx: Ctx, argv: Sequence[str], usage: str) -> int:
    spec = SPECS["resize"]
    p = parse(CommandSpec(usage, spec.positionals, spec.options), argv)
    vmid: int = p.args["vmid"]
    disk: str = p.args["disk"]
    m = _RESIZE_RE.match(p.args["size"])
    if not m:
        raise param_error({"size": "value does not match the regex pattern"}, usage)
    ctx.delay("resize")
    # Everything below runs in the task worker, whose failure `qm resize` does not turn into an
    # exit status: errors go to stderr and the exit code stays 0.
    try:
        with ctx.store.locked() as txn:
            rec = existing_vm(txn, ctx.node, vmid)
            check_lock(rec, bool(p.options.get("skiplock")))
            conf = rec["config"]
            if disk not in conf:
                raise CliError(f"disk '{disk}' does not exist")
            drive = vc.parse_drive(str(conf[disk]))
            if vc.is_cdrom(str(conf[disk])):
                raise CliError("you can't resize a cdrom")
            current = vc.drive_size(str(conf[disk]))
            amount = int(
                float(m.group(2))
                * {"": 1, "K": 1024, "M": 1024**2, "G": GIB, "T": 1024**4}[m.group(3)]
            )
            new = current + amount if m.group(1) else amount
            if new < current:
                raise CliError("shrinking disks is not supported")
            failure = take_failure(txn, "qm resize", ctx.node, vmid)
            if failure:
                ctx.err(failure.message + "\n")
                return failure.exit_code
            if new == current:
                return 0
            storage, _, volname = drive["file"].partition(":")
            volumes = txn.volumes(ctx.node)
            vol = volumes.get(storage, {}).get(volname)
            if vol is not None:
                vol["size"] = new
                txn.save_volumes(ctx.node, volumes)
            drive["size"] = format_size(new)
            conf[disk] = vc.print_drive(drive)
            txn.save_vm(ctx.node, rec)
            stype = txn.storages.get(storage, {}).get("type")
            vg = txn.storages.get(storage, {}).get("vgname", "pve")
    except CliError as exc:
        ctx.err(exc.text)
        return 0
    if stype == "lvmthin":
        ctx.out(
            f"  Size of logical volume {vg}/{volname} changed from {_gib2(current)} "
            f"({current // EXTENT} extents) to {_gib2(new)} ({new // EXTENT} extents).\n"
            f"  Logical volume {vg}/{volname} successfully resized.\n"
        )
    elif vc.is_file_storage(str(stype)):
        ctx.out("Image resized.\n")
    return 0


EXTENT = 4 * 1024**2  # LVM physical extent


def _gib2(size: int) -> str:
    if size >= GIB:
        return f"{size / GIB:.2f} GiB"
    return f"{size / 1024**2:.2f} MiB"


def cmd_start(ctx: Ctx, argv: Sequence[str]) -> int:
    p, vmid = parse_vm(SPECS["start"], argv)
    with ctx.store.locked() as txn:
        rec = existing_vm(txn, ctx.node, vmid, 255)
        check_lock(rec, bool(p.options.get("skiplock")))
        if rec["config"].get("template"):
            raise CliError("you can't start a vm if it's a template")
        if rec["status"] == "running":
            raise CliError(f"VM {vmid} already running")
        has_ci = boot_snapshot(txn, ctx.node, {"vmid": vmid, "config": merged(rec)})["cloudinit"]
    if has_ci:
        ctx.out("generating cloud-init ISO\n")
    ctx.delay("start")
    with ctx.store.locked() as txn:
        rec = existing_vm(txn, ctx.node, vmid, 255)
        if rec["status"] == "running":
            raise CliError(f"VM {vmid} already running")
        raise_injected(txn, "qm start", ctx.node, vmid)
        # vm_start applies pending changes (and saves them) before it builds the command line,
        # so they stay applied when a check below fails.
        apply_pending(rec)
        txn.save_vm(ctx.node, rec)
        node_info = txn.nodes[ctx.node]
        refusal = start_refusal(vmid, rec["config"], node_info)
        if refusal:
            log_lines, message = refusal
            ctx.out(log_lines)
            raise CliError(message)
        set_status(rec, "running", ctx.now())
        rec["boot"] = boot_snapshot(txn, ctx.node, rec)
        txn.save_vm(ctx.node, rec)
    ctx.notify(f"start {vmid}")
    return 0


def start_refusal(
    vmid: int, conf: Mapping[str, Any], node_info: Mapping[str, Any]
) -> tuple[str, str] | None:
    """Why `qm start` fails on this node before QEMU runs (task log lines, task error), if it
    does: more vCPUs than the node has (QS config_to_command), or a NIC on a bridge the node
    lacks (the pve-bridge script fails, PC Network.pm tap_plug)."""
    maxcpus = int(conf.get("sockets", 1)) * int(conf.get("cores", 1))
    allowed = int(node_info["maxcpu"])
    if allowed < maxcpus:
        return "", f"MAX {allowed} vcpus allowed per VM on this node"
    bridges = set(node_info.get("bridges", ["vmbr0"]))
    for key in sorted((k for k in conf if vc.NET_RE.match(k)), key=lambda k: int(k[3:])):
        props = dict(p.partition("=")[::2] for p in str(conf[key]).split(",") if p)
        bridge = props.get("bridge")
        if bridge and bridge not in bridges:
            log = (
                f"bridge '{bridge}' does not exist\n"
                f"kvm: -netdev type=tap,id={key},ifname=tap{vmid}i{key[3:]},"
                "script=/var/lib/qemu-server/pve-bridge,"
                "downscript=/var/lib/qemu-server/pve-bridgedown,vhost=on: "
                "network script /var/lib/qemu-server/pve-bridge failed with status 512\n"
            )
            return log, "start failed: QEMU exited with code 1"
    return None


DEFAULT_STOP_TIMEOUT = 60  # QS _do_vm_stop


def _ignores_powerdown(ctx: Ctx, vmid: int) -> bool:
    """Whether the guest ignores this ACPI power-down (or agent shutdown) request."""
    with ctx.store.locked() as txn:
        return take_failure(txn, "guest powerdown", ctx.node, vmid) is not None


def _wait_powerdown(ctx: Ctx, vmid: int, timeout: int | None, force: bool) -> bool:
    """A guest that ignores the request is waited for `timeout` seconds (scaled like every
    delay), then QS _do_vm_stop gives up, or with `force` kills it. True: it was killed."""
    if not _ignores_powerdown(ctx, vmid):
        return False
    ctx.delay("timeout", DEFAULT_STOP_TIMEOUT if timeout is None else timeout)
    if not force:
        raise CliError("VM quit/powerdown failed - got timeout")
    ctx.out("VM still running - terminating now with SIGTERM\n")
    return True


def _power_off(ctx: Ctx, vmid: int, command: str) -> int:
    """The worker part shared by `qm stop` and `qm shutdown`, after their own checks."""
    ctx.delay(command)
    with ctx.store.locked() as txn:
        rec = txn.vm_on(ctx.node, vmid)
        if rec is None or rec["status"] != "running":
            return 0
        raise_injected(txn, f"qm {command}", ctx.node, vmid)
        set_status(rec, "stopped", ctx.now())
        txn.save_vm(ctx.node, rec)
    ctx.notify(f"stop {vmid}")
    return 0


def cmd_stop(ctx: Ctx, argv: Sequence[str]) -> int:
    p, vmid = parse_vm(SPECS["stop"], argv)
    with ctx.store.locked() as txn:
        rec = txn.vm_on(ctx.node, vmid)
        if rec is None:
            raise CliError(no_config_on_node(ctx.node, vmid))
        if rec["status"] != "running":
            return 0
        check_lock(rec, bool(p.options.get("skiplock")))
    return _power_off(ctx, vmid, "stop")


def cmd_shutdown(ctx: Ctx, argv: Sequence[str]) -> int:
    p, vmid = parse_vm(SPECS["shutdown"], argv)
    with ctx.store.locked() as txn:
        rec = txn.vm_on(ctx.node, vmid)
        if rec is None:
            # vm_is_paused warns first (with a blank line), then the task fails.
            ctx.err(no_config_on_node(ctx.node, vmid) + "\n\n")
            raise CliError(no_config_on_node(ctx.node, vmid))
        if rec["status"] != "running":
            ctx.err(f"VM {vmid} not running\n\n")
            return 0
        check_lock(rec, bool(p.options.get("skiplock")))
    killed = _wait_powerdown(ctx, vmid, p.options.get("timeout"), bool(p.options.get("forceStop")))
    return _power_off(ctx, vmid, "stop" if killed else "shutdown")


def cmd_reboot(ctx: Ctx, argv: Sequence[str]) -> int:
    p, vmid = parse_vm(SPECS["reboot"], argv)
    with ctx.store.locked() as txn:
        rec = txn.vm_on(ctx.node, vmid)
        if rec is None:
            missing = no_config_on_node(ctx.node, vmid)
            raise CliError(f"{missing}\n\n{missing}")  # vm_is_paused's warning, then the die
        if rec["status"] != "running":
            raise CliError(f"VM {vmid} not running\n\nVM {vmid} not running")
        check_lock(rec)
    _wait_powerdown(ctx, vmid, p.options.get("timeout"), force=False)
    ctx.delay("shutdown")
    with ctx.store.locked() as txn:
        rec = txn.vm_on(ctx.node, vmid)
        if rec is None or rec["status"] != "running":
            raise CliError(f"VM {vmid} not running")
        raise_injected(txn, "qm reboot", ctx.node, vmid)
        set_status(rec, "stopped", ctx.now())
        rec["reboot_requested"] = True
        txn.save_vm(ctx.node, rec)
    if not ctx.notify(f"reboot {vmid}"):
        # No cluster daemon (qmeventd's role): restart in-line.
        restart_after_reboot(ctx.store, ctx.node, vmid, ctx.now())
    return 0


def restart_after_reboot(store: Any, node: str, vmid: int, now: float) -> bool:
    """qmeventd -> `qm cleanup` -> vm_start: apply pending, run again. True if it restarted."""
    with store.locked() as txn:
        rec = txn.vm_on(node, vmid)
        if rec is None or not rec.get("reboot_requested") or rec["status"] == "running":
            return False
        rec["reboot_requested"] = False
        apply_pending(rec)
        set_status(rec, "running", now)
        rec["boot"] = boot_snapshot(txn, node, rec)
        txn.save_vm(node, rec)
    return True


def cmd_destroy(ctx: Ctx, argv: Sequence[str]) -> int:
    p, vmid = parse_vm(SPECS["destroy"], argv)
    skiplock = bool(p.options.get("skiplock"))
    with ctx.store.locked() as txn:
        rec = existing_vm(txn, ctx.node, vmid)
        check_lock(rec, skiplock)
        if rec["config"].get("protection"):
            raise CliError(f"can't remove VM {vmid} - protection mode enabled")
        if rec["status"] == "running":
            raise CliError(f"VM {vmid} is running - destroy failed")
        if refusal := clones.destroy_refusal(txn, ctx.node, rec["config"]):
            raise CliError(refusal)
    ctx.delay("destroy")
    with ctx.store.locked() as txn:
        rec = existing_vm(txn, ctx.node, vmid, 255)
        raise_injected(txn, "qm destroy", ctx.node, vmid)
        volids = vc.referenced_volids(merged(rec)) + vc.referenced_volids(rec["config"])
        if p.options.get("destroy-unreferenced-disks"):
            for storage, pool in txn.volumes(ctx.node).items():
                volids += [f"{storage}:{n}" for n, v in pool.items() if v.get("vmid") == vmid]
        drop_volumes(txn, ctx.node, sorted(set(volids)), ctx.out)
        txn.delete_vm(ctx.node, vmid)
    if p.options.get("purge"):
        ctx.out(f"purging VM {vmid} from related configurations..\n")
    ctx.notify(f"destroy {vmid}")
    return 0


def cmd_migrate(ctx: Ctx, argv: Sequence[str]) -> int:
    p, vmid = parse_vm(SPECS["migrate"], argv)
    target: str = p.args["target"]
    online = bool(p.options.get("online"))
    if target == ctx.node:
        raise param_error({"target": "target is local node."}, SPECS["migrate"].usage)
    with ctx.store.locked() as txn:
        nodes = txn.nodes
        if target not in nodes:
            raise CliError(f"no such cluster node '{target}'")
        rec = existing_vm(txn, ctx.node, vmid)
        check_lock(rec)
        target_online = nodes[target].get("online", True)
        running = rec["status"] == "running"
        if running and not online:
            raise CliError("can't migrate running VM without --online")
        shared = txn.shared_storages()
        # Volumes on shared storage are already on the target: only the config moves.
        volids = sorted(
            v for v in set(vc.referenced_volids(rec["config"])) if v.partition(":")[0] not in shared
        )
        vols = {v: volume_info(txn, ctx.node, v) for v in volids}
        if refusal := clones.migrate_refusal(txn, ctx.node, volids):
            raise CliError(refusal)
        storage_types = {n: str(i.get("type")) for n, i in txn.storages.items()}
        pools = {n: str(i.get("pool", "")) for n, i in txn.storages.items()}
        target_ip = nodes[target]["ip"]
        rec["config"]["lock"] = "migrate"
        txn.save_vm(ctx.node, rec)
    if online and not running:
        ctx.err("VM isn't running. Doing offline migration instead.\n")
    started = ctx.now()

    def log(msg: str, error: bool = False) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ctx.now()))
        ctx.out(format_task_line(stamp, msg, error=error))

    try:
        log(f"starting migration of VM {vmid} to node '{target}' ({target_ip})")
        if not target_online:
            ctx.delay("migrate_base")
            raise CliError("Can't connect to destination address using public key")
        for volid in volids:
            kind = "generated disk" if "cloudinit" in volid else "local disk"
            where = "in current VM config"
            attached = any(
                vc.parse_drive(str(rec["config"][k]))["file"] == volid
                for k in vc.drives(rec["config"])
            )
            log(
                f"found {kind} '{volid}' "
                f"({'attached' if attached and kind == 'local disk' else where})"
            )
        if running and not p.options.get("with-local-disks") and volids:
            for volid in volids:
                # Logged at level `warn`, which carries no prefix (GC AbstractMigrate).
                log(
                    f"can't migrate local disk '{volid}': can't live migrate attached local "
                    "disks without with-local-disks option"
                )
            raise CliError("Problem found while scanning volumes - can't migrate VM - check log")
        ctx.delay("migrate_base")
        if volids:
            log("copying local disk images")
        for volid in volids:
            size = int((vols.get(volid) or {}).get("size", 0))
            ctx.delay("migrate_per_gib", size / GIB)
            with ctx.store.locked() as txn:
                raise_injected(txn, "qm migrate", ctx.node, vmid)
            storage, _, volname = volid.partition(":")
            if storage_types.get(storage) == "zfspool":
                # `zfs send -Rpv` of a __migration__ snapshot, its -v lines in the task log.
                dataset = f"{pools.get(storage)}/{volname}@__migration__"
                log(f"full send of {dataset} estimated size is {format_zfs_size(size)}")
                log(f"total estimated size is {format_zfs_size(size)}")
                log(f"TIME        SENT   SNAPSHOT {dataset}")
                clock = time.strftime("%H:%M:%S", time.localtime(ctx.now()))
                log(f"{clock}   {format_zfs_size(size)}   {dataset}")
            else:
                blocks = max(size // 65536, 1)
                log(f"{blocks}+0 records in")
                log(f"{blocks}+0 records out")
                log(format_dd_copied(size, max(size / 110e6, 0.0412)).rstrip("\n"))
            log(f"successfully imported '{volid}'")
            log(f"volume '{volid}' is '{volid}' on the target")
        with ctx.store.locked() as txn:
            rec = existing_vm(txn, ctx.node, vmid, 255)
            src = txn.volumes(ctx.node)
            dst = txn.volumes(target)
            for volid in volids:
                storage, _, volname = volid.partition(":")
                vol = src.get(storage, {}).pop(volname, None)
                if vol is not None:
                    vol.pop("base", None)  # a copy of all its data: no base on the target
                    dst.setdefault(storage, {})[volname] = vol
                    clones.count_written(txn, target, int(vol.get("size", 0)))
            txn.save_volumes(ctx.node, src)
            txn.save_volumes(target, dst)
            rec["config"].pop("lock", None)
            txn.delete_vm(ctx.node, vmid)
            txn.save_vm(target, rec)
    except CliError as exc:
        with ctx.store.locked() as txn:
            rec2 = txn.vm_on(ctx.node, vmid)
            if rec2 is not None:
                rec2["config"].pop("lock", None)
                txn.save_vm(ctx.node, rec2)
        log(exc.text.strip(), error=True)
        log(
            f"migration aborted (duration {format_duration(ctx.now() - started)}): "
            f"{exc.text.strip()}",
            error=True,
        )
        raise CliError("migration aborted", 255) from exc
    log(f"migration finished successfully (duration {format_duration(ctx.now() - started)})")
    ctx.notify(f"migrate {vmid} {target}")
    return 0


def cmd_status(ctx: Ctx, argv: Sequence[str]) -> int:
    p, vmid = parse_vm(SPECS["status"], argv)
    with ctx.store.locked() as txn:
        rec = existing_vm(txn, ctx.node, vmid)
        raise_injected(txn, "qm status", ctx.node, vmid)
        host_cpus = int(txn.nodes[ctx.node]["maxcpu"])
    if p.options.get("verbose"):
        ctx.out(format_key_values(vm_status_fields(rec, host_cpus, ctx.now())))
    else:
        ctx.out(format_qm_status(rec["status"]))
    return 0


def vm_status_fields(rec: Mapping[str, Any], host_cpus: int, now: float) -> dict[str, Any]:
    conf = rec["config"]
    running = rec["status"] == "running"
    fields: dict[str, Any] = {
        "cpus": vc.maxcpu(conf, host_cpus),
        "maxdisk": vc.boot_disk_size(conf),
        "maxmem": vc.memory_bytes(conf),
        "name": conf.get("name", f"VM {rec['vmid']}"),
        "status": rec["status"],
        "uptime": int(now - rec["started_at"]) if running and rec.get("started_at") else 0,
        "vmid": rec["vmid"],
    }
    if running:
        fields["pid"] = rec["pid"]
        fields["qmpstatus"] = "running"
    if conf.get("tags"):
        fields["tags"] = conf["tags"]
    if conf.get("lock"):
        fields["lock"] = conf["lock"]
    return fields


def cmd_config(ctx: Ctx, argv: Sequence[str]) -> int:
    p, vmid = parse_vm(SPECS["config"], argv)
    with ctx.store.locked() as txn:
        rec = existing_vm(txn, ctx.node, vmid)
        raise_injected(txn, "qm config", ctx.node, vmid)
    conf = rec["config"] if p.options.get("current") else merged(rec)
    ctx.out(format_qm_config(conf))
    return 0


def cmd_list(ctx: Ctx, argv: Sequence[str]) -> int:
    parse(SPECS["list"], argv)
    rows = []
    with ctx.store.locked() as txn:
        raise_injected(txn, "qm list", ctx.node, None)
        folder = txn.root / "nodes" / ctx.node / "qemu-server"
        recs = (
            [txn.vm_on(ctx.node, int(f.stem)) for f in folder.glob("*.json")]
            if folder.is_dir()
            else []
        )
    for rec in recs:
        if rec is None:
            continue
        conf = rec["config"]
        rows.append({
            "vmid": rec["vmid"], "name": conf.get("name", f"VM {rec['vmid']}"),
            "status": rec["status"], "maxmem": vc.memory_bytes(conf),
            "maxdisk": vc.boot_disk_size(conf), "pid": rec.get("pid", 0),
        })  # fmt: skip
    ctx.out(format_qm_list(rows))
    return 0


def cmd_unlock(ctx: Ctx, argv: Sequence[str]) -> int:
    """`qm unlock`: what an operator runs after a create or migration died half-way."""
    _, vmid = parse_vm(SPECS["unlock"], argv)
    with ctx.store.locked() as txn:
        rec = existing_vm(txn, ctx.node, vmid)
        rec["config"].pop("lock", None)
        txn.save_vm(ctx.node, rec)
    return 0


def cmd_cloudinit_dump(ctx: Ctx, argv: Sequence[str]) -> int:
    """The generated cloud-init data of a VM on this node, from its current config (QS
    API2/Qemu.pm cloudinit_generated_config_dump; the CLI prints it and a newline)."""
    p, vmid = parse_vm(SPECS["cloudinit dump"], argv)
    with ctx.store.locked() as txn:
        rec = txn.vm_on(ctx.node, vmid)
    if rec is None:
        raise not_found(ctx.node, vmid)
    ctx.out(cloudinit.dump(rec["config"], vmid, p.args["type"]) + "\n")
    return 0


def usage_short() -> str:
    lines = ["USAGE: qm <COMMAND> [ARGS] [OPTIONS]"]
    for name in sorted(_SPEC_BUILDERS):
        lines.append(f"       {SPECS[name].usage}")
    lines += [f"       {snapshots.SPECS[n].usage}" for n in sorted(snapshots.SPECS)]
    lines += [f"       {clones.SPECS[n].usage}" for n in sorted(clones.SPECS)]
    lines.append("       qm disk import <vmid> <source> <storage> [OPTIONS]")
    lines.append("       qm disk resize <vmid> <disk> <size> [OPTIONS]")
    return "\n".join(lines) + "\n"


Handler = Callable[[Ctx, Sequence[str]], int]


def _raced(handler: Handler, at: int) -> Handler:
    """`handler` of a command that makes VM `argv[at]` (create, clone), run after an injected
    id race (`SimCluster.inject_id_race`) has let someone else, a GUI "Create VM", take that
    id a moment before: the gap between a client's choice of id and its command."""

    def run(ctx: Ctx, argv: Sequence[str]) -> int:
        if len(argv) > at and argv[at].isdigit():
            vmid = int(argv[at])
            with ctx.store.locked() as txn:
                if race := take_injection(txn, "id race", ctx.node, vmid):
                    node = str(race.get("target") or ctx.node)
                    add_gui_vm(txn, node, vmid, ctx.now(), running=bool(race.get("running")))
        return handler(ctx, argv)

    return run


HANDLERS: dict[str, Handler] = {
    "create": _raced(cmd_create, 0),
    "set": cmd_set,
    "start": cmd_start,
    "stop": cmd_stop,
    "shutdown": cmd_shutdown,
    "reboot": cmd_reboot,
    "destroy": cmd_destroy,
    "migrate": cmd_migrate,
    "status": cmd_status,
    "config": cmd_config,
    "list": cmd_list,
    "unlock": cmd_unlock,
    **snapshots.HANDLERS,
    **clones.HANDLERS,
    "clone": _raced(clones.cmd_clone, 1),
}


def failure_key(argv: Sequence[str]) -> str:
    """The failure-injection name of a qm command line ("qm disk import" -> "qm importdisk")."""
    if not argv:
        return "qm"
    if argv[0] == "disk" and len(argv) > 1:
        return {"import": "qm importdisk", "resize": "qm resize"}.get(argv[1], f"qm disk {argv[1]}")
    return f"qm {argv[0]}"


def run(ctx: Ctx, argv: Sequence[str]) -> int:
    """Run `qm <argv>`; errors become stderr text and an exit status, as the real CLI does."""
    try:
        if not argv:
            raise CliError("ERROR: no command specified\n" + usage_short())
        cmd, rest = argv[0], list(argv[1:])
        if cmd == "importdisk":
            return cmd_importdisk(ctx, rest, SPECS["importdisk"].usage)
        if cmd == "resize":
            return cmd_resize(ctx, rest, SPECS["resize"].usage)
        if cmd == "disk":
            sub = rest[0] if rest else ""
            if sub == "import":
                return cmd_importdisk(
                    ctx, rest[1:], "qm disk import <vmid> <source> <storage> [OPTIONS]"
                )
            if sub == "resize":
                return cmd_resize(ctx, rest[1:], "qm disk resize <vmid> <disk> <size> [OPTIONS]")
            raise CliError(f"ERROR: unknown command 'qm disk {sub}'\n" + usage_short())
        if cmd == "cloudinit":
            sub = rest[0] if rest else ""
            if sub == "dump":
                return cmd_cloudinit_dump(ctx, rest[1:])
            raise CliError(f"ERROR: unknown command 'qm cloudinit {sub}'\n" + usage_short())
        handler = HANDLERS.get(cmd)
        if handler is None:
            raise CliError(f"ERROR: unknown command 'qm {cmd}'\n" + usage_short())
        return handler(ctx, rest)
    except CliError as exc:
        ctx.err(exc.text)
        return exc.code
