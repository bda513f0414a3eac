"""The Proxmox port: what the VM service asks of a Proxmox VE cluster, as typed operations.

The actors and jobs speak only this. Each operation names the node it acts on (any node can be
addressed), returns attrs values, and fails with one exception tree (`PveError` and its kinds),
whose `text` is Proxmox's own words as the driver met them. Operations that Proxmox runs as a
task (create, start, migrate, ...) return once the task ended, as a `Task` with its log; a task
that ended in error raises `TaskFailed` carrying that log.

Adapters: `actors.vm.pveapi.adapter.RestPve` (pveproxy's REST API with a token),
`actors.vm.cli.adapter.CliPve` (`qm`/`pvesh`/`pvesm` on the node or over SSH: command lines and
their output formats live only there) and `actors.vm.fakepve.FakePve` (in memory, for unit
tests). A new operation goes here first, then into each adapter and the simulator.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

import attrs

LineSink = Callable[[str], None]
_T = TypeVar("_T")


class Runner(Protocol):
    """Runs one piece of an adapter's work as the work of a node: the service passes its node
    actors' (actors/vm/node.py: counted, fenced, cancelled at their stop); tests pass `direct`."""

    def __call__(self, node: str, work: Callable[[], Awaitable[_T]], /) -> Awaitable[_T]: ...


async def direct(node: str, work: Callable[[], Awaitable[_T]], /) -> _T:
    return await work()


# -- values ----------------------------------------------------------------------------------


@attrs.frozen
class Task:
    """A finished Proxmox task. `upid` is None where the driver sees none (the CLI runs the
    worker in the foreground)."""

    node: str
    exitstatus: str = "OK"
    log: tuple[str, ...] = ()
    upid: str | None = None


@attrs.frozen
class VmConfig:
    """A VM's configuration: option -> value, as Proxmox stores them (the description decoded).
    Read with `.get` like a mapping, or through the properties cairn needs."""

    options: Mapping[str, str]

    def get(self, key: str, default: str = "") -> str:
        return self.options.get(key, default)

    @property
    def lock(self) -> str | None:
        return self.options.get("lock") or None

    @property
    def parent(self) -> str | None:
        """The snapshot the VM's current state descends from."""
        return self.options.get("parent") or None

    @property
    def disk_volume(self) -> str | None:
        """The volume of the boot disk (`scsi0`), without its options."""
        drive = self.options.get("scsi0")
        return drive.split(",")[0] if drive else None


@attrs.frozen
class VmStatus:
    status: str  # running | stopped | paused | ...
    lock: str | None = None


@attrs.frozen
class NodeStatus:
    cpu_flags: str  # /proc/cpuinfo's flags, space separated


@attrs.frozen
class StorageStatus:
    name: str
    type: str
    enabled: bool
    active: bool
    content: tuple[str, ...] = ()  # empty: not known (the CLI's `pvesm status` does not say)
    total: int = 0  # bytes
    used: int = 0
    avail: int = 0
    # Proxmox's own `shared` flag: every node sees the same volumes. Its plugins force it for
    # network storages, and an admin may set it on any other (`pvesm set X --shared 1`, an LVM
    # group on a SAN LUN): the flag decides, never the type. False where not known (the CLI's
    # `pvesm status` does not say; `storage_status` always does).
    shared: bool = False

    @property
    def usable(self) -> bool:
        return self.enabled and self.active

    @property
    def state(self) -> str:
        """`active`, `inactive` or `disabled`, as `pvesm status` words it."""
        if not self.enabled:
            return "disabled"
        return "active" if self.active else "inactive"


@attrs.frozen
class Volume:
    volid: str
    size: int | None = None


@attrs.frozen
class VmResource:
    vmid: int
    node: str
    status: str  # running | stopped | unknown | paused | ...
    name: str | None = None
    tags: str | None = None
    maxcpu: int | None = None
    maxmem: int | None = None
    mem: int | None = None
    maxdisk: int | None = None
    cpu: float | None = None
    lock: str | None = None
    template: int | None = None  # 1: a template, which is cloned, never started


@attrs.frozen
class NodeResource:
    node: str
    status: str
    maxcpu: int | None = None
    maxmem: int | None = None
    mem: int | None = None
    maxdisk: int | None = None
    disk: int | None = None
    cpu: float | None = None
    uptime: int | None = None  # seconds since the node booted


@attrs.frozen
class NewDisk:
    """An extra, empty disk a create allocates: `size_gb` GiB on `storage`."""

    storage: str
    size_gb: int


@attrs.frozen
class Hardware:
    """A new VM's hardware profile and cairn's mark (`description`, the caller's notes above
    it). The NIC's bridge, VLAN and MTU, the DNS settings, the tags and the extra disks come
    checked (actors/vm/shape.py): none of them can carry a `,`, `=` or newline into a
    property string."""

    name: str
    cores: int
    cpu_type: str
    memory: int  # MB
    balloon: int | None
    os_tag: str
    description: str
    bridge: str
    vlan: int | None = None
    mtu: int | None = None
    tags: tuple[str, ...] = ()  # the caller's, beside the OS's
    nameserver: str | None = None  # space-separated addresses
    searchdomain: str | None = None  # space-separated domains
    disks: tuple[NewDisk, ...] = ()  # attached as scsi1, scsi2, ...

    def net0(self) -> str:
        """The VM's one NIC: virtio on the bridge, with the VLAN tag and MTU if asked."""
        out = f"virtio,bridge={self.bridge}"
        if self.vlan is not None:
            out += f",tag={self.vlan}"
        if self.mtu is not None:
            out += f",mtu={self.mtu}"
        return out

    def options(self) -> dict[str, str]:
        """The create's options, as Proxmox names them and in the order `qm create` is given
        them: every adapter renders this one mapping (argv, form fields, the fake's config)."""
        out = {"name": self.name, "cores": str(self.cores), "cpu": self.cpu_type}
        out["memory"] = str(self.memory)
        if self.balloon is not None:
            out["balloon"] = str(self.balloon)
        out |= {"scsihw": "virtio-scsi-pci", "ostype": "l26", "agent": "1", "net0": self.net0()}
        out |= {"serial0": "socket", "vga": "serial0"}
        tags = [self.os_tag, *(t for t in self.tags if t != self.os_tag)]
        out |= {"tags": ";".join(tags), "description": self.description}
        if self.nameserver:
            out["nameserver"] = self.nameserver
        if self.searchdomain:
            out["searchdomain"] = self.searchdomain
        for i, disk in enumerate(self.disks, start=1):
            # `<storage>:<GiB>` allocates a new volume of that size (QS create_disks).
            out[f"scsi{i}"] = f"{disk.storage}:{disk.size_gb}"
        return out


@attrs.frozen
class Bridge:
    """A bridge of a node a NIC can name (`GET /nodes/{node}/network?type=any_bridge`)."""

    name: str
    mtu: int | None = None  # None: the node does not say (Linux's default, 1500)


def bridges_of(entries: list[Any]) -> list[Bridge]:
    """`/nodes/{node}/network` as either driver receives it: its bridges, by name."""
    out = []
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("iface"), str):
            continue
        if "bridge" not in str(e.get("type", "")).lower():
            continue
        mtu = e.get("mtu")
        try:
            size = int(mtu) if mtu is not None and not isinstance(mtu, bool) else None
        except (TypeError, ValueError):
            size = None
        out.append(Bridge(e["iface"], size))
    return sorted(out, key=lambda b: b.name)


@attrs.frozen
class CloudInit:
    user: str
    password_hash: str  # SHA-512 crypt; qemu-server stores a hash as it is
    sshkeys: str  # OpenSSH public key lines
    ip: str
    gateway: str
    prefix_len: int  # VM_NETMASK as a prefix length

    def options(self) -> dict[str, str]:
        """The cloud-init options but the keys (each adapter passes those its own way)."""
        return {
            "ciuser": self.user,
            "cipassword": self.password_hash,
            "ciupgrade": "0",
            "ipconfig0": f"ip={self.ip}/{self.prefix_len},gw={self.gateway}",
        }


@attrs.frozen
class ImportFrom:
    """A create's boot disk imported from a volume of the node (`import-from`), with the
    cloud-init drive on the same storage and the boot order naming the disk."""

    storage: str
    source: str  # a volid, e.g. `local:import/debian-12-generic-amd64.qcow2`
    cloud_init: CloudInit


@attrs.frozen
class Create:
    """What a new VM is made of: its hardware, with `disk` a boot disk imported from a volume
    of the node, and the pool it joins. One record, so every driver takes the same create."""

    hardware: Hardware
    disk: ImportFrom | None = None
    pool: str | None = None


@attrs.frozen
class Download:
    """An image for a node's storage to fetch from `url` into `import` content, and the
    (algorithm, digest) it must match."""

    filename: str
    url: str
    checksum: tuple[str, str] | None = None

    def params(self) -> dict[str, str]:
        """`download-url`'s parameters, as Proxmox names them (pvesh takes the API's names as
        options)."""
        params = {"content": "import", "filename": self.filename, "url": self.url}
        if self.checksum is not None:
            params |= {"checksum": self.checksum[1], "checksum-algorithm": self.checksum[0]}
        return params


# -- Proxmox's JSON of /cluster/resources, as every driver receives it -----------------------


def _opt_int(entry: dict[str, Any], key: str) -> int | None:
    value = entry.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _opt_float(entry: dict[str, Any], key: str) -> float | None:
    value = entry.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _opt_str(entry: dict[str, Any], key: str) -> str | None:
    value = entry.get(key)
    return value if isinstance(value, str) else None


# An optional field's reader, by its declared type (the annotations are strings here).
_READERS: dict[str, Callable[[dict[str, Any], str], Any]] = {
    "int | None": _opt_int,
    "float | None": _opt_float,
    "str | None": _opt_str,
}


def _optional_fields(cls: type, entry: dict[str, Any]) -> dict[str, Any]:
    """A resource's optional fields, each read from the entry key of its name: a value of
    another type, or none, is None (pvestatd fills a guest's sizes only once it has seen it)."""
    return {
        f.name: _READERS[f.type](entry, f.name)
        for f in attrs.fields(cls)
        if isinstance(f.type, str) and f.type in _READERS
    }


def vm_resources(entries: list[Any]) -> list[VmResource]:
    """QEMU guests of `/cluster/resources` (type vm); LXC entries are not ours and skipped.
    Proxmox's JSON as either driver receives it; a VM pvestatd has not seen yet has only
    `status: unknown` and no name or sizes."""
    out: list[VmResource] = []
    for e in entries:
        if not isinstance(e, dict):
            continue
        if e.get("type") != "qemu":
            continue
        vmid = _opt_int(e, "vmid")
        node = _opt_str(e, "node")
        if vmid is None or node is None:
            continue
        status = _opt_str(e, "status") or "unknown"
        out.append(VmResource(vmid, node, status, **_optional_fields(VmResource, e)))
    out.sort(key=lambda r: r.vmid)
    return out


def node_resources(entries: list[Any]) -> list[NodeResource]:
    out: list[NodeResource] = []
    for e in entries:
        if not isinstance(e, dict):
            continue
        node = _opt_str(e, "node")
        if e.get("type") != "node" or node is None:
            continue
        status = _opt_str(e, "status") or "unknown"
        out.append(NodeResource(node, status, **_optional_fields(NodeResource, e)))
    out.sort(key=lambda r: r.node)
    return out


@attrs.frozen
class Clone:
    """A clone's settings: a linked clone of a template unless `full`."""

    name: str | None = None
    target: str | None = None  # another node (the source's storage must be shared, or full)
    full: bool = False
    storage: str | None = None  # a full clone's disks (default: the source's)
    pool: str | None = None
    description: str | None = None  # cairn's mark for the clone

    def params(self) -> dict[str, str]:
        """The clone's options, as Proxmox names them (`qm clone` takes the API's names)."""
        out = {"name": self.name, "target": self.target, "full": "1" if self.full else None}
        out |= {"storage": self.storage, "pool": self.pool, "description": self.description}
        return {k: v for k, v in out.items() if v is not None}


@attrs.frozen
class Snapshot:
    """One snapshot of a VM, as Proxmox lists it (its `current` pseudo-entry is left out)."""

    name: str
    description: str = ""
    snaptime: int | None = None  # seconds since the epoch
    parent: str | None = None
    vmstate: bool = False  # the guest's RAM was saved with it (a rollback resumes the VM)


def snapshots_of(entries: list[Any]) -> list[Snapshot]:
    """`GET /nodes/{node}/qemu/{vmid}/snapshot` as either driver receives it, oldest first;
    the `current` entry (where the VM is now) is not a snapshot."""
    out: list[Snapshot] = []
    for e in entries:
        if not isinstance(e, dict):
            continue
        name = _opt_str(e, "name")
        if name is None or name == "current":
            continue
        vmstate = e.get("vmstate")
        out.append(
            Snapshot(
                name=name,
                description=_opt_str(e, "description") or "",
                snaptime=_opt_int(e, "snaptime") or None,
                parent=_opt_str(e, "parent") or None,
                vmstate=vmstate in (1, True, "1"),
            )
        )
    # Oldest first; snaptime has one-second steps, so a tie goes to the one nearer the root.
    parents = {s.name: s.parent for s in out}

    def depth(name: str | None) -> int:
        seen: set[str] = set()
        while name in parents and name not in seen:
            seen.add(name)
            name = parents[name]
        return len(seen)

    out.sort(key=lambda s: (s.snaptime or 0, depth(s.name), s.name))
    return out


# Proxmox's snapshot name: a configuration id (a letter, then letters, digits, `-` or `_`, two
# characters at least), at most 40 long, and not one of the names its API reserves.
SNAPSHOT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]+")
SNAPSHOT_NAME_MAX = 40
# Storage types whose volumes Proxmox snapshots in place; file storages only in qcow2 format.
SNAPSHOT_STORAGE_TYPES = frozenset({"lvmthin", "zfspool", "rbd", "zfs"})
FILE_STORAGE_TYPES = frozenset({"dir", "nfs", "cifs", "glusterfs", "cephfs", "btrfs"})


def snapshot_name_error(name: str) -> str | None:
    """Why Proxmox would refuse `name` as a snapshot's name, or None."""
    if not SNAPSHOT_NAME.fullmatch(name):
        return (
            f"invalid snapshot name '{name}': it must start with a letter and have at least 2 "
            "characters, letters, digits, '-' or '_'"
        )
    if len(name) > SNAPSHOT_NAME_MAX:
        return f"invalid snapshot name '{name}': at most {SNAPSHOT_NAME_MAX} characters"
    if name == "current" or name.lower() == "pending":
        return f"invalid snapshot name '{name}': the name is reserved by Proxmox"
    return None


_DISK_KEY = re.compile(r"(scsi|virtio|sata|ide|efidisk|tpmstate)\d+")


def snapshot_refusal(config: VmConfig, storage_types: Mapping[str, str]) -> str | None:
    """Why Proxmox cannot snapshot this VM (a disk on a storage without snapshots), or None:
    the check it makes before it changes anything (cdrom and cloud-init drives do not count).
    `storage_types`: storage -> type, of the storages the caller can see."""
    for key in sorted(config.options):
        if not _DISK_KEY.fullmatch(key):
            continue
        drive = config.options[key]
        if "media=cdrom" in drive or "cloudinit" in drive.split(",")[0] or drive.startswith("none"):
            continue
        volid = drive.split(",")[0]
        storage, sep, volname = volid.partition(":")
        if not sep:
            return f"disk {key} ({volid}) is not on a Proxmox storage"
        stype = storage_types.get(storage)
        if stype is None or stype in SNAPSHOT_STORAGE_TYPES:
            continue  # a storage cairn cannot see (no Datastore.Audit): Proxmox will say
        if stype in FILE_STORAGE_TYPES and volname.endswith(".qcow2"):
            continue
        fmt = " in raw format" if stype in FILE_STORAGE_TYPES else ""
        return f"disk {key} is on {stype} storage '{storage}'{fmt}, which cannot take snapshots"
    return None


# -- errors ----------------------------------------------------------------------------------


class PveError(Exception):
    """Proxmox (or the way to it) refused or failed an operation. `text`: its words; `log`:
    the lines its task or command printed before it failed, if any."""

    def __init__(self, text: str, log: tuple[str, ...] = ()) -> None:
        self.text = text
        self.log = log
        super().__init__(text)


class Unreachable(PveError):
    """No answer from the node or pveproxy: the operation may or may not have run."""


class Unreadable(PveError):
    """An answer without the shape Proxmox documents for it."""


class Refused(PveError):
    """Proxmox refused the request before doing anything (a parameter, the credentials)."""


class PermissionDenied(Refused):
    def __init__(self, text: str, privilege: str | None = None, path: str | None = None) -> None:
        super().__init__(text)  # the privilege and path PVE named, when it named them
        self.privilege = privilege
        self.path = path


class NotFound(PveError):
    """The VM, node, storage or task does not exist (Proxmox says so in a 500, not a 404)."""


class AlreadyExists(PveError):
    """A create met a guest with the same id (`kind` VM or CT) on `node`."""

    def __init__(
        self, text: str, kind: str, vmid: int, node: str, log: tuple[str, ...] = ()
    ) -> None:
        super().__init__(text, log)
        self.kind = kind
        self.vmid = vmid
        self.node = node


class Locked(PveError):
    def __init__(self, text: str, lock: str, log: tuple[str, ...] = ()) -> None:
        super().__init__(text, log)
        self.lock = lock


class TaskFailed(PveError):
    """A task that started and ended in error: `text` is its exit status, `log` its lines."""

    def __init__(self, text: str, log: tuple[str, ...] = (), upid: str | None = None) -> None:
        super().__init__(text, log)
        self.upid = upid


class Unsupported(PveError):
    """This driver cannot do this operation (e.g. import a file of cairn's through a token)."""


_EXISTS = re.compile(r"(VM|CT) (\d+) already exists on node '([^']+)'")
_LOCKED = re.compile(r"VM is locked \(([^)]+)\)")
_MISSING = ("does not exist", "no such resource", "no such file or directory", "no such storage")


def classify(text: str, *, log: tuple[str, ...] = (), task: bool = False) -> PveError:
    """Proxmox's error words as the kind of failure they say, the same for every driver:
    `already exists`, `VM is locked (x)`, `does not exist`; else a TaskFailed (a task's end)
    or a plain PveError."""
    if match := _EXISTS.search(text):
        kind = "container" if match[1] == "CT" else "VM"
        return AlreadyExists(text, kind, int(match[2]), match[3], log)
    if match := _LOCKED.search(text):
        return Locked(text, match[1], log)
    if any(s in text.lower() for s in _MISSING):
        return NotFound(text, log)
    return TaskFailed(text, log) if task else PveError(text, log)


# -- the port --------------------------------------------------------------------------------


class Pve(Protocol):
    """Every operation the VM service asks of Proxmox (see the module's docstring)."""

    driver: str  # `api` or `cli`: whose words the errors are in

    # Reads
    async def version(self, node: str) -> str: ...
    async def cluster_vms(self) -> list[VmResource]: ...
    async def cluster_nodes(self) -> list[NodeResource]: ...
    async def node_status(self, node: str) -> NodeStatus: ...
    async def storages(self, node: str, content: str | None = None) -> list[StorageStatus]: ...
    async def storage_status(self, node: str, storage: str) -> StorageStatus: ...
    async def storage_content(self, node: str, storage: str, content: str) -> list[Volume]: ...
    async def next_id(self) -> int: ...
    async def bridges(self, node: str) -> list[Bridge]: ...
    async def vm_config(self, node: str, vmid: int) -> VmConfig: ...
    async def vm_status(self, node: str, vmid: int) -> VmStatus: ...
    async def active_tasks(self, node: str, vmid: int) -> list[str]:
        """The UPIDs of the tasks `node` runs now for VM `vmid`."""
        ...

    async def privileges(self, path: str) -> frozenset[str] | None:
        """What Proxmox lets cairn's credentials do on an ACL path (`/vms`, `/pool/<name>`):
        the privileges granted there or above it. None where Proxmox checks no ACL (qm as
        root over SSH)."""
        ...

    # VM tasks
    async def create(self, node: str, vmid: int, spec: Create) -> Task: ...
    async def import_disk(self, node: str, vmid: int, path: str, storage: str) -> str: ...
    async def clone(self, node: str, vmid: int, newid: int, spec: Clone) -> Task: ...
    async def template(self, node: str, vmid: int) -> Task: ...
    async def set_config(
        self, node: str, vmid: int, options: Mapping[str, str], *, sshkeys: str | None = None
    ) -> Task: ...
    async def resize(
        self, node: str, vmid: int, disk: str, size: str, *, on_line: LineSink | None = None
    ) -> Task: ...
    async def start(self, node: str, vmid: int) -> Task: ...
    async def stop(self, node: str, vmid: int, *, cleanup: bool = False) -> Task: ...
    async def shutdown(self, node: str, vmid: int) -> Task: ...
    async def reboot(self, node: str, vmid: int) -> Task: ...
    async def migrate(
        self, node: str, vmid: int, target: str, *, on_line: LineSink | None = None
    ) -> Task: ...
    async def destroy(self, node: str, vmid: int, *, cleanup: bool = False) -> Task: ...

    # Snapshots (`snapshot_refusal` says up front whether the VM's storages can take them)
    async def snapshots(self, node: str, vmid: int) -> list[Snapshot]: ...
    async def snapshot(
        self, node: str, vmid: int, name: str, *, description: str = "", vmstate: bool = False
    ) -> Task:
        """Take a snapshot; `vmstate` saves the RAM too (Proxmox ignores it on a stopped VM)."""
        ...

    async def rollback(self, node: str, vmid: int, name: str, *, start: bool = False) -> Task:
        """Go back to a snapshot. Proxmox stops a running VM first; it runs again afterwards
        only if the snapshot holds RAM (resumed) or `start` asks for it."""
        ...

    async def delete_snapshot(self, node: str, vmid: int, name: str) -> Task: ...

    # Storage tasks
    async def download_url(self, node: str, storage: str, image: Download) -> Task: ...
    async def wait_task(self, upid: str, *, on_line: LineSink | None = None) -> Task: ...

    async def close(self) -> None: ...
