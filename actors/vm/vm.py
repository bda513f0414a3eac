"""One actor per VM: its lifecycle state, its facts, and the one task it may run at a time.

The actor checks each command against lifecycle.TABLE, records the task's start and starts the
job; the job's SSE records come back as `Report` messages and are recorded in order; its result
settles the state. A command that arrives while a task runs is refused at once (409 busy).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Coroutine
from typing import Any

import attrs

from actors.runtime import ActorHandle, AggregateActor, Rejected
from actors.vm import (
    change,
    drives,
    install,
    jobs,
    lifecycle_jobs,
    reshape,
    snapshots,
    stages,
    unfinished,
)
from actors.vm.allocator import Release
from actors.vm.events import (
    Adopted,
    Disowned,
    Installed,
    InstallPlanned,
    Observed,
    Progress,
    Reconfigured,
    SnapshotTaken,
    TaskEnded,
    TaskStarted,
)
from actors.vm.jobs import Facts, Job, JobResult, Services
from actors.vm.lifecycle import KEEPS_POWER, POWER, WORKING, Command, Refusal, State, decide
from actors.vm.ownership import Claim
from actors.vm.requests import InstallRequest
from events.model import Event

log = logging.getLogger(__name__)


@attrs.frozen
class Install:
    task: str
    request: InstallRequest
    reserved_in: float  # seconds the allocator took, shown in the first record
    by: str | None = None  # who asked, recorded in vm.task_started (the audit trail)


@attrs.frozen
class Do:
    task: str
    command: Command
    args: dict[str, Any] = attrs.field(factory=dict)
    by: str | None = None  # who asked, recorded in vm.task_started (the audit trail)


@attrs.frozen
class Report:
    task: str
    step: str
    status: str
    message: str
    vm_id: int | None = None
    ip: str | None = None


@attrs.frozen
class Reports:
    """Records a job produced in one turn of the event loop, stored in one append."""

    items: tuple[Report, ...]


class Reporter:
    """A job's `report`: records made in the same loop turn travel to the actor together.

    Each append is a transaction; a stage's "processing" and "success" records usually come
    back to back, and under load one append per record queues the whole service behind the
    store's writer. Coalescing within a loop turn costs no latency. The job does not wait for
    them, but where it asks for `stored()`.
    """

    def __init__(self, actor: VmActor, task: str) -> None:
        self._actor = actor
        self._task = task
        self._pending: list[Report] = []

    def __call__(
        self, step: str, status: str, message: str, vm_id: int | None = None, ip: str | None = None
    ) -> None:
        if not self._pending:
            asyncio.get_running_loop().call_soon(self.flush)
        self._pending.append(Report(self._task, step, status, message, vm_id, ip))

    def flush(self) -> None:
        if self._pending:
            batch, self._pending = tuple(self._pending), []
            self._actor.notify(Reports(batch))

    async def stored(self) -> None:
        """Return once every record reported so far is in the event store (one append for
        what is still pending; the actor's appends complete in order); raise what refused
        it, so the job stops before doing what the records announce."""
        batch, self._pending = tuple(self._pending), []
        await self._actor.confirmed(Reports(batch))

    async def around(self, job: Coroutine[Any, Any, Any]) -> Any:
        """Run `job`, then send what it reported before its result reaches the actor."""
        try:
            return await job
        finally:
            self.flush()


@attrs.frozen
class Finished:
    task: str
    command: Command
    outcome: Any  # JobResult, or the exception the job died of


@attrs.frozen
class _Released:
    task: str
    outcome: JobResult
    release: Any  # what the allocator answered (None, or the error)


@attrs.frozen
class Recover:
    """Sent once at start-up, or first after a restart: settle a task whose job is gone
    (the process stopped, or the actor failed and its job was cancelled)."""

    reason: str = "interrupted by a restart"


@attrs.frozen
class Observe:
    """What the cluster list says about this VM (None: not in the cluster)."""

    node: str | None
    status: str | None
    polled_at: float  # time.monotonic() when the poll began
    adopt: Adopted | None = None


@attrs.frozen
class Query:
    pass


@attrs.frozen
class LastTask:
    """How the VM's most recent task went (the running one has no outcome yet)."""

    task: str
    command: str
    ok: bool | None = None  # None: still running
    error: str | None = None


@attrs.frozen
class VmInfo:
    vmid: int
    state: State
    task: str | None
    task_version: int
    facts: Facts | None
    claim: Claim | None = None  # why cairn holds the VM for its own; None: not cairn's
    plan: InstallPlanned | None = None  # what a running install builds
    last_task: LastTask | None = None
    before: State | None = None  # the state the running task began in

    @property
    def power(self) -> str:
        if self.state in KEEPS_POWER and self.before is not None:
            return POWER[self.before]
        return POWER[self.state]


# How events/store.py words a refused write (StoreWriteFailed): the reason an actor stopped
# by one is handed at its recovery.
_STORE_REFUSALS = ("the disk holding the event store is full", "the event store refuses writes")

# Commands that need the VM to be cairn's own (its mark is checked again before they run).
_OWNERS_ONLY = {
    Command.DESTROY: "destroy",
    Command.SET_NODE: "migrate",
    Command.SET_TAGS: "change the tags of",
    Command.SET_DESCRIPTION: "change the notes of",
    Command.SET_NETWORK: "change the network of",
}
_SNAPSHOT_COMMANDS = frozenset({Command.SNAPSHOT, Command.ROLLBACK, Command.DELETE_SNAPSHOT})


class VmActor(AggregateActor):
    aggregate = "vm"

    def setup(self, **kwargs: Any) -> None:
        services: Services = kwargs.pop("services")
        allocator: ActorHandle = kwargs.pop("allocator")
        super().setup(**kwargs)
        self.svc = services
        self.allocator = allocator
        self.vmid = int(self.ident)
        self.state = State.ABSENT
        self.facts: Facts | None = None
        self.claim: Claim | None = None
        self.task: str | None = None
        self.task_command: str | None = None
        self.task_version = 0  # stream version of the current (or last) task's start
        self.before: State | None = None  # the state the current task began in
        self.plan: InstallPlanned | None = None
        self.last_task: LastTask | None = None
        # When the last task settled (monotonic; not state: the cluster's lag is a runtime fact).
        self.settled_at = 0.0

    # -- state ---------------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        match event:
            case TaskStarted(task=task, command=command, working=working):
                self.task, self.task_command = task, command
                self.before = self.state
                self.task_version = self.version + 1
                self.state = State(working)
                self.last_task = LastTask(task, command)
            case InstallPlanned():
                self.plan = event
            case Installed():
                self.facts = Facts(**{f.name: getattr(event, f.name) for f in attrs.fields(Facts)})
                self.claim = Claim(event.task if event.marked else None)
            case Disowned():
                self.claim = None
                if self.facts is not None:
                    # No longer the guest cairn installed: no user or host key to wait for.
                    self.facts = attrs.evolve(self.facts, version="", user="", host_key="")
            case Reconfigured():
                if self.facts is not None:
                    f = self.facts
                    self.facts = attrs.evolve(
                        f,
                        cpu=f.cpu if event.cpu is None else event.cpu,
                        ram=f.ram if event.ram is None else event.ram,
                        disk_gb=f.disk_gb if event.disk_gb is None else event.disk_gb,
                        node=f.node if event.node is None else event.node,
                    )
            case TaskEnded(task=task, state=state):
                if self.task_command == Command.INSTALL.value and state == State.FAILED.value:
                    # The install's clean-up failed: what is left carries its mark.
                    self.claim = Claim(task)
                self.task = None
                self.plan = None
                self.state = State(state)
                self.last_task = LastTask(task, self.task_command or "", event.ok, event.error)
                if self.state is State.ABSENT:
                    self.facts = None
                    self.claim = None
            case Adopted():
                self.facts = Facts(
                    event.node,
                    event.name,
                    event.os,
                    "",
                    "",
                    event.ip,
                    event.cpu,
                    event.ram,
                    event.disk_gb,
                )
                self.claim = None
                self.state = State.RUNNING if event.running else State.STOPPED
            case Observed(state=state):
                self.state = State(state)
                if self.state is State.ABSENT:
                    self.facts = None
                    self.claim = None
            case Progress() | SnapshotTaken():
                pass

    # -- commands ------------------------------------------------------------------------------

    def handle(self, message: Any) -> Any:
        match message:
            case Install():
                return self._install(message)
            case Do():
                return self._do(message)
            case Reports(items=items):
                self.record(
                    *(Progress(r.task, r.step, r.status, r.message, r.vm_id, r.ip) for r in items)
                )
                return None
            case Finished():
                return self._finished(message)
            case _Released():
                return self._released(message)
            case Recover(reason=reason):
                return self._recover(reason)
            case Observe():
                return self._observe(message)
            case Query():
                return self.info()
        raise TypeError(f"vm: unknown message {message!r}")

    def recovery(self, reason: str) -> Recover:
        if reason.startswith(_STORE_REFUSALS):
            # Nothing restarted: the store refused the task's records, its job was stopped,
            # and the actor came back once a write worked again (actors/runtime.py).
            return Recover(
                f"stopped while the event store refused writes ({reason}); it takes them again"
            )
        return Recover(f"interrupted by a restart ({reason})")

    def info(self) -> VmInfo:
        return VmInfo(
            self.vmid,
            self.state,
            self.task,
            self.task_version,
            self.facts,
            self.claim,
            self.plan,
            self.last_task,
            self.before if self.task is not None else None,
        )

    def _refuse(self, verdict: Refusal) -> None:
        raise Rejected(verdict.status, verdict.message)

    def _install(self, cmd: Install) -> VmInfo:
        verdict = decide(self.state, Command.INSTALL, self.vmid)
        if isinstance(verdict, Refusal):
            self._refuse(verdict)
            raise AssertionError
        step = stages.CHECK_ID
        how = "using requested" if cmd.request.vmid is not None else "auto-assigned"
        secs = f"({cmd.reserved_in:.2f}s)"
        req, settings = cmd.request, self.svc.settings
        self.record(
            TaskStarted(cmd.task, Command.INSTALL.value, verdict.working.value, cmd.by),
            InstallPlanned(
                cmd.task,
                req.node or settings.main_node,
                req.name or str(self.vmid),
                req.os,
                req.version,
                req.user,
                settings.ip_for(self.vmid),
            ),
            Progress(cmd.task, step, "processing", f"[*] start VM installation {secs}"),
            Progress(cmd.task, step, "success", f"[+] {how} VMID: {self.vmid} {secs}"),
        )
        report = Reporter(self, cmd.task)
        started = time.monotonic() - cmd.reserved_in
        job = install.install(self.svc, self.vmid, cmd.request, report, started, cmd.task)
        return self._run(cmd.task, Command.INSTALL, report, job)

    def _do(self, cmd: Do) -> VmInfo:
        settled = self.state is not State.ABSENT and self.state not in WORKING
        if cmd.command in _OWNERS_ONLY and self.claim is None and settled:
            # Said before the state: stopping the VM first would not change the answer.
            raise Rejected(
                409,
                f"VM {self.vmid} was not created by cairn; cairn does not "
                f"{_OWNERS_ONLY[cmd.command]} it (do that in Proxmox if you mean it)",
            )
        verdict = decide(self.state, cmd.command, self.vmid)
        if isinstance(verdict, Refusal):
            self._refuse(verdict)
            raise AssertionError
        node = self.facts.node if self.facts else self.svc.settings.main_node
        if cmd.command is Command.SET_NODE and cmd.args.get("node") == node:
            raise Rejected(400, f"node: VM {self.vmid} is already on node {node!r}")
        if cmd.command is Command.SET_DISK and cmd.args.get("drive", drives.BOOT) == drives.BOOT:
            limit = self.svc.settings.max_disk
            current = self.facts.disk_gb if self.facts else 0
            if limit is not None and current + cmd.args["grow_gb"] > limit:
                raise Rejected(
                    400, f"disk: {current}G + {cmd.args['grow_gb']}G exceeds VM_MAX_DISK ({limit}G)"
                )
        if cmd.command is Command.CHANGE:
            return self._change(cmd, verdict.working, node)
        self.record(TaskStarted(cmd.task, cmd.command.value, verdict.working.value, cmd.by))
        report = Reporter(self, cmd.task)
        job = Job(self.svc, self.vmid, node, self.facts, report, cmd.args, cmd.by)
        if cmd.command in reshape.COMMANDS:
            changed = reshape.run(job, cmd.command, self.claim, verdict.done)
            return self._run(cmd.task, cmd.command, report, changed)
        if cmd.command in _SNAPSHOT_COMMANDS:
            return self._run(cmd.task, cmd.command, report, snapshots.run(job, cmd.command))
        power = lifecycle_jobs.power(
            self.svc, cmd.command.value, self.vmid, node, self.facts, report, cmd.args, self.claim
        )
        return self._run(cmd.task, cmd.command, report, power)

    def _run(
        self, task: str, command: Command, report: Reporter, job: Coroutine[Any, Any, Any]
    ) -> VmInfo:
        """Start `job` as the task's work, its records sent through `report`; a task's start
        answers with the VM's info at once, the job going on behind it."""
        self.start_job(report.around(job), done=functools.partial(Finished, task, command))
        return self.info()

    def _change(self, cmd: Do, working: State, node: str) -> VmInfo:
        facts = self.facts
        if facts is None or not facts.user:
            raise Rejected(
                409,
                f"VM {self.vmid} was not installed by cairn: cairn has no SSH access to it "
                "to run a change's steps and checks",
            )
        grown = sum(
            int(str(s["set"]["disk"]).rstrip("G"))
            for s in cmd.args["steps"]
            if "disk" in s.get("set", {})
        )
        limit = self.svc.settings.max_disk
        if grown and limit is not None and facts.disk_gb + grown > limit:
            raise Rejected(400, f"disk: {facts.disk_gb}G + {grown}G exceeds VM_MAX_DISK ({limit}G)")
        self.record(TaskStarted(cmd.task, cmd.command.value, working.value, cmd.by))
        report = Reporter(self, cmd.task)
        job = Job(self.svc, self.vmid, node, facts, report, cmd.args, cmd.by)
        changing = change.run(job, facts, cmd.task)
        self.start_job(
            report.around(changing), done=functools.partial(Finished, cmd.task, cmd.command)
        )
        return self.info()

    def _finished(self, msg: Finished) -> None:
        if msg.task != self.task:
            return None
        outcome = msg.outcome
        if not isinstance(outcome, JobResult):
            # The job itself broke (a bug, or it was cancelled at shutdown). Cancellation is
            # settled by Recover at the next start; anything else is recorded now.
            if isinstance(outcome, BaseException) and type(outcome).__name__ == "CancelledError":
                return None
            error = f"internal error: {outcome!r}"
            self.record(
                Progress(msg.task, "error", "error", f"[-] {error}"),
                TaskEnded(msg.task, False, State.FAILED.value, error),
            )
            return None
        events: list[Event] = []
        if outcome.ok and outcome.facts is not None:
            f = outcome.facts
            events.append(Installed(msg.task, **attrs.asdict(f, recurse=False), marked=True))
        if outcome.disowned:
            events.append(Disowned(msg.task, outcome.disowned))
        if outcome.ok and outcome.changes:
            events.append(Reconfigured(msg.task, **outcome.changes))
        if outcome.ok and outcome.snapshot:
            events.append(SnapshotTaken(msg.task, outcome.snapshot))
        if outcome.state is State.ABSENT:
            # The task ends only once the allocator has the id back: a client told "ok" (or
            # shown the install's error) may reuse the id at once.
            reason = "destroyed" if outcome.ok else f"install failed: {outcome.error}"
            self.start_job(
                self.allocator.ask(Release(self.vmid, reason)),
                done=functools.partial(_Released, msg.task, outcome),
            )
            return None
        events.append(TaskEnded(msg.task, outcome.ok, outcome.state.value, outcome.error))
        self.record(*events)
        self.settled_at = time.monotonic()
        return None

    def _released(self, msg: _Released) -> None:
        if msg.task != self.task:
            return None
        if isinstance(msg.release, BaseException):
            log.error("VM %s: the allocator did not take the id back: %r", self.vmid, msg.release)
        o = msg.outcome
        self.record(TaskEnded(msg.task, o.ok, o.state.value, o.error))
        self.settled_at = time.monotonic()
        return None

    def _release(self, reason: str) -> None:
        self.start_job(self.allocator.tell(Release(self.vmid, reason)))

    def _recover(self, reason: str) -> None:
        if self.state not in WORKING or self.task is None:
            return None
        task, command = self.task, self.task_command

        async def settle() -> JobResult:
            if command == Command.CHANGE.value:
                where = self.facts.node if self.facts else self.svc.settings.main_node
                records = await self.ctx.store.read_stream(self.stream)
                verified = change.began_keeping(records, task)
                report = Reporter(self, task)
                job = change.settle(
                    self.svc, self.vmid, where, self.facts, report, task, reason, verified=verified
                )
                return await report.around(job)
            if command == Command.INSTALL.value:
                hint = self.facts.node if self.facts else None
                # A template build or a clone it left half done goes first (unfinished.py).
                records = await self.ctx.store.read_stream(self.stream)
                left = unfinished.read(records, task)
                said = await unfinished.settle(self.svc, self.vmid, left, task)
                # Only a VM carrying this install's mark is removed (one created before cairn
                # marked its VMs, or by someone else, is left and reported).
                removal = await jobs.remove_vm(self.svc, self.vmid, hint, Claim(task))
                error = reason + "".join(f"; {s}" for s in said)
                if removal.leftover:
                    return JobResult(
                        False, State.FAILED, error=f"{error}; cleanup failed: {removal.leftover}"
                    )
                if removal.removed:
                    error += f"; VM {self.vmid} removed from node {removal.removed}"
                if removal.foreign:
                    error += f"; {removal.foreign}"
                return JobResult(False, State.ABSENT, error=error, disowned=removal.foreign)
            node, state = await jobs.observe(
                self.svc, self.vmid, self.facts.node if self.facts else None
            )
            changes = {"node": node} if node and self.facts and node != self.facts.node else {}
            return JobResult(False, state, error=reason, changes=changes)

        def done(outcome: Any) -> Any:
            if isinstance(outcome, JobResult):
                self.record(
                    Progress(
                        task, stages.RECOVERY, "error", f"[-] {outcome.error}; {_left(outcome)}"
                    )
                )
                if outcome.changes and self.facts is not None:
                    self.record(Reconfigured(task, **outcome.changes))
            return Finished(task, Command(command or "install"), outcome)

        self.start_job(settle(), done=done)
        return None

    def _observe(self, msg: Observe) -> None:
        if self.state in WORKING:
            return None
        if self.state is State.ABSENT:
            if msg.adopt is not None:
                self.record(msg.adopt)
            return None
        if msg.polled_at < self.settled_at + self.svc.settings.observe_grace:
            return None  # the cluster view may predate our own last change
        if msg.node is None:
            # Gone from the cluster behind our back: say so and free the id.
            self.record(Observed(State.ABSENT.value))
            self._release("removed outside cairn")
            return None
        if self.facts is not None and msg.node != self.facts.node:
            self.record(Reconfigured("observed", node=msg.node))
        settled = self.state in (State.RUNNING, State.STOPPED)
        if settled and msg.status in ("running", "stopped") and msg.status != self.state.value:
            self.record(Observed(msg.status))
        return None


def _left(outcome: JobResult) -> str:
    """How a settled task leaves the VM, said truly: a VM that is there but not cairn's is
    not "absent" (cairn only stops tracking it)."""
    if outcome.state is State.ABSENT and outcome.disowned:
        return "cairn no longer tracks this id (0.00s)"
    return f"VM left {outcome.state.value} (0.00s)"
