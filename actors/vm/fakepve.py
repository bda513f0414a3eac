"""An in-memory Proxmox behind the port, for fast unit tests of the pipeline and the actors.

It keeps VMs, volumes and storages in dicts and follows the rules the pipeline relies on (a
running VM is not destroyed or migrated, a locked VM refuses, an id is taken once, the mark is
what the create wrote), in Proxmox's words. It is not the simulator: no command lines, no
HTTP, no guests; the end-to-end tests run against ops/pvesim. `fail(op, error)` makes the next
call of an operation raise; `calls` lists every operation asked, in order.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import attrs

from actors.vm import pve
from actors.vm.pve import LineSink


@attrs.define
class FakeVm:
    node: str
    config: dict[str, str]
    status: str = "stopped"
    snapshots: dict[str, FakeSnapshot] = attrs.field(factory=dict)


@attrs.define
class FakeSnapshot:
    config: dict[str, str]  # the VM's config when it was taken
    snaptime: int
    description: str = ""
    parent: str | None = None
    vmstate: bool = False


@attrs.define
class FakePve:
    nodes: tuple[str, ...] = ("pve1", "pve2", "pve3")
    release: str = "8.4"
    storage_types: dict[str, str] = attrs.field(factory=lambda: {"local-lvm": "lvmthin"})
    import_storage: str = "local"
    shared_storages: frozenset[str] = frozenset()  # storages with Proxmox's `shared` flag
    driver: str = "api"
    node_bridges: tuple[str, ...] = ("vmbr0",)
    vms: dict[int, FakeVm] = attrs.field(factory=dict)
    volumes: dict[str, set[str]] = attrs.field(factory=dict)  # node -> volids
    calls: list[tuple[str, str, int | None]] = attrs.field(factory=list)
    running: dict[int, list[str]] = attrs.field(factory=dict)  # vmid -> UPIDs of live tasks
    # What the credentials may do on every ACL path (None: root over SSH, no ACL checked).
    granted: frozenset[str] | None = None
    _failures: dict[tuple[str, int | None], list[pve.PveError]] = attrs.field(factory=dict)

    # -- the test's handles ----------------------------------------------------------------

    def fail(self, op: str, error: pve.PveError, *, vmid: int | None = None) -> None:
        """The next `op` (of VM `vmid`, or any) raises `error`."""
        self._failures.setdefault((op, vmid), []).append(error)

    def _ask(self, op: str, node: str, vmid: int | None = None) -> None:
        self.calls.append((op, node, vmid))
        if node not in self.nodes:
            raise pve.NotFound(f"no such cluster node '{node}'")
        for key in ((op, vmid), (op, None)):
            if self._failures.get(key):
                raise self._failures[key].pop(0)

    def _vm(self, node: str, vmid: int) -> FakeVm:
        vm = self.vms.get(vmid)
        if vm is None or vm.node != node:
            raise pve.NotFound(
                f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
            )
        return vm

    def _unlocked(self, vm: FakeVm) -> None:
        if lock := vm.config.get("lock"):
            raise pve.Locked(f"VM is locked ({lock})", lock)

    def _unlocked_vm(self, operation: str, node: str, vmid: int) -> FakeVm:
        """The VM a change acts on, asked for as `operation`: it must exist and be unlocked."""
        self._ask(operation, node, vmid)
        vm = self._vm(node, vmid)
        self._unlocked(vm)
        return vm

    def _snapshot_of(
        self, operation: str, node: str, vmid: int, name: str
    ) -> tuple[FakeVm, FakeSnapshot]:
        """The VM and its snapshot `name` an operation acts on (Proxmox looks for the snapshot
        before the lock)."""
        self._ask(operation, node, vmid)
        vm = self._vm(node, vmid)
        snap = vm.snapshots.get(name)
        if snap is None:
            raise pve.NotFound(f"snapshot '{name}' does not exist")
        self._unlocked(vm)
        return vm, snap

    # -- reads -----------------------------------------------------------------------------

    async def version(self, node: str) -> str:
        self._ask("version", node)
        return self.release

    async def cluster_vms(self) -> list[pve.VmResource]:
        self._ask("cluster_vms", self.nodes[0])
        return [
            pve.VmResource(
                vmid,
                vm.node,
                vm.status,
                vm.config.get("name"),
                vm.config.get("tags"),
                template=1 if vm.config.get("template") in ("1", 1) else None,
            )
            for vmid, vm in sorted(self.vms.items())
        ]

    async def cluster_nodes(self) -> list[pve.NodeResource]:
        self._ask("cluster_nodes", self.nodes[0])
        return [pve.NodeResource(n, "online", maxcpu=8) for n in self.nodes]

    async def node_status(self, node: str) -> pve.NodeStatus:
        self._ask("node_status", node)
        return pve.NodeStatus("sse4_1 sse4_2 ssse3 cx16 lahf_lm popcnt pni aes")

    async def storages(self, node: str, content: str | None = None) -> list[pve.StorageStatus]:
        self._ask("storages", node)
        return [
            pve.StorageStatus(
                name, kind, True, True, ("images",), shared=name in self.shared_storages
            )
            for name, kind in sorted(self.storage_types.items())
        ]

    async def storage_status(self, node: str, storage: str) -> pve.StorageStatus:
        self._ask("storage_status", node)
        if storage == self.import_storage:
            return pve.StorageStatus(storage, "dir", True, True, ("iso", "import"))
        if storage not in self.storage_types:
            raise pve.NotFound("storage: No such storage.")
        kind, shared = self.storage_types[storage], storage in self.shared_storages
        return pve.StorageStatus(storage, kind, True, True, ("images",), shared=shared)

    async def storage_content(self, node: str, storage: str, content: str) -> list[pve.Volume]:
        self._ask("storage_content", node)
        found = sorted(v for v in self.volumes.get(node, set()) if v.startswith(f"{storage}:"))
        return [pve.Volume(v) for v in found]

    async def next_id(self) -> int:
        self._ask("next_id", self.nodes[0])
        return next(i for i in range(100, 1_000_000) if i not in self.vms)

    async def bridges(self, node: str) -> list[pve.Bridge]:
        self._ask("bridges", node)
        return [pve.Bridge(name) for name in sorted(self.node_bridges)]

    async def vm_config(self, node: str, vmid: int) -> pve.VmConfig:
        self._ask("vm_config", node, vmid)
        return pve.VmConfig(dict(self._vm(node, vmid).config))

    async def vm_status(self, node: str, vmid: int) -> pve.VmStatus:
        self._ask("vm_status", node, vmid)
        vm = self._vm(node, vmid)
        return pve.VmStatus(vm.status, vm.config.get("lock"))

    async def active_tasks(self, node: str, vmid: int) -> list[str]:
        self._ask("active_tasks", node, vmid)
        return list(self.running.get(vmid, []))

    async def privileges(self, path: str) -> frozenset[str] | None:
        self._ask("privileges", self.nodes[0])
        return self.granted

    # -- VM tasks --------------------------------------------------------------------------

    async def create(self, node: str, vmid: int, spec: pve.Create) -> pve.Task:
        self._ask("create", node, vmid)
        if (other := self.vms.get(vmid)) is not None:
            raise pve.AlreadyExists(
                f"unable to create VM {vmid} - VM {vmid} already exists on node '{other.node}'",
                "VM",
                vmid,
                other.node,
            )
        config = spec.hardware.options()
        for key in [k for k in config if k.startswith("scsi") and k != "scsihw"]:
            storage, _, size = config[key].partition(":")  # a new volume of `size` GiB
            config[key] = f"{storage}:vm-{vmid}-disk-{key[4:]},size={size}G"
        if (disk := spec.disk) is not None:
            config["scsi0"] = f"{disk.storage}:vm-{vmid}-disk-0"
            config |= disk.cloud_init.options() | {"ide2": f"{disk.storage}:cloudinit"}
        self.vms[vmid] = FakeVm(node, config)
        return pve.Task(node)

    async def import_disk(self, node: str, vmid: int, path: str, storage: str) -> str:
        self._ask("import_disk", node, vmid)
        vm = self._vm(node, vmid)
        volid = f"{storage}:vm-{vmid}-disk-0"
        vm.config["unused0"] = volid
        return volid

    async def clone(self, node: str, vmid: int, newid: int, spec: pve.Clone) -> pve.Task:
        self._ask("clone", node, vmid)
        source = self._vm(node, vmid)
        if newid in self.vms:
            other = self.vms[newid].node
            text = f"unable to create VM {newid} - VM {newid} already exists on node '{other}'"
            raise pve.AlreadyExists(text, "VM", newid, other)
        config = {k: v for k, v in source.config.items() if k not in ("template", "lock")}
        if spec.name:
            config["name"] = spec.name
        if spec.description is not None:
            config["description"] = spec.description
        self.vms[newid] = FakeVm(spec.target or node, config)
        return pve.Task(node)

    async def template(self, node: str, vmid: int) -> pve.Task:
        vm = self._unlocked_vm("template", node, vmid)
        if vm.status == "running":
            raise pve.PveError("you can't convert a VM to template if VM is running")
        vm.config["template"] = "1"
        return pve.Task(node)

    async def set_config(
        self, node: str, vmid: int, options: Mapping[str, str], *, sshkeys: str | None = None
    ) -> pve.Task:
        vm = self._unlocked_vm("set_config", node, vmid)
        vm.config |= dict(options)
        if sshkeys:
            vm.config["sshkeys"] = sshkeys
        return pve.Task(node)

    async def resize(
        self, node: str, vmid: int, disk: str, size: str, *, on_line: LineSink | None = None
    ) -> pve.Task:
        self._ask("resize", node, vmid)
        vm = self._vm(node, vmid)
        if disk not in vm.config:
            raise pve.TaskFailed(f"disk '{disk}' does not exist")
        vm.config[disk] = vm.config[disk].split(",")[0] + f",size={size.lstrip('+')}"
        return pve.Task(node)

    async def start(self, node: str, vmid: int) -> pve.Task:
        vm = self._unlocked_vm("start", node, vmid)
        if vm.status == "running":
            raise pve.TaskFailed(f"VM {vmid} already running")
        vm.status = "running"
        return pve.Task(node)

    async def stop(self, node: str, vmid: int, *, cleanup: bool = False) -> pve.Task:
        self._ask("stop", node, vmid)
        self._vm(node, vmid).status = "stopped"
        return pve.Task(node)

    async def shutdown(self, node: str, vmid: int) -> pve.Task:
        self._ask("shutdown", node, vmid)
        self._vm(node, vmid).status = "stopped"
        return pve.Task(node)

    async def reboot(self, node: str, vmid: int) -> pve.Task:
        self._ask("reboot", node, vmid)
        if self._vm(node, vmid).status != "running":
            raise pve.TaskFailed(f"VM {vmid} not running")
        return pve.Task(node)

    async def migrate(
        self, node: str, vmid: int, target: str, *, on_line: LineSink | None = None
    ) -> pve.Task:
        self._ask("migrate", node, vmid)
        vm = self._vm(node, vmid)
        if target not in self.nodes:
            raise pve.PveError(f"no such cluster node '{target}'")
        if vm.status == "running":
            raise pve.PveError("can't migrate running VM without --online")
        if on_line is not None:
            on_line(f"starting migration of VM {vmid} to node '{target}'")
        vm.node = target
        return pve.Task(node)

    async def destroy(self, node: str, vmid: int, *, cleanup: bool = False) -> pve.Task:
        self._ask("destroy", node, vmid)
        vm = self._vm(node, vmid)
        if not cleanup:
            self._unlocked(vm)
        if vm.status == "running":
            raise pve.TaskFailed(f"VM {vmid} is running - destroy failed")
        del self.vms[vmid]
        return pve.Task(node)

    # -- storage tasks ---------------------------------------------------------------------

    # -- snapshots (Proxmox's rules: see docs/simulator.md) ---------------------------------

    async def snapshots(self, node: str, vmid: int) -> list[pve.Snapshot]:
        self._ask("snapshots", node, vmid)
        vm = self._vm(node, vmid)
        entries = [
            attrs.asdict(s, filter=lambda a, _: a.name != "config") | {"name": name}
            for name, s in vm.snapshots.items()
        ]
        return pve.snapshots_of(entries)

    async def snapshot(
        self, node: str, vmid: int, name: str, *, description: str = "", vmstate: bool = False
    ) -> pve.Task:
        self._ask("snapshot", node, vmid)
        vm = self._vm(node, vmid)
        if error := pve.snapshot_name_error(name):
            raise pve.Refused(error)
        self._unlocked(vm)
        if name in vm.snapshots:
            raise pve.TaskFailed(f"snapshot name '{name}' already used")
        if pve.snapshot_refusal(pve.VmConfig(vm.config), self.storage_types):
            raise pve.TaskFailed("snapshot feature is not available")
        config = {k: v for k, v in vm.config.items() if k != "parent"}
        vm.snapshots[name] = FakeSnapshot(
            config,
            snaptime=int(time.time()),
            description=description,
            parent=vm.config.get("parent"),
            vmstate=vmstate and vm.status == "running",
        )
        vm.config["parent"] = name
        return pve.Task(node)

    async def rollback(self, node: str, vmid: int, name: str, *, start: bool = False) -> pve.Task:
        vm, snap = self._snapshot_of("rollback", node, vmid, name)
        vm.config = dict(snap.config) | {"parent": name}
        vm.status = "running" if snap.vmstate or start else "stopped"
        return pve.Task(node)

    async def delete_snapshot(self, node: str, vmid: int, name: str) -> pve.Task:
        vm, snap = self._snapshot_of("delete_snapshot", node, vmid, name)
        # Its children (and the VM, if it descends from it) move up to its parent.
        for other in vm.snapshots.values():
            if other.parent == name:
                other.parent = snap.parent
        if vm.config.get("parent") == name:
            if snap.parent:
                vm.config["parent"] = snap.parent
            else:
                vm.config.pop("parent")
        del vm.snapshots[name]
        return pve.Task(node)

    async def download_url(self, node: str, storage: str, image: pve.Download) -> pve.Task:
        self._ask("download_url", node)
        filename = image.filename
        volid = f"{storage}:import/{filename}"
        held = self.volumes.setdefault(node, set())
        if volid in held:
            return pve.Task(node, log=(f"file '{filename}' exists, no need to download",))
        held.add(volid)
        return pve.Task(node, log=(f"downloading {image.url}",))

    async def wait_task(self, upid: str, *, on_line: LineSink | None = None) -> pve.Task:
        raise pve.NotFound(f"upid: no such task {upid}")

    async def close(self) -> None:
        return None
