"""What every job a VM actor starts shares (its services, stages, results, the waits for a
guest, the checks of cairn's mark), and the clean-up of a VM. The jobs themselves live in
install.py, lifecycle_jobs.py, change.py, reshape.py and snapshots.py.

A job runs on the event loop, reports each SSE record through `report` (the actor stores and
publishes it), and returns a JobResult; it never touches actor state. A record that recovery
reads to settle what Proxmox may have made (a write-ahead note) is awaited until stored
(`Stages.noted`, `Stages.stored`) before Proxmox is asked to make it. It asks Proxmox through
the port (`svc.pve`, actors/vm/pve.py) only: operations in, values and `PveError`s out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from pathlib import Path
from typing import Any, Protocol

import asyncssh
import attrs

from actors.vm.cputype import cpu_model_for_flags, lowest_cpu_model
from actors.vm.function_check import FunctionRuns
from actors.vm.guest import verify, wait_ready
from actors.vm.imagecache import ImageCache
from actors.vm.lifecycle import State
from actors.vm.ownership import (
    Claim,
    abandoned_create,
    being_created,
    not_ours,
    unfinished_create,
)
from actors.vm.pve import Pve, PveError, VmConfig
from actors.vm.settings import VmSettings
from actors.vm.template_access import Access

log = logging.getLogger(__name__)


class Report(Protocol):
    """Where a job's SSE records go (vm.Reporter: to the VM actor, which stores them)."""

    def __call__(
        self, step: str, status: str, message: str, vm_id: int | None = None, ip: str | None = None
    ) -> None: ...

    async def stored(self) -> None:
        """Return once every record reported so far is stored; raise if it cannot be."""
        ...


# How often a clean-up looks again at a VM whose create is still at work (`lock: create`).
CREATE_POLL = 0.5


@attrs.frozen
class Facts:
    """What cairn knows of an installed VM (the `Installed` event's fields but its task)."""

    node: str
    name: str
    os: str
    version: str
    user: str
    ip: str
    cpu: int
    ram: int
    disk_gb: int
    host_key: str = ""  # OpenSSH public key line; "" when not known (adopted, or older)

    def pinned_key(self) -> asyncssh.SSHKey | None:
        return asyncssh.import_public_key(self.host_key) if self.host_key else None


@attrs.frozen
class JobResult:
    ok: bool
    state: State
    error: str | None = None
    facts: Facts | None = None
    changes: dict[str, Any] = attrs.field(factory=dict)
    # The VM at this id turned out not to be the one cairn created: cairn drops its claim.
    disowned: str | None = None
    snapshot: str | None = None  # the snapshot this task took


@attrs.define
class Services:
    """What jobs need from the service, shared by every VM actor."""

    settings: VmSettings
    pve: Pve  # the Proxmox port (in the service: routed through the node actors)
    images: ImageCache
    key_path: Path
    scripts_dir: Path
    cpu_type: str | None = None
    # Per template key: its lock and the template last found (actors/vm/templates.py).
    templates: dict[Any, Any] = attrs.field(factory=dict)
    # Whether the credentials may build and clone templates, as last asked (template_access).
    template_access: Access = attrs.field(factory=Access)
    # The functions service, for a safe change's function checks (None: not wired).
    functions: FunctionRuns | None = None

    @property
    def nodes(self) -> list[str]:
        return sorted(self.settings.nodes)

    async def detect_cpu_type(self) -> str:
        if self.cpu_type is None:
            models: list[str] = []
            for node in self.nodes:
                try:
                    status = await self.pve.node_status(node)
                except PveError:
                    models = []
                    break
                models.append(cpu_model_for_flags(status.cpu_flags))
            self.cpu_type = lowest_cpu_model(models)
        return self.cpu_type


@attrs.frozen
class Job:
    """What a VM task's job is given: the service, the VM, the node it is on, what cairn knows
    of it (None for a VM cairn did not install), where its records go, the command's
    arguments, and who asked for it (the audit trail's ``by``; None: cairn by itself)."""

    svc: Services
    vmid: int
    node: str
    facts: Facts | None
    report: Report
    args: dict[str, Any]
    by: str | None = None


class StageFailed(Exception):
    pass


class NotOurs(StageFailed):
    """The VM at this id does not carry cairn's mark: nothing was done to it."""


def secs(since: float) -> str:
    return f"({time.monotonic() - since:.2f}s)"


class Stages:
    def __init__(self, report: Report) -> None:
        self.report = report
        self.step = ""
        self.began = time.monotonic()

    def begin(self, step: str, message: str) -> None:
        self.step = step
        self.began = time.monotonic()
        self.report(step, "processing", f"[*] {message} {secs(self.began)}")

    def note(self, message: str) -> None:
        self.report(self.step, "processing", f"[*] {message} {secs(self.began)}")

    async def noted(self, message: str) -> None:
        """`note`, returning once it is stored: a write-ahead note, said before asking Proxmox
        for what it announces, so that a kill -9 in between leaves the record recovery reads.
        Raises (the store's refusal) rather than let the job go on unrecorded."""
        self.note(message)
        await self.report.stored()

    async def stored(self) -> None:
        """Return once every record said so far is stored (see `noted`)."""
        await self.report.stored()

    def done(self, message: str, **extra: Any) -> None:
        self.report(self.step, "success", f"[+] {message} {secs(self.began)}", **extra)

    def fail(self, message: str) -> None:
        self.report(self.step, "error", f"[-] {message} {secs(self.began)}")


def failed(what: str, exc: PveError) -> StageFailed:
    """`qm start failed: <Proxmox's words>` (the operation named as the contract's messages
    have always named it, whichever driver ran it)."""
    return StageFailed(f"{what} failed: {exc.text}")


_NO_BRIDGE = re.compile(r"bridge '([^']+)' does not exist")


def start_failed(exc: PveError, node: str) -> StageFailed:
    """A start's failure, naming the bridge when the node lacks the one VM_BRIDGE names
    (Proxmox says so in the task log, and ends with only "QEMU exited with code 1")."""
    missing = _NO_BRIDGE.search("\n".join(exc.log))
    if missing:
        return StageFailed(
            f"qm start failed: {exc.text}: bridge '{missing.group(1)}' does not "
            f"exist on node {node}; set VM_BRIDGE to a bridge every node has"
        )
    return failed("qm start", exc)


def powerdown_timed_out(exc: PveError) -> bool:
    """A shutdown or reboot gave up waiting for the guest (QS _do_vm_stop)."""
    return "got timeout" in exc.text and "powerdown" in exc.text


async def wait_verified(
    svc: Services, vmid: int, ip: str, user: str, password_hash: str
) -> asyncssh.SSHKey:
    """The new guest's host key, once it answers at `ip` and proves it is VM `vmid` by the
    password hash Proxmox gave it through cloud-init (guest.verify); GuestError otherwise.
    Nothing secret goes to the guest before this returns."""
    host_key = await wait_guest(svc, ip, user)
    s = svc.settings
    await verify(
        ip, vmid=vmid, user=user, key=svc.key_path, port=s.vm_ssh_port, host_key=host_key,
        password_hash=password_hash, timeout=s.ssh_wait_timeout,
    )  # fmt: skip
    return host_key


def reachable(host_key: asyncssh.SSHKey, vmid: int) -> str:
    fingerprint = host_key.get_fingerprint()
    return f"VM is reachable over SSH (host key {fingerprint}) and proved it is VM {vmid}"


async def wait_guest(
    svc: Services, ip: str, user: str, host_key: asyncssh.SSHKey | None = None
) -> asyncssh.SSHKey:
    s = svc.settings
    return await wait_ready(
        ip,
        user=user,
        key=svc.key_path,
        port=s.vm_ssh_port,
        timeout=s.ssh_wait_timeout,
        interval=s.ssh_poll_interval,
        host_key=host_key,
    )


async def where_is(svc: Services, vmid: int, hint: str | None) -> str | None:
    """The node that holds VM `vmid`'s config: the hint first, then every node."""
    found = await find_config(svc, vmid, hint)
    return found[0] if found else None


async def find_config(svc: Services, vmid: int, hint: str | None) -> tuple[str, VmConfig] | None:
    """The node that holds VM `vmid` and its config, asked of the hint first."""
    order = ([hint] if hint else []) + [n for n in svc.nodes if n != hint]
    for node in order:
        try:
            return node, await svc.pve.vm_config(node, vmid)
        except PveError:
            continue
    return None


async def ensure_ours(svc: Services, vmid: int, node: str, claim: Claim | None) -> None:
    """NotOurs unless the VM on `node` carries the mark `claim` expects (ownership.py)."""
    try:
        config = await svc.pve.vm_config(node, vmid)
    except PveError as exc:
        raise StageFailed(f"cannot read VM {vmid}'s config on node {node}: {exc.text}") from None
    why = not_ours(claim, vmid, node, config.options)
    if why:
        raise NotOurs(why)


async def _create_runs(svc: Services, vmid: int, node: str) -> bool:
    """Whether Proxmox lists a task working on VM `vmid` (its create); True when it cannot
    be asked (then the wait is bounded by VM_COMMAND_TIMEOUT alone)."""
    try:
        return bool(await svc.pve.active_tasks(node, vmid))
    except PveError:
        return True


@attrs.frozen
class Removal:
    leftover: str | None = None  # cairn's VM is still there: why it could not be removed
    foreign: str | None = None  # another VM holds the id: left untouched, and why
    removed: str | None = None  # the node cairn's VM was removed from (None: none was there)


async def remove_vm(
    svc: Services, vmid: int, node_hint: str | None, claim: Claim | None
) -> Removal:
    """Stop and destroy VM `vmid` wherever it is, if it carries the mark `claim` expects.
    A create still at work is waited for (up to VM_COMMAND_TIMEOUT): its mark comes at its
    end (ownership.being_created)."""
    found = await find_config(svc, vmid, node_hint)
    began = time.monotonic()
    idle = 0  # looks in a row that found no task working on the placeholder
    while found is not None and being_created(found[1].options):
        waited = time.monotonic() - began
        if waited >= svc.settings.command_timeout:
            return Removal(foreign=unfinished_create(vmid, found[0], waited))
        idle = 0 if await _create_runs(svc, vmid, found[0]) else idle + 1
        if idle >= 2:
            # Twice, a poll apart: not the moment between the placeholder and its task.
            where = found[0]
            log.warning("VM %d on %s: its create died half-way (no task runs it)", vmid, where)
            return Removal(foreign=abandoned_create(vmid, found[0]))
        if waited == 0:
            log.info("VM %d on %s: waiting for its create to end", vmid, found[0])
        await asyncio.sleep(CREATE_POLL)
        found = await find_config(svc, vmid, found[0])
    if found is None:
        return Removal()
    node, config = found
    why = not_ours(claim, vmid, node, config.options)
    if why:
        return Removal(foreign=why)
    # Stopped already, or the destroy below says what is wrong.
    with contextlib.suppress(PveError):
        await svc.pve.stop(node, vmid, cleanup=True)
    try:
        await svc.pve.destroy(node, vmid, cleanup=True)
    except PveError as exc:
        if await where_is(svc, vmid, node) is not None:
            return Removal(leftover=exc.text)
    return Removal(removed=node)


async def observe(svc: Services, vmid: int, node_hint: str | None) -> tuple[str | None, State]:
    """Where the VM is and its settled state, asked of the cluster (after a restart)."""
    node = await where_is(svc, vmid, node_hint)
    if node is None:
        return None, State.ABSENT
    try:
        power = (await svc.pve.vm_status(node, vmid)).status
    except PveError:
        power = "stopped"
    return node, State.RUNNING if power == "running" else State.STOPPED
