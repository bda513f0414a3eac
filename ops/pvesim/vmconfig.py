"""Rules about a VM config dict (pure): drives, boot order, volume names, cloud-init data."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from .args import property_string
from .formats import GIB, format_size, parse_size

DRIVE_RE = re.compile(r"^(ide|sata|scsi|virtio)(\d+)$")
NET_RE = re.compile(r"^net(\d+)$")
UNUSED_RE = re.compile(r"^unused(\d+)$")
# Bus order of PVE's valid_drive_names (QS Drive.pm): ide, sata, scsi, virtio.
_BUS_ORDER = {"ide": 0, "sata": 1, "scsi": 2, "virtio": 3}

DRIVE_KEYS = (
    [f"ide{i}" for i in range(4)]
    + [f"sata{i}" for i in range(6)]
    + [f"scsi{i}" for i in range(31)]
    + [f"virtio{i}" for i in range(16)]
)

OS_DEFAULT_USERS = {"debian": "debian", "ubuntu": "ubuntu", "rockylinux": "rocky", "rocky": "rocky"}


def drive_sort_key(key: str) -> tuple[int, int]:
    m = DRIVE_RE.match(key)
    assert m
    return _BUS_ORDER[m.group(1)], int(m.group(2))


def parse_drive(value: str) -> dict[str, str]:
    return property_string(value, "file") or {"file": value}


def print_drive(drive: Mapping[str, str]) -> str:
    rest = [f"{k}={v}" for k, v in drive.items() if k != "file"]
    return ",".join([drive["file"], *rest])


def is_cdrom(value: str) -> bool:
    drive = parse_drive(value)
    return drive.get("media") == "cdrom" or drive["file"] in ("cdrom", "none")


def drives(config: Mapping[str, Any]) -> list[str]:
    return sorted((k for k in config if DRIVE_RE.match(k)), key=drive_sort_key)


def default_boot_order(config: Mapping[str, Any]) -> str | None:
    """QS get_default_bootdevices: first disk, first cdrom, first net."""
    devices: list[str] = []
    disks = [k for k in drives(config) if not is_cdrom(str(config[k]))]
    cdroms = [k for k in drives(config) if is_cdrom(str(config[k]))]
    nets = sorted((k for k in config if NET_RE.match(k)), key=lambda k: int(k[3:]))
    for group in (disks, cdroms, nets):
        if group:
            devices.append(group[0])
    return f"order={';'.join(devices)}" if devices else None


def boot_devices(config: Mapping[str, Any]) -> list[str]:
    """The devices the firmware tries, in order (new `order=` syntax or legacy letters)."""
    boot = str(config.get("boot", ""))
    if boot.startswith("order="):
        return [d for d in boot[len("order=") :].split(";") if d]
    if boot == "" and "bootdisk" not in config:
        order = default_boot_order(config)
        return boot_devices({"boot": order}) if order else []
    legacy = boot or "cdn"
    devices: list[str] = []
    for letter in legacy:
        if letter == "c" and config.get("bootdisk"):
            devices.append(str(config["bootdisk"]))
        elif letter == "d":
            devices += [k for k in drives(config) if is_cdrom(str(config[k]))][:1]
        elif letter == "n":
            devices += sorted((k for k in config if NET_RE.match(k)), key=lambda k: int(k[3:]))[:1]
    return devices


def first_boot_disk(config: Mapping[str, Any]) -> str | None:
    for dev in boot_devices(config):
        if DRIVE_RE.match(dev) and dev in config and not is_cdrom(str(config[dev])):
            return dev
    return None


def drive_size(value: str) -> int:
    size = parse_drive(value).get("size")
    return (parse_size(size) or 0) if size else 0


def boot_disk_size(config: Mapping[str, Any]) -> int:
    disk = first_boot_disk(config)
    return drive_size(str(config[disk])) if disk else 0


def referenced_volids(config: Mapping[str, Any]) -> list[str]:
    vols = []
    for key, value in config.items():
        if DRIVE_RE.match(key) or UNUSED_RE.match(key):
            file = parse_drive(str(value))["file"]
            if ":" in file:
                vols.append(file)
    return vols


def next_free_key(config: Mapping[str, Any], prefix: str) -> str:
    i = 0
    while f"{prefix}{i}" in config:
        i += 1
    return f"{prefix}{i}"


def decode_sshkeys(config: Mapping[str, Any]) -> list[str]:
    raw = unquote(str(config.get("sshkeys", "")))
    return [line.strip() for line in raw.splitlines() if line.strip()]


def static_ip(config: Mapping[str, Any]) -> str | None:
    """The address cloud-init gives eth0, or None (DHCP, or an ipconfig cloud-init drops)."""
    props = property_string(str(config.get("ipconfig0", ""))) or {}
    ip = props.get("ip")
    if not ip or ip in ("dhcp", "manual") or "/" not in ip:
        return None
    return ip.split("/", 1)[0]


def cloud_user(config: Mapping[str, Any], image_name: str | None) -> str | None:
    """ciuser, else the image's default user (from the tags, else the image file name)."""
    if config.get("ciuser"):
        return str(config["ciuser"])
    for tag in re.split(r"[;, ]+", str(config.get("tags", ""))):
        if tag.lower() in OS_DEFAULT_USERS:
            return OS_DEFAULT_USERS[tag.lower()]
    if image_name:
        low = image_name.lower()
        for name, user in OS_DEFAULT_USERS.items():
            if name in low:
                return user
    return None


def maxcpu(config: Mapping[str, Any], host_cpus: int) -> int:
    if config.get("vcpus"):
        return int(config["vcpus"])
    return min(int(config.get("sockets", 1)) * int(config.get("cores", 1)), host_cpus)


def memory_bytes(config: Mapping[str, Any]) -> int:
    return int(config.get("memory", 512)) * 1024 * 1024


# --- volume names per storage type (ST Plugin parse_volname) -----------------------------------

# Storages that keep volumes as files under <path>/images/<vmid>/ (DirPlugin and its children).
FILE_STORAGES = ("dir", "nfs", "cifs")


def is_file_storage(storage_type: str) -> bool:
    return storage_type in FILE_STORAGES


LVM_VOLNAME = re.compile(r"^(vm|base)-(\d+)-([\w\-.]+)$")
DIR_VOLNAME = re.compile(r"^(\d+)/((vm|base)-(\d+)-[\w\-.]+\.(raw|qcow2|vmdk))$")


def parse_volname(storage_type: str, volname: str) -> tuple[int, str] | str:
    """(owner vmid, volname) or the error text real storage plugins die with."""
    if is_file_storage(storage_type):
        m = DIR_VOLNAME.match(volname)
        if not m:
            return f"unable to parse directory volume name '{volname}'"
        return int(m.group(1)), volname
    m = LVM_VOLNAME.match(volname)
    if not m:
        return f"unable to parse lvm volume name '{volname}'"
    return int(m.group(2)), volname


def new_volname(storage_type: str, vmid: int, taken: set[str], fmt: str | None) -> str:
    """The next free `vm-<id>-disk-<n>`; on file storages the number is shared by every format
    (ST Plugin find_free_diskname looks at the names without their extension)."""
    used = {name.split("/")[-1].rsplit(".", 1)[0] if is_file_storage(storage_type) else name
            for name in taken}  # fmt: skip
    i = 0
    while True:
        base = f"vm-{vmid}-disk-{i}"
        if base not in used:
            return f"{vmid}/{base}.{fmt or 'raw'}" if is_file_storage(storage_type) else base
        i += 1


def cloudinit_volname(storage_type: str, vmid: int) -> str:
    if is_file_storage(storage_type):
        return f"{vmid}/vm-{vmid}-cloudinit.qcow2"
    return f"vm-{vmid}-cloudinit"


def size_option(size: int) -> str:
    return format_size(size)


def gib(size: int) -> float:
    return size / GIB


# Proxmox's own OUI, the prefix of the MACs it makes up for new NICs.
MAC_OUI = "BC:24:11"


def random_mac() -> str:
    return MAC_OUI + "".join(f":{random.randint(0, 255):02X}" for _ in range(3))


def stored_description(text: str) -> str:
    """The description as it reads back: kept as `#` comment lines of the config file, each
    line gets its newline back (as Proxmox writes and parses a VM's config)."""
    lines = text.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    return "".join(line + "\n" for line in lines)
