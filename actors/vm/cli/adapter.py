"""The CLI adapter of the Proxmox port: each operation as a `qm`/`pvesh`/`pvesm` command line run
on the node (a local subprocess on the main node, SSH to the others), its output parsed.

Command lines (argv.py) and the parsers of what they print (output.py) are this package's own
business: nothing outside actors/vm/cli builds or reads them (tests/vm/test_port_boundary.py).
A failed command becomes the port's exception for Proxmox's words (`pve.classify`), with what
the command printed as its log.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from urllib.parse import unquote

import attrs

from actors.vm import apistorage, pve
from actors.vm.cli import argv as qm
from actors.vm.cli.output import (
    CommandResult,
    OutputError,
    StorageRow,
    parse_config,
    parse_imported_volid,
    parse_node_cpu_flags,
    parse_node_resources,
    parse_pvesm_status,
    parse_status,
    parse_vm_resources,
    resize_error,
)
from actors.vm.cli.transport import LocalTransport, SshTransport, Transport
from actors.vm.pve import LineSink, Runner
from actors.vm.settings import VmSettings

log = logging.getLogger(__name__)
# What a node's command helper (ops/deploy/pve/cairn_allow.py) prints when it refuses a command.
HELPER_REFUSED = "cairn_allow: refused:"


class CliPve:
    driver = "cli"

    def __init__(
        self, transports: Mapping[str, Transport], main_node: str, *, on: Runner = pve.direct
    ) -> None:
        self._transports = dict(transports)
        self._main = main_node
        self._on = on
        self._warned_helper = False

    @classmethod
    def for_settings(cls, settings: VmSettings, env: Mapping[str, str], *, on: Runner) -> CliPve:
        """qm as a local subprocess on the main node (unless PVE_SSH_MAIN), over SSH on the
        others."""
        transports: dict[str, Transport] = {}
        for name, address in sorted(settings.nodes.items()):
            if name == settings.main_node and not settings.main_over_ssh:
                transports[name] = LocalTransport(env, timeout=settings.command_timeout)
            else:
                transports[name] = SshTransport(
                    address,
                    port=settings.node_ssh_port,
                    username=settings.node_ssh_user,
                    client_key=settings.node_ssh_key,
                    known_hosts=settings.known_hosts,
                    timeout=settings.command_timeout,
                )
        return cls(transports, settings.main_node, on=on)

    # -- running ---------------------------------------------------------------------------

    async def run(
        self,
        node: str,
        argv: list[str],
        *,
        stdin: bytes | None = None,
        on_line: LineSink | None = None,
    ) -> CommandResult:
        """One command line on `node`, through the node's runner."""
        transport = self._transports.get(node)
        if transport is None:
            raise pve.NotFound(f"no such cluster node '{node}'")
        return await self._on(node, lambda: transport.run(argv, stdin=stdin, on_line=on_line))

    async def _ok(self, node: str, argv: list[str]) -> CommandResult:
        result = await self.run(node, argv)
        if not result.ok:
            raise pve.classify(result.error_text(), log=_lines(result.stdout))
        return result

    async def _task(
        self,
        node: str,
        argv: list[str],
        *,
        stdin: bytes | None = None,
        on_line: LineSink | None = None,
    ) -> pve.Task:
        result = await self.run(node, argv, stdin=stdin, on_line=on_line)
        log = _lines(result.stdout)
        if not result.ok:
            raise pve.classify(result.error_text(), log=log, task=True)
        return pve.Task(node, "OK", log)

    async def _json(self, node: str, argv: list[str]) -> object:
        result = await self._ok(node, argv)
        try:
            return json.loads(result.stdout or "null")
        except json.JSONDecodeError as exc:
            raise pve.Unreadable(f"pvesh printed no JSON: {exc}") from None

    # -- reads -----------------------------------------------------------------------------

    async def version(self, node: str) -> str:
        data = await self._json(node, qm.api_get("/version"))
        return str(data.get("release", "")) if isinstance(data, dict) else ""

    async def cluster_vms(self) -> list[pve.VmResource]:
        result = await self._ok(self._main, qm.cluster_resources("vm"))
        try:
            return parse_vm_resources(result.stdout)
        except OutputError as exc:
            raise pve.Unreadable(str(exc)) from None

    async def cluster_nodes(self) -> list[pve.NodeResource]:
        result = await self._ok(self._main, qm.cluster_resources("node"))
        try:
            return parse_node_resources(result.stdout)
        except OutputError as exc:
            raise pve.Unreadable(str(exc)) from None

    async def node_status(self, node: str) -> pve.NodeStatus:
        # Asked of the main node (pvesh forwards to the node named in the path).
        result = await self._ok(self._main, qm.node_status(node))
        try:
            return pve.NodeStatus(parse_node_cpu_flags(result.stdout))
        except OutputError as exc:
            raise pve.Unreadable(str(exc)) from None

    async def storages(self, node: str, content: str | None = None) -> list[pve.StorageStatus]:
        argv = qm.image_storages() if content == "images" else ["pvesm", "status"]
        result = await self._ok(node, argv)
        return [_storage(row, content) for row in _rows(result.stdout)]

    async def storage_status(self, node: str, storage: str) -> pve.StorageStatus:
        try:
            # Its failure `storage: No such storage.` is a NotFound (pve.classify).
            data = await self._json(node, qm.storage_status(node, storage))
        except pve.PveError as exc:
            if HELPER_REFUSED not in exc.text:
                raise
            return await self._storage_by_pvesm(node, storage)
        if not isinstance(data, dict):
            raise pve.Unreadable(f"storage {storage}: its status is not an object")
        return apistorage.storage_status(storage, data)

    async def _storage_by_pvesm(self, node: str, storage: str) -> pve.StorageStatus:
        """A node whose command helper predates the pvesh read (an upgraded cairn, the nodes'
        `cairn_allow.py` not copied yet): `pvesm status`, which prints no `shared` flag, so the
        flag is the one pve-storage gives the storage's type. Installs go on; said once."""
        if not self._warned_helper:
            self._warned_helper = True
            log.warning(
                "vm: %s's cairn_allow.py refused `pvesh get /nodes/%s/storage/%s/status`: it is "
                "older than this cairn; storages are read with `pvesm status`, shared by type "
                "only, until the new ops/deploy/pve/cairn_allow.py is copied to the nodes",
                node,
                node,
                storage,
            )
        result = await self._ok(node, qm.storage_by_pvesm(storage))
        row = next((r for r in _rows(result.stdout) if r.name == storage), None)
        if row is None:
            raise pve.NotFound(f"storage '{storage}' is not listed by pvesm status")
        return attrs.evolve(_storage(row, None), shared=row.type in apistorage.NETWORK_TYPES)

    async def storage_content(self, node: str, storage: str, content: str) -> list[pve.Volume]:
        path = f"/nodes/{node}/storage/{storage}/content"
        data = await self._json(node, qm.api_get(path, "--content", content))
        return [pve.Volume(str(e["volid"])) for e in _objects(data) if "volid" in e]

    async def next_id(self) -> int:
        data = await self._json(self._main, qm.api_get("/cluster/nextid"))
        try:
            return int(str(data))
        except ValueError:
            raise pve.Unreadable(f"/cluster/nextid answered {data!r}") from None

    async def bridges(self, node: str) -> list[pve.Bridge]:
        data = await self._json(node, qm.network(node))
        return pve.bridges_of(data if isinstance(data, list) else [])

    async def vm_config(self, node: str, vmid: int) -> pve.VmConfig:
        result = await self._ok(node, qm.config(vmid))
        options = parse_config(result.stdout)
        if "description" in options:
            # qm prints the description percent-encoded (PVE::Tools::encode_text).
            options["description"] = unquote(options["description"])
        return pve.VmConfig(options)

    async def vm_status(self, node: str, vmid: int) -> pve.VmStatus:
        result = await self._ok(node, qm.status(vmid))
        try:
            return pve.VmStatus(parse_status(result.stdout))
        except OutputError as exc:
            raise pve.Unreadable(str(exc)) from None

    async def active_tasks(self, node: str, vmid: int) -> list[str]:
        argv = qm.api_get(f"/nodes/{node}/tasks", "--source", "active", "--vmid", str(vmid))
        data = await self._json(node, argv)
        return [str(e["upid"]) for e in _objects(data) if "upid" in e]

    async def privileges(self, path: str) -> frozenset[str] | None:
        return None  # qm runs as root on the node: Proxmox checks no ACL for it

    # -- VM tasks --------------------------------------------------------------------------

    async def create(self, node: str, vmid: int, spec: pve.Create) -> pve.Task:
        if spec.disk is not None:
            raise pve.Unsupported("the CLI driver imports a disk with qm disk import")
        argv = qm.create(vmid, spec.hardware.options())
        if spec.pool:
            argv += ["--pool", spec.pool]
        return await self._task(node, argv)

    async def import_disk(self, node: str, vmid: int, path: str, storage: str) -> str:
        task = await self._task(node, qm.import_disk(vmid, path, storage))
        try:
            return parse_imported_volid("\n".join(task.log))
        except OutputError as exc:
            raise pve.Unreadable(str(exc)) from None

    async def clone(self, node: str, vmid: int, newid: int, spec: pve.Clone) -> pve.Task:
        return await self._task(node, qm.clone(vmid, newid, spec.params()))

    async def template(self, node: str, vmid: int) -> pve.Task:
        return await self._task(node, qm.template(vmid))

    async def set_config(
        self, node: str, vmid: int, options: Mapping[str, str], *, sshkeys: str | None = None
    ) -> pve.Task:
        # The keys go on stdin: no key file is left on the node.
        argv = qm.set_options(vmid, dict(options), "/dev/stdin" if sshkeys else None)
        stdin = sshkeys.encode() if sshkeys else None
        return await self._task(node, argv, stdin=stdin)

    async def resize(
        self, node: str, vmid: int, disk: str, size: str, *, on_line: LineSink | None = None
    ) -> pve.Task:
        argv = qm.resize_disk(vmid, size)
        if disk != "scsi0":
            argv[4] = disk
        result = await self.run(node, argv, on_line=on_line)
        # qm disk resize exits 0 when its worker fails: its stderr says so.
        problem = resize_error(result)
        if problem:
            raise pve.TaskFailed(problem, _lines(result.stdout))
        return pve.Task(node, "OK", _lines(result.stdout))

    async def start(self, node: str, vmid: int) -> pve.Task:
        return await self._task(node, qm.start(vmid))

    async def stop(self, node: str, vmid: int, *, cleanup: bool = False) -> pve.Task:
        return await self._task(node, qm.cleanup_stop(vmid) if cleanup else qm.stop(vmid))

    async def shutdown(self, node: str, vmid: int) -> pve.Task:
        return await self._task(node, qm.shutdown(vmid))

    async def reboot(self, node: str, vmid: int) -> pve.Task:
        return await self._task(node, qm.reboot(vmid))

    async def migrate(
        self, node: str, vmid: int, target: str, *, on_line: LineSink | None = None
    ) -> pve.Task:
        return await self._task(node, qm.migrate(vmid, target), on_line=on_line)

    async def destroy(self, node: str, vmid: int, *, cleanup: bool = False) -> pve.Task:
        return await self._task(node, qm.cleanup_destroy(vmid) if cleanup else qm.destroy(vmid))

    # -- snapshots -------------------------------------------------------------------------

    async def snapshots(self, node: str, vmid: int) -> list[pve.Snapshot]:
        # pvesh, not `qm listsnapshot`: the latter prints a tree in local time with the first
        # line of each description and no word of the saved RAM.
        data = await self._json(node, qm.snapshot_list(node, vmid))
        if not isinstance(data, list):
            raise pve.Unreadable(f"pvesh printed no snapshot list: {data!r}")
        return pve.snapshots_of(data)

    async def snapshot(
        self, node: str, vmid: int, name: str, *, description: str = "", vmstate: bool = False
    ) -> pve.Task:
        return await self._task(node, qm.snapshot(vmid, name, description, vmstate))

    async def rollback(self, node: str, vmid: int, name: str, *, start: bool = False) -> pve.Task:
        return await self._task(node, qm.rollback(vmid, name, start))

    async def delete_snapshot(self, node: str, vmid: int, name: str) -> pve.Task:
        return await self._task(node, qm.delsnapshot(vmid, name))

    # -- storage tasks ---------------------------------------------------------------------

    async def download_url(self, node: str, storage: str, image: pve.Download) -> pve.Task:
        return await self._task(node, qm.download_url(node, storage, image.params()))

    async def wait_task(self, upid: str, *, on_line: LineSink | None = None) -> pve.Task:
        raise pve.Unsupported("the CLI driver runs every task in the foreground: no task to wait")

    async def close(self) -> None:
        for transport in self._transports.values():
            await transport.close()


def _lines(text: str) -> tuple[str, ...]:
    return tuple(text.splitlines())


def _rows(stdout: str) -> list[StorageRow]:
    try:
        return list(parse_pvesm_status(stdout))
    except OutputError as exc:
        raise pve.Unreadable(str(exc)) from None


def _storage(row: StorageRow, content: str | None) -> pve.StorageStatus:
    return pve.StorageStatus(
        name=row.name,
        type=row.type,
        enabled=row.status != "disabled",
        active=row.status == "active",
        content=(content,) if content else (),
        total=row.total_kib * 1024,
        used=row.used_kib * 1024,
        avail=row.available_kib * 1024,
    )


def _objects(data: object) -> list[dict[str, object]]:
    return [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
