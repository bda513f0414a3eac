"""The VM service's actor side: starts the actors, answers commands on NATS, keeps the inventory.

Subjects (request/reply, JSON):
- `cairn.cmd.vm.install` {task, request}        -> {vmid, task, version} | {error}
- `cairn.cmd.vm.do` {task, vmid, command, args} -> {vmid, task, version} | {error}
- `cairn.q.vm.status` {vmid}                     -> {status} | {error}
- `cairn.q.vm.list` {}                           -> the list payload
- `cairn.q.vm.detail` {vmid}                     -> one VM's detail | {error}
- `cairn.q.vm.snapshots` {vmid}                  -> {snapshots, refusal} | {error}
- `cairn.q.vm.templates` {}                      -> {templates} | {error}
- `cairn.cmd.vm.templates.prune` {}              -> {removed, kept} | {error}
Errors are `{"error": {"status": <http>, "message": ...}}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs
from nats.aio.subscription import Subscription

from actors.hosting import HostParts
from actors.runtime import ActorHandle, ActorUnavailable, Rejected
from actors.vm import change_request, function_check, preflight, snapshots, templates
from actors.vm.allocator import AllocatorActor, Holdings, Release, Reserve
from actors.vm.drives import resize_refusal
from actors.vm.events import Adopted
from actors.vm.function_check import FunctionRuns
from actors.vm.guestview import guest_view, tags_of
from actors.vm.imagecache import ImageCache
from actors.vm.jobs import Services, StageFailed
from actors.vm.lifecycle import WORKING, Command, State
from actors.vm.messages import (
    DoCommand,
    InstallCommand,
    parse_do_command,
    parse_install_command,
    parse_vmid,
)
from actors.vm.node import Cluster, NodeActor
from actors.vm.ownership import mark_line
from actors.vm.pve import NodeResource, NotFound, PveError, Unreadable, VmResource
from actors.vm.requests import BadRequest, clamp_cpu
from actors.vm.settings import VmSettings
from actors.vm.vm import Do, Install, Observe, Query, Recover, VmActor, VmInfo
from events.bus import flush_all, serve_json, unsubscribe_all
from events.errors import CommandFailed
from events.store import Recorded
from events.subjects import stream_name

log = logging.getLogger(__name__)

# The commands that start a task (and carry its id).
_TaskCommand = TypeVar("_TaskCommand", InstallCommand, DoCommand)

# Commands whose answers a host keeps, by task id, to answer a copy of one alike (the copies
# come within a command's 120 s deadline; this is far more than arrive in that time).
ANSWERS_KEPT = 2000

SUBJECT_INSTALL = "cairn.cmd.vm.install"
SUBJECT_DO = "cairn.cmd.vm.do"
SUBJECT_STATUS = "cairn.q.vm.status"
SUBJECT_LIST = "cairn.q.vm.list"
SUBJECT_DETAIL = "cairn.q.vm.detail"
SUBJECT_SNAPSHOTS = "cairn.q.vm.snapshots"
SUBJECT_TEMPLATES = "cairn.q.vm.templates"
SUBJECT_PRUNE = "cairn.cmd.vm.templates.prune"
# The streams this service's actors own: VMs, the VMID/IP allocator, the nodes.
AGGREGATES = (VmActor.aggregate, AllocatorActor.aggregate, NodeActor.aggregate)
_MIB = 1024 * 1024
_GIB = 1024 * _MIB


def _error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"status": status, "message": message}}


def _one_vm(
    answer: Callable[[VmService, int], Awaitable[dict[str, Any]]],
) -> Callable[[VmService, Any], Awaitable[dict[str, Any]]]:
    """A query about one VM: the payload's ``vmid`` is checked first, a bad one answered 400."""

    async def handler(self: VmService, payload: Any) -> dict[str, Any]:
        try:
            vmid = parse_vmid(payload)
        except BadRequest as exc:
            return _error(400, str(exc))
        return await answer(self, vmid)

    return handler


@attrs.define
class Inventory:
    """The list's read model: actor infos (kept fresh from the store) plus the cluster's view."""

    infos: dict[int, VmInfo] = attrs.field(factory=dict)
    vms: dict[int, VmResource] = attrs.field(factory=dict)
    nodes: list[NodeResource] = attrs.field(factory=list)
    polled_at: float = 0.0

    def max_cpu(self, node: str) -> int | None:
        """The node's CPU count (`maxcpu`), the most vCPUs one VM may have there; None when
        the cluster has not told us."""
        res = next((n for n in self.nodes if n.node == node), None)
        return res.maxcpu if res is not None and res.maxcpu else None

    def row(self, vmid: int, info: VmInfo | None = None) -> dict[str, Any] | None:
        """One VM as the list shows it (None: not there). ``info``: a fresher word from the
        actor than the inventory's copy."""
        info = info or self.infos.get(vmid)
        res = self.vms.get(vmid)
        if info is not None and info.state is State.ABSENT:
            if res is None:
                return None
            info = None  # a VM the actor lost, seen again: the cluster's word
        if info is None and res is None:
            return None
        facts = info.facts if info is not None else None
        plan = info.plan if info is not None else None  # an install under way
        running = (
            info.power == "running" if info is not None else bool(res and res.status == "running")
        )
        used = (res.mem or 0) // _MIB if res and running else 0
        return {
            "vmid": vmid,
            "name": (facts.name if facts else None)
            or (plan.name if plan else None)
            or (res.name if res else None)
            or str(vmid),
            "os": (facts.os if facts else None)
            or (plan.os if plan else None)
            or (res.tags if res else None)
            or "",
            "running": running,
            "node": facts.node if facts else (plan.node if plan else (res.node if res else "")),
            "cpu": facts.cpu if facts else (res.maxcpu or 0 if res else 0),
            "disk": facts.disk_gb if facts else ((res.maxdisk or 0) // _GIB if res else 0),
            "memory": facts.ram if facts else ((res.maxmem or 0) // _MIB if res else 0),
            "memory_used": used,
            "ip": (facts.ip if facts else None) or (plan.ip if plan else None) or "",
            "user": (facts.user if facts else None) or (plan.user if plan else None) or "",
            "state": info.state.value if info is not None else (res.status if res else ""),
            "created_by_cairn": info is not None and info.claim is not None,
            "tags": tags_of(res.tags if res else None),
        }

    def detail(self, vmid: int, info: VmInfo | None) -> dict[str, Any] | None:
        """The list's row and what only one VM's page needs: its OS version, cairn's mark,
        the task running or last run."""
        row = self.row(vmid, info)
        if row is None:
            return None
        facts = info.facts if info is not None else None
        plan = info.plan if info is not None else None
        claim = info.claim if info is not None else None
        last = info.last_task if info is not None else None
        version = (facts.version if facts else None) or (plan.version if plan else None) or ""
        return {
            **row,
            "version": version,
            "mark": mark_line(claim.task) if claim is not None and claim.task else None,
            "task": info.task if info is not None else None,
            "last_task": attrs.asdict(last) if last is not None else None,
        }

    def payload(self, node_names: list[str], *, simulated: bool = False) -> dict[str, Any]:
        rows = []
        per_node: dict[str, dict[str, int]] = {
            n: {"cpu": 0, "memory": 0, "disk": 0, "running": 0} for n in node_names
        }
        for vmid in sorted(set(self.infos) | set(self.vms)):
            row = self.row(vmid)
            if row is None:
                continue
            rows.append(row)
            agg = per_node.setdefault(row["node"], {"cpu": 0, "memory": 0, "disk": 0, "running": 0})
            agg["cpu"] += row["cpu"]
            agg["memory"] += row["memory"]
            agg["disk"] += row["disk"]
            agg["running"] += int(row["running"])
        by_name = {n.node: n for n in self.nodes}
        cluster = []
        for name in sorted(per_node):
            nres = by_name.get(name)
            agg = per_node[name]
            online = bool(nres and nres.status == "online")
            cluster.append(
                {
                    "node": name,
                    # The original's `running` is the node's online state; the count of its
                    # running VMs is `running_vms`.
                    "running": online,
                    "online": online,
                    "max_cpu": (nres.maxcpu or 0) if nres else 0,
                    "max_memory": (nres.maxmem or 0) // _MIB if nres else 0,
                    "cpu": agg["cpu"],
                    "memory": agg["memory"],
                    "memory_used": (nres.mem or 0) // _MIB if nres else 0,
                    "disk": agg["disk"],
                    "running_vms": agg["running"],
                    # The node's own figures, as the cluster reports them (None: not known,
                    # an offline node): CPU load 0..1, root filesystem bytes, uptime seconds.
                    "load": nres.cpu if nres else None,
                    "rootfs_used": nres.disk if nres else None,
                    "rootfs_total": nres.maxdisk if nres else None,
                    "uptime": nres.uptime if nres else None,
                }
            )
        return {"count": len(rows), "list": rows, "cluster": cluster, "simulated": simulated}


def _differs(info: VmInfo, res: VmResource) -> bool:
    """Whether the cluster's view of a VM is news to its actor (most polls bring none)."""
    if info.state in WORKING:
        return False
    node_moved = info.facts is not None and info.facts.node != res.node
    power = res.status in ("running", "stopped") and res.status != info.power
    return node_moved or power


class VmService:
    def __init__(
        self,
        runtime: HostParts,
        settings: VmSettings,
        *,
        poll_interval: float,
        fence: Callable[[], str | None] | None = None,
        functions: FunctionRuns | None = None,
    ) -> None:
        self.runtime = runtime
        self.fence = fence
        # How a change's function checks reach the functions service (the composition root's).
        self.functions = functions
        self.settings = settings
        self.poll_interval = poll_interval
        self.inventory = Inventory()
        # Why the last read of the cluster failed (None: it worked, or none was made yet).
        self.cluster_problem: str | None = None
        self._subs: list[Subscription] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._dirty: set[int] = set()
        self._changed_at: dict[int, float] = {}
        self._dirty_event = asyncio.Event()
        self._poll_now = asyncio.Event()
        self.cluster: Cluster | None = None
        self.allocator: ActorHandle | None = None
        self.services: Services | None = None
        self._vms_read: asyncio.Future[list[VmResource] | None] | None = None
        # Why the last read of the cluster's VMs failed, in the words of the driver that read
        # them (a 503 names it).
        self.vms_problem = ""
        # The answers to the commands this host took, by task id (the last ANSWERS_KEPT).
        self._answers: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._stopping = False

    @property
    def data(self) -> Path:
        return self.runtime.data_dir / "vm"

    async def start(self, scripts_dir: Path, *, settle: str = Recover().reason) -> None:
        """Start the actors and answer on NATS. ``settle``: what a task found unfinished is
        told (why its job is gone)."""
        host = self.runtime.actors
        env: Mapping[str, str] = self.runtime.env
        self.cluster = await Cluster.start(host, self.settings, env)
        if self.fence is not None:
            self.cluster.fence = self.fence
            host.fence(AGGREGATES, self.fence)
        self.services = Services(
            settings=self.settings,
            pve=self.cluster.pve,
            images=ImageCache(self.data / "images", self.settings.image_base_url),
            key_path=self.data / "ssh" / "id_ed25519",
            scripts_dir=scripts_dir,
            cpu_type=env.get("VM_CPU_TYPE") or None,
            functions=self.functions,
        )
        self.allocator = await host.spawn(AllocatorActor, "cluster", settings=self.settings)
        self.runtime.store.add_listener(self._on_append)
        for stream in await self.runtime.store.stream_names("vm:"):
            ident = stream.split(":", 1)[1]
            if ident.isdigit():
                handle = await self._vm(int(ident))
                await handle.tell(Recover(settle))
                # A quarantined VM (logged by the host) has no info; its commands answer 503.
                with contextlib.suppress(CommandFailed):
                    self.inventory.infos[int(ident)] = await handle.ask(Query())
        await self._release_unowned()
        nc = self.runtime.nc
        self._subs = [
            await serve_json(nc, SUBJECT_INSTALL, self._on_install, concurrent=True),
            await serve_json(nc, SUBJECT_DO, self._on_do, concurrent=True),
            await serve_json(nc, SUBJECT_STATUS, self._on_status, concurrent=True),
            await serve_json(nc, SUBJECT_LIST, self._on_list, concurrent=True),
            await serve_json(nc, SUBJECT_DETAIL, self._on_detail, concurrent=True),
            await serve_json(nc, SUBJECT_SNAPSHOTS, self._on_snapshots, concurrent=True),
            await serve_json(nc, SUBJECT_TEMPLATES, self._on_templates, concurrent=True),
            await serve_json(nc, SUBJECT_PRUNE, self._on_prune, concurrent=True),
        ]
        # A gateway's command sent at once (another connection) finds them.
        with contextlib.suppress(Exception):  # the bus is away: they reach it when back
            await flush_all(nc)
        await self.poll()
        self._tasks = [
            asyncio.create_task(self._poller(), name="vm-inventory-poll"),
            asyncio.create_task(self._refresher(), name="vm-inventory-refresh"),
        ]

    async def _release_unowned(self) -> None:
        """Free ids reserved for a task that never started: a stop between the allocator's
        reservation and the VM's first record leaves one (nothing is in flight yet here)."""
        assert self.allocator is not None
        try:
            held: dict[int, str] = await self.allocator.ask(Holdings())
        except CommandFailed:
            return  # the allocator is quarantined: every install answers 503 anyway
        for vmid, task in sorted(held.items()):
            handle = self.runtime.actors.get(VmActor, vmid)
            if handle is not None and handle.unavailable is not None:
                continue  # a quarantined VM keeps its id
            info = self.inventory.infos.get(vmid)
            if info is None or (info.state is State.ABSENT and info.task is None):
                log.warning("releasing VMID %d: task %s reserved it but never started", vmid, task)
                try:
                    await self.allocator.ask(Release(vmid, "reserved by a task that never started"))
                except CommandFailed as exc:
                    log.error("VMID %d stays reserved: %s", vmid, exc.message)

    async def stop_actors(self) -> None:
        """Stop every actor this service started (cluster mode: the lease went to another
        host, which replays them): VMs first, whose running jobs are cancelled, then the
        allocator and the nodes."""
        host = self.runtime.actors
        for handle in host.handles(VmActor):
            await host.stop(VmActor, handle.ident)
        await host.stop(AllocatorActor, "cluster")
        if self.cluster is not None:
            await self.cluster.stop(host)
        self.inventory = Inventory()

    async def stop(self) -> None:
        self._stopping = True
        await unsubscribe_all(self._subs)
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(ValueError):
            self.runtime.store.remove_listener(self._on_append)
        if self.cluster is not None:
            await self.cluster.close()

    async def _vm(self, vmid: int) -> ActorHandle:
        assert self.services is not None and self.allocator is not None
        return await self.runtime.actors.spawn(
            VmActor, vmid, services=self.services, allocator=self.allocator
        )

    # -- inventory -----------------------------------------------------------------------------

    def _on_append(self, records: list[Recorded]) -> None:
        for record in records:
            if record.stream.startswith("vm:"):
                ident = record.stream[3:]
                if ident.isdigit():
                    self._dirty.add(int(ident))
                    self._changed_at[int(ident)] = time.monotonic()
                    self._dirty_event.set()
                    if record.event.type_name == "vm.task_ended":
                        self._poll_now.set()

    async def _refresher(self) -> None:
        while True:
            await self._dirty_event.wait()
            self._dirty_event.clear()
            dirty, self._dirty = self._dirty, set()
            for vmid in dirty:
                handle = self.runtime.actors.get(VmActor, vmid)
                if handle is not None:
                    with contextlib.suppress(ActorUnavailable, CommandFailed):
                        info = await handle.ask(Query())
                        self.inventory.infos[vmid] = info
                        if info.state is State.ABSENT:
                            self.inventory.vms.pop(vmid, None)

    async def _poller(self) -> None:
        # Not only cancelled: on Python 3.11 a wait_for whose inner wait completes as the
        # task is cancelled returns normally and the cancellation is lost (a stop then hung).
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poll_now.wait(), self.poll_interval)
            self._poll_now.clear()
            try:
                await self.poll()
            except Exception:
                log.exception("vm inventory poll failed")

    async def cluster_vms(self) -> list[VmResource] | None:
        """The cluster's VMs; concurrent callers share one read (`pvesh`, or the API's GET)."""
        if self._vms_read is None or self._vms_read.done():
            self._vms_read = asyncio.ensure_future(self._read_cluster_vms())
        return await asyncio.shield(self._vms_read)

    async def _read_cluster_vms(self) -> list[VmResource] | None:
        assert self.cluster is not None
        try:
            return await self.cluster.pve.cluster_vms()
        except Unreadable as exc:
            what = f"answered what cairn cannot read: {exc.text}"
            self.vms_problem = f"{self._resources_read()} {what}"
        except PveError as exc:
            self.vms_problem = f"{self._resources_read()} failed: {exc.text}"
        return None

    def _resources_read(self) -> str:
        """How the cluster's VMs are read, as the driver does it (for messages)."""
        if self.settings.driver == "api" and self.settings.api is not None:
            return f"GET /cluster/resources at {self.settings.api.url}"
        return f"pvesh get /cluster/resources on {self.settings.main_node}"

    async def poll(self) -> None:
        """Re-read the cluster: node figures, VM usage, VMs cairn does not know yet."""
        assert self.cluster is not None
        started = time.monotonic()
        vms = await self.cluster_vms()
        try:
            nodes = await self.cluster.pve.cluster_nodes()
        except Unreadable:
            self.cluster_problem = None
        except PveError as exc:
            self.cluster_problem = f"cluster: {self._resources_read()} failed: {exc.text}"
        else:
            self.cluster_problem = None
            self.inventory.nodes = nodes
            await self.cluster.set_figures(nodes)
        if vms is None:
            return
        # Templates (and cairn's templates still being built, in their own id range) are
        # images to clone, not VMs: never listed, counted or adopted.
        seen = {v.vmid: v for v in vms if not self._template(v)}
        # A VM that changed while this poll ran keeps what we knew: the poll may predate it.
        previous = self.inventory.vms
        for vmid, when in self._changed_at.items():
            if when >= started:
                if vmid in previous:
                    seen[vmid] = previous[vmid]
                else:
                    seen.pop(vmid, None)
        self.inventory.vms = seen
        self.inventory.polled_at = started
        for vmid, res in seen.items():
            info = self.inventory.infos.get(vmid)
            if info is None or info.state is State.ABSENT:
                if vmid not in self.settings.id_range or res.status == "unknown":
                    continue  # not ours to manage, or too fresh to describe
                handle = await self._vm(vmid)
                await handle.tell(Observe(res.node, res.status, started, adopt=self._adoption(res)))
            elif _differs(info, res):
                handle = await self._vm(vmid)
                await handle.tell(Observe(res.node, res.status, started))
        for vmid, info in list(self.inventory.infos.items()):
            if vmid not in seen and info.state not in (State.ABSENT, State.INSTALLING):
                known = self.runtime.actors.get(VmActor, vmid)
                if known is not None:
                    await known.tell(Observe(None, None, started))

    def _template(self, res: VmResource) -> bool:
        building = res.vmid in self.settings.template_range and (res.name or "").startswith(
            "cairn-"
        )
        return bool(res.template) or building

    def _adoption(self, res: VmResource) -> Adopted:
        return Adopted(
            node=res.node,
            name=res.name or str(res.vmid),
            os=res.tags or "",
            running=res.status == "running",
            cpu=res.maxcpu or 0,
            ram=(res.maxmem or 0) // _MIB,
            disk_gb=(res.maxdisk or 0) // _GIB,
            ip=self.settings.ip_for(res.vmid),
        )

    # -- NATS handlers -------------------------------------------------------------------------

    async def _once(
        self, task: str, run: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        """Run the command of ``task`` once: a copy of it (a gateway sends a command again
        while unanswered, events/resend.py) gets the first one's answer, in flight or given,
        or, for a task this host knows from the store (begun by a holder that died), that
        task's, so the client follows how it was settled; never a second run."""
        known = self._answers.get(task)
        if known is None:
            replayed = self._known_task(task)
            if replayed is not None:
                log.info(
                    "vm: task %s asked again: it is VM %s's, begun before", task, replayed["vmid"]
                )
                return replayed
            known = asyncio.ensure_future(run())
            self._answers[task] = known
            while len(self._answers) > ANSWERS_KEPT:
                self._answers.pop(next(iter(self._answers)))
        else:
            log.info("vm: task %s asked again: answered as the first time", task)
        return await asyncio.shield(known)

    def _known_task(self, task: str) -> dict[str, Any] | None:
        for info in self.inventory.infos.values():
            last = info.last_task
            if info.task == task or (last is not None and last.task == task):
                return {"vmid": info.vmid, "task": task, "version": info.task_version}
        return None

    async def _task_command(
        self,
        payload: Any,
        parse: Callable[[Any, VmSettings], _TaskCommand],
        run: Callable[[_TaskCommand], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """A command that starts a task: a payload that does not parse is a 400 at once, one
        that does runs once per task id (see `_once`)."""
        try:
            parsed = parse(payload, self.settings)
        except BadRequest as exc:
            return _error(400, str(exc))
        return await self._once(parsed.task, lambda: run(parsed))

    async def _on_install(self, payload: Any) -> dict[str, Any]:
        return await self._task_command(payload, parse_install_command, self._install)

    async def _install(self, parsed: InstallCommand) -> dict[str, Any]:
        assert self.allocator is not None
        task, request = parsed.task, parsed.request
        node = request.node or self.settings.main_node
        cpu = clamp_cpu(request.cpu, self.settings).value
        refusal = self._too_many_vcpus(cpu, node)
        if refusal:
            return _error(400, f"cpu: {refusal}")
        if request.shape.network or request.shape.disks:
            assert self.services is not None
            try:
                refusal = await preflight.install_refusal(self.services, node, request.shape)
            except PveError as exc:
                return _error(502, f"Proxmox did not answer about node {node}: {exc.text}")
            if refusal:
                return _error(400, refusal)
        began = time.monotonic()
        vms = await self.cluster_vms()
        if vms is None:
            return _error(503, f"cannot read the cluster's VMs: {self.vms_problem}")
        occupied = frozenset(v.vmid for v in vms)
        try:
            vmid = await self.allocator.ask(Reserve(task, request.vmid, occupied))
        except Rejected as exc:
            return _error(exc.status, exc.message)
        handle = await self._vm(vmid)
        try:
            info: VmInfo = await handle.ask(
                Install(task, request, time.monotonic() - began, parsed.by)
            )
        except Exception as exc:
            # Refused, or its first record could not be stored: no task owns the id.
            why = exc.message if isinstance(exc, CommandFailed) else repr(exc)
            await self.allocator.tell(Release(vmid, f"install did not start: {why}"))
            if isinstance(exc, CommandFailed):
                return _error(exc.status, exc.message)
            raise
        return {"vmid": vmid, "task": task, "version": info.task_version}

    def _too_many_vcpus(self, cpu: int, node: str) -> str | None:
        """Why `cpu` vCPUs cannot run on `node` (real `qm start` refuses more than the node's
        CPUs: `MAX N vcpus allowed per VM on this node`), or None."""
        limit = self.inventory.max_cpu(node)
        if limit is None or cpu <= limit:
            return None
        return (
            f"node {node} has {limit} CPUs, so a VM there can have at most {limit} vCPUs "
            f"(asked for {cpu}); Proxmox would refuse to start it"
        )

    async def _on_do(self, payload: Any) -> dict[str, Any]:
        return await self._task_command(payload, parse_do_command, self._do)

    async def _do(self, parsed: DoCommand) -> dict[str, Any]:
        vmid, command, args = parsed.vmid, parsed.command, parsed.args
        handle = self.runtime.actors.get(VmActor, vmid)
        if handle is None:
            return _error(404, f"VM {vmid} not found")
        if command in (Command.SET_CPU, Command.SET_NODE):
            current: VmInfo = await handle.ask(Query())
            facts = current.facts
            if command is Command.SET_CPU and facts is not None:
                refusal = self._too_many_vcpus(int(args["cpu"]), facts.node)
                if refusal:
                    return _error(400, f"cpu: {refusal}")
            if command is Command.SET_NODE and facts is not None and facts.cpu:
                refusal = self._too_many_vcpus(facts.cpu, str(args["node"]))
                if refusal:
                    return _error(400, f"node: VM {vmid} has {facts.cpu} vCPUs, but {refusal}")
        if command is Command.SET_NETWORK:
            assert self.services is not None
            was: VmInfo = await handle.ask(Query())
            if was.state is State.STOPPED:  # else the actor says why not
                node = was.facts.node if was.facts else self.settings.main_node
                try:
                    refusal = await preflight.network_refusal(self.services, node, vmid, args)
                except PveError as exc:
                    return _error(502, f"Proxmox did not answer about VM {vmid}: {exc.text}")
                if refusal:
                    return _error(400, refusal)
        if command is Command.SET_DISK and "drive" in args:
            assert self.services is not None
            held: VmInfo = await handle.ask(Query())
            if held.state is State.STOPPED:  # else the actor says why not
                node = held.facts.node if held.facts else self.settings.main_node
                try:
                    grow = int(args["grow_gb"])
                    refusal = await resize_refusal(self.services, node, vmid, args["drive"], grow)
                except PveError as exc:
                    return _error(502, f"Proxmox did not answer about VM {vmid}: {exc.text}")
                if refusal:
                    return _error(400, refusal)
        if command is Command.CHANGE:
            refused = await self._change_refusal(handle, vmid, args)
            if refused is not None:
                return refused
        if command in (Command.SNAPSHOT, Command.ROLLBACK, Command.DELETE_SNAPSHOT):
            now: VmInfo = await handle.ask(Query())
            if now.state in (State.RUNNING, State.STOPPED):  # else the actor says why not
                assert self.services is not None
                node = now.facts.node if now.facts else self.settings.main_node
                try:
                    said = await snapshots.precheck(self.services, vmid, node, command, args)
                except PveError as exc:
                    return _error(502, f"Proxmox did not answer about VM {vmid}: {exc.text}")
                if said is not None:
                    return _error(said.status, said.message)
        try:
            info: VmInfo = await handle.ask(Do(parsed.task, command, args, parsed.by))
        except Rejected as exc:
            return _error(exc.status, exc.message)
        return {"vmid": vmid, "task": info.task, "version": info.task_version}

    async def _change_refusal(
        self, handle: ActorHandle, vmid: int, args: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Why a safe change cannot start, said before anything changes: more vCPUs than the
        node has, or a disk on a storage that cannot take the snapshot it begins with."""
        now: VmInfo = await handle.ask(Query())
        if now.state is not State.RUNNING or now.facts is None:
            return None  # the actor says why not
        node = now.facts.node
        cpu = change_request.sets(args).get("cpu")
        if cpu is not None and (refusal := self._too_many_vcpus(int(cpu), node)):
            return _error(400, f"cpu: {refusal}")
        assert self.services is not None
        if said := await function_check.refusal(self.services.functions, args["verify"]):
            return _error(*said)
        try:
            _, cannot = await snapshots.listing(self.services, vmid, node)
        except PveError as exc:
            return _error(502, f"Proxmox did not answer about VM {vmid}: {exc.text}")
        if cannot:
            return _error(
                409,
                f"VM {vmid} cannot take snapshots: {cannot}; a change starts with one, so "
                "nothing was changed",
            )
        return None

    @_one_vm
    async def _on_snapshots(self, vmid: int) -> dict[str, Any]:
        """A VM's snapshots as Proxmox lists them, with who asked for each one cairn took."""
        info = await self._info(vmid)
        if info is None or info.state is State.ABSENT:
            return _error(404, f"VM {vmid} not found")
        assert self.services is not None
        node = info.facts.node if info.facts else self.settings.main_node
        try:
            snaps, refusal = await snapshots.listing(self.services, vmid, node)
        except NotFound:  # not (yet, or any more) in the cluster: an install's first steps
            return _error(404, f"VM {vmid} not found")
        except PveError as exc:
            return _error(502, f"Proxmox did not answer about VM {vmid}: {exc.text}")
        records = await self.runtime.store.read_stream(stream_name("vm", vmid))
        taken_by = snapshots.takers(records)
        return {
            "snapshots": [snapshots.row(s, taken_by) for s in snaps],
            "refusal": refusal,
        }

    async def _on_templates(self, payload: Any) -> dict[str, Any]:
        """cairn's templates as Proxmox holds them, each with its linked clones."""
        assert self.services is not None
        try:
            return {"templates": await templates.rows(self.services)}
        except StageFailed as exc:
            return _error(502, str(exc))

    async def _on_prune(self, payload: Any) -> dict[str, Any]:
        """Remove the templates nothing clones any more (templates.prune)."""
        assert self.services is not None
        try:
            return await templates.prune(self.services)
        except StageFailed as exc:
            return _error(502, str(exc))

    @_one_vm
    async def _on_status(self, vmid: int) -> dict[str, Any]:
        info = self.inventory.infos.get(vmid)
        handle = self.runtime.actors.get(VmActor, vmid)
        if handle is not None:
            info = await handle.ask(Query())
        if info is None or info.state is State.ABSENT:
            return _error(404, f"VM {vmid} not found")
        return {"status": info.power, "state": info.state.value}

    @_one_vm
    async def _on_detail(self, vmid: int) -> dict[str, Any]:
        info = await self._info(vmid)
        detail = self.inventory.detail(vmid, info)
        if detail is None:
            return _error(404, f"VM {vmid} not found")
        return {**detail, "guest": await self._guest(detail["node"], vmid)}

    async def _info(self, vmid: int) -> VmInfo | None:
        """What the VM's actor knows now; None when no actor holds that id."""
        handle = self.runtime.actors.get(VmActor, vmid)
        return await handle.ask(Query()) if handle is not None else None

    async def _guest(self, node: str, vmid: int) -> dict[str, Any] | None:
        """The VM's notes, NIC, DNS and disks from its config; None while Proxmox has no
        config to read (an install's first steps) or does not answer."""
        assert self.services is not None
        try:
            return guest_view(await self.services.pve.vm_config(node, vmid))
        except PveError:
            return None

    async def _on_list(self, _: Any) -> Any:
        assert self.cluster is not None
        return self.inventory.payload(self.cluster.names, simulated=self.settings.simulated)
