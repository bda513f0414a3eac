"""Request bodies: parsing untrusted JSON into typed requests, and the spec's clamping rules.

Parsing refuses what is malformed (a 400 whose message starts with the field's name); clamping
adjusts what is well-formed but out of bounds, and says so, because the install stream reports
every adjustment it makes.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

import asyncssh
import attrs

from actors.vm.osimages import MATRIX, default_user
from actors.vm.pve import snapshot_name_error
from actors.vm.settings import VMID_MAX, VMID_MIN, VmSettings
from actors.vm.shape import SHAPE_FIELDS, GuestShape, ShapeError, parse_shape

DEFAULT_CPU = 2
DEFAULT_RAM = 2048
DEFAULT_DISK_GB = 16
MIN_RAM = 512
MIN_DISK_GB = 16
MAX_CPU = 32

# The install body's fields (spec), and names people reach for instead of them.
INSTALL_FIELDS = (
    "os",
    "version",
    "name",
    "id",
    "node",
    "cpu",
    "ram",
    "disk",
    "user",
    "passwd",
    "pubkey",
)
_MEANT = {
    "memory": "ram",
    "mem": "ram",
    "ram_mb": "ram",
    "vmid": "id",
    "vm_id": "id",
    "password": "passwd",
    "pass": "passwd",
    "cores": "cpu",
    "cpus": "cpu",
    "vcpu": "cpu",
    "vcpus": "cpu",
    "disk_size": "disk",
    "size": "disk",
    "storage": "disk",
    "username": "user",
    "ssh_key": "pubkey",
    "sshkey": "pubkey",
    "sshkeys": "pubkey",
    "public_key": "pubkey",
    "key": "pubkey",
    "hostname": "name",
    "os_version": "version",
    "target": "node",
}

_DISK = re.compile(r"^([0-9]{1,6})G$")
_DNS_NAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_MAX_PASSWD = 128
_MAX_PUBKEY = 16384


class BadRequest(ValueError):
    """The body breaks a rule; `str()` is the message shown to the client (400)."""


@attrs.frozen
class InstallRequest:
    os: str
    version: str
    name: str | None = None
    vmid: int | None = None
    node: str | None = None
    cpu: int = DEFAULT_CPU
    ram: int = DEFAULT_RAM
    disk_gb: int = DEFAULT_DISK_GB
    user: str = ""
    # None: the requester gave none; the gateway then makes a random one it shows once, and
    # a request arriving without one anyway gets a random one nobody sees (never a default).
    passwd: str | None = None
    pubkey: str | None = None
    # How the password crosses NATS (actors/vm/messages.py): its SHA-512 crypt hash.
    password_hash: str | None = None
    # The optional fields beyond the spec's (shape.py).
    shape: GuestShape = attrs.field(factory=GuestShape)


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest("body: must be a JSON object")
    return body


def _given(body: dict[str, Any], field: str, required: bool) -> Any:
    """The field's value; None when it is absent or null, which a required field may not be."""
    value = body.get(field)
    if value is None and required:
        raise BadRequest(f"{field}: is required")
    return value


def _str(body: dict[str, Any], field: str, required: bool = False) -> str | None:
    value = _given(body, field, required)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{field}: must be a string")
    return value


def _int(body: dict[str, Any], field: str, required: bool = False) -> int | None:
    value = _given(body, field, required)
    # bool is an int subclass in Python; true/false must not become 1/0 cores.
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise BadRequest(f"{field}: must be an integer")
    return value


def parse_disk(field: str, value: str) -> int:
    match = _DISK.match(value.strip())
    if not match:
        raise BadRequest(f"{field}: must be a whole number followed by G, like 16G")
    return int(match.group(1))


def _pubkey(value: str) -> str:
    key = value.strip()
    if not key or len(key) > _MAX_PUBKEY or "\n" in key or "\r" in key:
        raise BadRequest("pubkey: must be one OpenSSH public key on one line")
    try:
        asyncssh.import_public_key(key)
    except (asyncssh.KeyImportError, ValueError):
        raise BadRequest("pubkey: is not a valid OpenSSH public key") from None
    return key


def _shown(field: str) -> str:
    """A client's field name, safe and short enough to echo."""
    if len(field) <= 40 and field.isprintable():
        return field
    return repr(field[:40]) + ("..." if len(field) > 40 else "")


def refuse_unknown_fields(data: dict[str, Any]) -> None:
    """A field install does not take is an error, not silently a different VM (`memory`
    would otherwise leave the VM at the default 2048 MB)."""
    known = INSTALL_FIELDS + SHAPE_FIELDS
    for field in sorted(data):
        if field in known:
            continue
        meant = _MEANT.get(field.lower()) or next(
            iter(difflib.get_close_matches(field.lower(), known, n=1, cutoff=0.75)), None
        )
        if meant:
            raise BadRequest(f"{_shown(field)}: unknown field; did you mean {meant}?")
        raise BadRequest(f"{_shown(field)}: unknown field; install takes {', '.join(known)}")


def parse_install(body: Any, settings: VmSettings) -> InstallRequest:
    data = _object(body)
    refuse_unknown_fields(data)
    os_name = _str(data, "os", required=True)
    assert os_name is not None
    if os_name not in MATRIX:
        raise BadRequest(f"os: must be one of {', '.join(MATRIX)}")
    version = _str(data, "version", required=True)
    assert version is not None
    if version not in MATRIX[os_name]:
        raise BadRequest(f"version: {os_name} supports {', '.join(MATRIX[os_name])}")
    name = _str(data, "name")
    if name is not None and not _DNS_NAME.match(name):
        raise BadRequest("name: must be a DNS name (letters, digits, hyphens and dots)")
    vmid = _int(data, "id")
    if vmid is not None:
        lo, hi = max(VMID_MIN, settings.ip_start), min(VMID_MAX, settings.ip_end)
        if not lo <= vmid <= hi:
            raise BadRequest(f"id: must be between {lo} and {hi}")
    node = _str(data, "node")
    if node is not None and node not in settings.nodes:
        raise BadRequest(f"node: unknown node {node!r}; known: {', '.join(sorted(settings.nodes))}")
    cpu = _int(data, "cpu")
    ram = _int(data, "ram")
    disk = _str(data, "disk")
    user = _str(data, "user")
    if user is not None and not _USER.match(user):
        raise BadRequest("user: must be a Linux user name (lower-case letters, digits, _ and -)")
    passwd = _str(data, "passwd")
    if passwd is not None and (
        not passwd or len(passwd) > _MAX_PASSWD or any(c in passwd for c in "\r\n\0")
    ):
        raise BadRequest(f"passwd: must be 1 to {_MAX_PASSWD} characters on one line")
    pubkey = _str(data, "pubkey")
    try:
        shape = parse_shape(data, storage=settings.storage, max_disk=settings.max_disk)
    except ShapeError as exc:
        raise BadRequest(str(exc)) from None
    return InstallRequest(
        os=os_name,
        version=version,
        name=name,
        vmid=vmid,
        node=node,
        cpu=DEFAULT_CPU if cpu is None else cpu,
        ram=DEFAULT_RAM if ram is None else ram,
        disk_gb=DEFAULT_DISK_GB if disk is None else parse_disk("disk", disk),
        user=user or default_user(os_name),
        passwd=passwd,
        pubkey=_pubkey(pubkey) if pubkey else None,
        shape=shape,
    )


@attrs.frozen
class Clamped:
    value: int
    note: str | None  # what was changed, for the stream; None if the value stood


def _clamp(value: int, low: int, high: int | None, what: str, unit: str = "") -> Clamped:
    """`value` within [low, high] (no upper bound when `high` is None), saying what moved."""
    if value < low:
        return Clamped(low, f"setting {what} to minimum {low}{unit}")
    if high is not None and value > high:
        return Clamped(high, f"setting {what} to maximum {high}{unit}")
    return Clamped(value, None)


def clamp_cpu(cpu: int, settings: VmSettings) -> Clamped:
    return _clamp(cpu, 1, min(MAX_CPU, settings.max_cpu or MAX_CPU), "CPU")


def clamp_ram(ram: int, settings: VmSettings) -> Clamped:
    return _clamp(ram, MIN_RAM, settings.max_ram, "RAM")


def clamp_disk(disk_gb: int, settings: VmSettings) -> Clamped:
    return _clamp(disk_gb, MIN_DISK_GB, settings.max_disk, "disk", "G")


def balloon_for(ram: int, settings: VmSettings) -> int | None:
    """The balloon minimum in MB, or None to leave the device at Proxmox's default.

    The spec enables the balloon when RAM exceeds VM_BALLOON_MIN; the guest may then be shrunk
    down to VM_BALLOON_MIN. Without the variable nothing is passed.
    """
    if settings.balloon_min is None or ram <= settings.balloon_min:
        return None
    return settings.balloon_min


def memory_balloon(ram: int, settings: VmSettings, config: Mapping[str, str]) -> int | None:
    """The `--balloon` that goes with a new RAM size (`config`: the VM's `qm config`), or None
    to leave the balloon alone.

    With VM_BALLOON_MIN set and RAM above it, that minimum, as at install. Otherwise a balloon
    minimum the VM already has above the new RAM comes down to the RAM: Proxmox refuses a
    balloon larger than the memory, and a balloon equal to it means no ballooning.
    """
    target = balloon_for(ram, settings)
    if target is not None:
        return target
    try:
        current = int(config.get("balloon", "0"))
    except ValueError:
        current = 0
    return ram if current > ram else None


def parse_set_cpu(body: Any, settings: VmSettings) -> int:
    cpu = _int(_object(body), "cpu", required=True)
    assert cpu is not None
    if not 1 <= cpu <= MAX_CPU:
        raise BadRequest(f"cpu: must be between 1 and {MAX_CPU}")
    return clamp_cpu(cpu, settings).value


def parse_set_memory(body: Any, settings: VmSettings) -> int:
    memory = _int(_object(body), "memory", required=True)
    assert memory is not None
    if memory < MIN_RAM:
        raise BadRequest(f"memory: must be at least {MIN_RAM}")
    return clamp_ram(memory, settings).value


def parse_set_disk(body: Any) -> int:
    disk = _str(_object(body), "disk", required=True)
    assert disk is not None
    if disk.strip().startswith("-"):
        raise BadRequest("disk: shrinking is not supported")
    grow = parse_disk("disk", disk)
    if grow < 1:
        raise BadRequest("disk: must grow the disk by at least 1G")
    return grow


def parse_set_node(body: Any, settings: VmSettings) -> str:
    node = _str(_object(body), "node", required=True)
    assert node is not None
    if node not in settings.nodes:
        raise BadRequest(f"node: unknown node {node!r}; known: {', '.join(sorted(settings.nodes))}")
    return node


# A snapshot's description: Proxmox stores it in the VM's config file, whose size it caps.
SNAPSHOT_DESCRIPTION_MAX = 1024


def parse_snapshot_name(name: Any) -> str:
    """A snapshot's name as Proxmox takes it (pve.snapshot_name_error), else a 400."""
    if not isinstance(name, str):
        raise BadRequest("name: must be a string")
    if error := snapshot_name_error(name):
        raise BadRequest(f"name: {error}")
    return name


def parse_snapshot(body: Any) -> dict[str, Any]:
    """`POST /api/vm/<id>/snapshots`: {name, description?, vmstate?}."""
    data = _object(body)
    unknown = sorted(set(data) - {"name", "description", "vmstate"})
    if unknown:
        raise BadRequest(f"{unknown[0]}: unknown field; known: name, description, vmstate")
    if data.get("name") is None:
        raise BadRequest("name: is required")
    name = parse_snapshot_name(data["name"])
    description = _str(data, "description") or ""
    if len(description) > SNAPSHOT_DESCRIPTION_MAX:
        raise BadRequest(f"description: at most {SNAPSHOT_DESCRIPTION_MAX} characters")
    if "\x00" in description:
        raise BadRequest("description: must not contain NUL characters")
    vmstate = data.get("vmstate", False)
    if not isinstance(vmstate, bool):
        raise BadRequest("vmstate: must be true or false")
    return {"name": name, "description": description, "vmstate": vmstate}
