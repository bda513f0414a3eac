"""The REST adapter of the Proxmox port: each operation as pveproxy's own request.

No command line and no rendered text: parameters go out as PVE's form fields, answers come
back as its JSON, and an operation Proxmox runs as a task is waited for on the node its UPID
names (tasks.py). Failures keep PVE's words and what they mean (pve's exception tree): the
privilege and path a 403 named, a task's exit status and log lines, the lock met. Root-only
options a token cannot use (`skiplock`) are never sent (PVE refuses them). Every node is addressed
through the one pveproxy cairn talks to, which forwards `/nodes/<n>/...`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from actors.vm import apistorage, pve
from actors.vm.pve import LineSink, Runner
from actors.vm.pveapi import errors
from actors.vm.pveapi.client import PveClient
from actors.vm.pveapi.privileges import effective
from actors.vm.pveapi.tasks import TaskLost, TaskOutcome, wait_task
from actors.vm.pveapi.wire import looks_like_upid, sshkeys_param

_T = TypeVar("_T")


def create_params(vmid: int, spec: pve.Create) -> dict[str, str]:
    """The whole create: hardware, and with `disk` the boot disk imported from a volume of the
    node, the cloud-init drive and settings (keys urlencoded twice, as pveproxy decodes them
    once more) and the boot order."""
    params = {"vmid": str(vmid), **spec.hardware.options()}
    if (disk := spec.disk) is not None:
        ci = disk.cloud_init
        params |= {
            "scsi0": f"{disk.storage}:0,import-from={disk.source}",
            "ide2": f"{disk.storage}:cloudinit",
            "boot": "order=scsi0",
            **ci.options(),
            "sshkeys": sshkeys_param(ci.sshkeys),
        }
    if spec.pool:
        params["pool"] = spec.pool
    return params


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return "; ".join(lines)


def _port_error(exc: errors.ApiError) -> pve.PveError:
    """A pveproxy failure as the port's kind of failure, in PVE's words."""
    text = _one_line(exc.text)
    if isinstance(exc, errors.Unreachable | errors.FingerprintMismatch | TaskLost):
        return pve.Unreachable(text)
    if isinstance(exc, errors.PermissionDenied):
        found = exc.missing
        return pve.PermissionDenied(
            text, found.privilege if found else None, found.path if found else None
        )
    if isinstance(exc, errors.AuthFailed):
        return pve.Refused(text)
    kind = pve.classify(text)
    if type(kind) is pve.PveError and exc.status == 400:
        return pve.Refused(text)
    return kind


class RestPve:
    driver = "api"

    def __init__(
        self,
        client: PveClient,
        main_node: str,
        *,
        on: Runner = pve.direct,
        task_timeout: float = 900.0,
    ) -> None:
        self.client = client
        self._main = main_node
        self._on = on
        self.task_timeout = task_timeout

    # -- sending ---------------------------------------------------------------------------

    async def _call(self, node: str, work: Callable[[], Awaitable[_T]]) -> _T:
        async def guarded() -> _T:
            try:
                async with self.client.busy():  # a shutdown's close waits for the task's end
                    return await work()
            except errors.ApiError as exc:
                raise _port_error(exc) from None

        return await self._on(node, guarded)

    async def _get(self, node: str, path: str, params: dict[str, Any] | None = None) -> Any:
        return await self._call(node, lambda: self.client.get(path, params))

    async def _task(
        self,
        node: str,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        *,
        on_line: LineSink | None = None,
    ) -> pve.Task:
        async def send() -> pve.Task:
            data = await self.client.request(method, path, params)
            if not looks_like_upid(data):
                # Done at once (a resize on PVE 7, a config change that needed no worker).
                return pve.Task(node)
            return _settled(
                node,
                await wait_task(self.client, data, on_line=on_line, timeout=self.task_timeout),
            )

        return await self._call(node, send)

    # -- reads -----------------------------------------------------------------------------

    async def version(self, node: str) -> str:
        data = await self._get(node, "/version")
        return str(data.get("release", "")) if isinstance(data, dict) else ""

    async def cluster_vms(self) -> list[pve.VmResource]:
        return pve.vm_resources(await self._array("/cluster/resources", {"type": "vm"}))

    async def cluster_nodes(self) -> list[pve.NodeResource]:
        return pve.node_resources(await self._array("/cluster/resources", {"type": "node"}))

    async def _array(self, path: str, params: dict[str, Any]) -> list[Any]:
        data = await self._get(self._main, path, params)
        if not isinstance(data, list):
            raise pve.Unreadable(f"{path} did not answer an array")
        return data

    async def node_status(self, node: str) -> pve.NodeStatus:
        data = await self._get(node, f"/nodes/{node}/status")
        flags = data.get("cpuinfo", {}).get("flags") if isinstance(data, dict) else None
        if not isinstance(flags, str):
            raise pve.Unreadable("no cpuinfo.flags in node status")
        return pve.NodeStatus(flags)

    async def storages(self, node: str, content: str | None = None) -> list[pve.StorageStatus]:
        params = {"content": content} if content else {}
        data = await self._get(node, f"/nodes/{node}/storage", params)
        return [apistorage.storage_status(str(e.get("storage", "?")), e) for e in _objects(data)]

    async def storage_status(self, node: str, storage: str) -> pve.StorageStatus:
        data = await self._get(node, f"/nodes/{node}/storage/{storage}/status")
        if not isinstance(data, dict):
            raise pve.Unreadable(f"storage {storage}: its status is not an object")
        return apistorage.storage_status(storage, data)

    async def storage_content(self, node: str, storage: str, content: str) -> list[pve.Volume]:
        path = f"/nodes/{node}/storage/{storage}/content"
        data = await self._get(node, path, {"content": content})
        return [
            pve.Volume(str(e["volid"]), e.get("size") if isinstance(e.get("size"), int) else None)
            for e in _objects(data)
            if "volid" in e
        ]

    async def next_id(self) -> int:
        data = await self._get(self._main, "/cluster/nextid")
        try:
            return int(str(data))  # a string on real servers, a number in the schema
        except ValueError:
            raise pve.Unreadable(f"/cluster/nextid answered {data!r}") from None

    async def bridges(self, node: str) -> list[pve.Bridge]:
        data = await self._get(node, f"/nodes/{node}/network", {"type": "any_bridge"})
        return pve.bridges_of(data if isinstance(data, list) else [])

    async def vm_config(self, node: str, vmid: int) -> pve.VmConfig:
        data = await self._get(node, f"/nodes/{node}/qemu/{vmid}/config")
        if not isinstance(data, dict):
            raise pve.Unreadable(f"VM {vmid}'s config is not an object")
        return pve.VmConfig({k: str(v) for k, v in data.items() if k != "digest"})

    async def vm_status(self, node: str, vmid: int) -> pve.VmStatus:
        data = await self._get(node, f"/nodes/{node}/qemu/{vmid}/status/current")
        if not isinstance(data, dict):
            raise pve.Unreadable(f"VM {vmid}'s status is not an object")
        return pve.VmStatus(str(data.get("qmpstatus") or data.get("status")), data.get("lock"))

    async def active_tasks(self, node: str, vmid: int) -> list[str]:
        params = {"source": "active", "vmid": str(vmid)}
        data = await self._get(node, f"/nodes/{node}/tasks", params)
        return [str(e["upid"]) for e in _objects(data) if "upid" in e]

    async def privileges(self, path: str) -> frozenset[str] | None:
        # The token's own permissions (any token may read its own), as `cairn pve check` reads
        # them: per ACL path, so what is granted above `path` counts too.
        data = await self._get(self._main, "/access/permissions")
        if not isinstance(data, dict):
            raise pve.Unreadable("/access/permissions did not answer an object")
        return frozenset(effective(data, path))

    # -- VM tasks --------------------------------------------------------------------------

    async def create(self, node: str, vmid: int, spec: pve.Create) -> pve.Task:
        params = create_params(vmid, spec)
        return await self._task(node, "POST", f"/nodes/{node}/qemu", params)

    async def import_disk(self, node: str, vmid: int, path: str, storage: str) -> str:
        raise pve.Unsupported(
            "only root can import a file of the node's file system; the API driver creates "
            "the VM with import-from of a volume the node downloaded"
        )

    async def clone(self, node: str, vmid: int, newid: int, spec: pve.Clone) -> pve.Task:
        params = {"newid": str(newid), **spec.params()}
        return await self._task(node, "POST", f"/nodes/{node}/qemu/{vmid}/clone", params)

    async def template(self, node: str, vmid: int) -> pve.Task:
        return await self._task(node, "POST", f"/nodes/{node}/qemu/{vmid}/template")

    async def set_config(
        self, node: str, vmid: int, options: Mapping[str, str], *, sshkeys: str | None = None
    ) -> pve.Task:
        params = dict(options)
        if sshkeys:
            params["sshkeys"] = sshkeys_param(sshkeys)
        return await self._task(node, "POST", f"/nodes/{node}/qemu/{vmid}/config", params)

    async def resize(
        self, node: str, vmid: int, disk: str, size: str, *, on_line: LineSink | None = None
    ) -> pve.Task:
        path = f"/nodes/{node}/qemu/{vmid}/resize"
        return await self._task(node, "PUT", path, {"disk": disk, "size": size}, on_line=on_line)

    async def start(self, node: str, vmid: int) -> pve.Task:
        return await self._power(node, vmid, "start")

    async def stop(self, node: str, vmid: int, *, cleanup: bool = False) -> pve.Task:
        # A clean-up's stop gives the guest no time; `skiplock` is root's only, so not sent.
        return await self._power(node, vmid, "stop", {"timeout": "1"} if cleanup else None)

    async def shutdown(self, node: str, vmid: int) -> pve.Task:
        return await self._power(node, vmid, "shutdown")

    async def reboot(self, node: str, vmid: int) -> pve.Task:
        return await self._power(node, vmid, "reboot")

    async def _power(
        self, node: str, vmid: int, action: str, params: dict[str, Any] | None = None
    ) -> pve.Task:
        return await self._task(node, "POST", f"/nodes/{node}/qemu/{vmid}/status/{action}", params)

    async def migrate(
        self, node: str, vmid: int, target: str, *, on_line: LineSink | None = None
    ) -> pve.Task:
        params = {"target": target, "with-local-disks": "1"}
        path = f"/nodes/{node}/qemu/{vmid}/migrate"
        return await self._task(node, "POST", path, params, on_line=on_line)

    async def destroy(self, node: str, vmid: int, *, cleanup: bool = False) -> pve.Task:
        params = {"purge": "1"}
        if cleanup:
            # An import that died after allocating leaves a volume no config references.
            params["destroy-unreferenced-disks"] = "1"
        return await self._task(node, "DELETE", f"/nodes/{node}/qemu/{vmid}", params)

    # -- snapshots -------------------------------------------------------------------------

    async def snapshots(self, node: str, vmid: int) -> list[pve.Snapshot]:
        data = await self._get(node, f"/nodes/{node}/qemu/{vmid}/snapshot")
        if not isinstance(data, list):
            raise pve.Unreadable(f"snapshot list is not an array: {data!r}")
        return pve.snapshots_of(data)

    async def snapshot(
        self, node: str, vmid: int, name: str, *, description: str = "", vmstate: bool = False
    ) -> pve.Task:
        params = {"snapname": name}
        if description:
            params["description"] = description
        if vmstate:
            params["vmstate"] = "1"
        return await self._task(node, "POST", f"/nodes/{node}/qemu/{vmid}/snapshot", params)

    async def rollback(self, node: str, vmid: int, name: str, *, start: bool = False) -> pve.Task:
        path = f"/nodes/{node}/qemu/{vmid}/snapshot/{name}/rollback"
        return await self._task(node, "POST", path, {"start": "1"} if start else None)

    async def delete_snapshot(self, node: str, vmid: int, name: str) -> pve.Task:
        return await self._task(node, "DELETE", f"/nodes/{node}/qemu/{vmid}/snapshot/{name}")

    # -- storage tasks ---------------------------------------------------------------------

    async def download_url(self, node: str, storage: str, image: pve.Download) -> pve.Task:
        params = image.params()
        path = f"/nodes/{node}/storage/{storage}/download-url"
        return await self._task(node, "POST", path, params)

    async def wait_task(self, upid: str, *, on_line: LineSink | None = None) -> pve.Task:
        from actors.vm.pveapi.wire import parse_upid

        node = parse_upid(upid).node

        async def wait() -> pve.Task:
            outcome = await wait_task(self.client, upid, on_line=on_line, timeout=self.task_timeout)
            return _settled(node, outcome)

        return await self._call(node, wait)

    async def close(self) -> None:
        await self.client.close()


def _settled(node: str, outcome: TaskOutcome) -> pve.Task:
    if not outcome.ok:
        error = pve.classify(_one_line(outcome.exitstatus), log=outcome.log, task=True)
        if isinstance(error, pve.TaskFailed):
            error.upid = outcome.upid
        raise error
    return pve.Task(node, outcome.exitstatus, outcome.log, outcome.upid)


def _objects(data: Any) -> list[dict[str, Any]]:
    return [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
