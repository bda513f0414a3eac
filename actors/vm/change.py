"""A safe change: a snapshot first, then the steps, then the checks that the VM still works;
kept when they pass (the snapshot removed unless asked to keep it), rolled back to the
snapshot when a step or a check fails.

The change works on the running guest cairn installed: its `run` steps and checks go as root
over cairn's SSH channel to the host key pinned at install (`sudo -n bash -s`, the script on
stdin, never on a command line), their output into the task's records. The snapshot is named
after the task, so a change that a restart cut off is found again and settled by the same
rollback (`settle`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncssh

from actors.audit import BY_MAX
from actors.vm import function_check
from actors.vm.change_request import MAX_TIMEOUT
from actors.vm.events import Progress
from actors.vm.guest import GuestError, _options, changed_key
from actors.vm.jobs import (
    Facts,
    Job,
    JobResult,
    Report,
    Services,
    Stages,
    observe,
    wait_guest,
)
from actors.vm.lifecycle import State
from actors.vm.pve import PveError, Snapshot
from actors.vm.requests import memory_balloon
from events.store import Recorded

# The stages of a change (each SSE record's `step`).
SNAPSHOT = "change > taking snapshot"
VERIFY = "change > verifying"
KEEP = "change > keeping"
ROLLBACK = "change > rolling back"
# Output lines of one script kept in the task's records, and the length of each: a script
# that prints a whole log must not fill the event store.
MAX_LINES = 200
MAX_LINE = 500


def step_name(number: int, step: dict[str, Any]) -> str:
    kind = next(k for k in ("set", "run", "reboot") if k in step)
    return f"change > step {number}: {kind}"


def snapshot_name(task: str) -> str:
    """The change's snapshot: found again from the task alone after a restart."""
    return f"cairn-change-{task[:16]}"


# Said in the snapshot's description when the caller asked to keep it: the one place the wish
# outlives a kill -9, so the change settled at the next start keeps the snapshot too.
KEPT_MARK = "(keep_snapshot)"


def snapshot_description(task: str, keep: bool) -> str:
    return f"cairn: before change {task}" + (f" {KEPT_MARK}" if keep else "")


class Failed(Exception):
    """A step or a check failed: why, in the words the stream ends with."""


async def run(job: Job, facts: Facts, task: str) -> JobResult:
    """The change `job.args` of the VM cairn installed (`facts`), under task `task`."""
    svc, vmid, node, args = job.svc, job.vmid, job.node, job.args
    st = Stages(job.report)
    pve = svc.pve
    name = snapshot_name(task)
    keep = bool(args.get("keep_snapshot"))
    st.begin(SNAPSHOT, f"taking snapshot {name} of VM {vmid} before the change")
    if "disk-grow" in args.get("accept", []):
        st.note("a grown disk is not undone by a rollback in full; accepted")
    # The task's start is stored before the snapshot: a restart settles only a task it knows.
    await st.stored()
    try:
        taken = await pve.snapshot(
            node, vmid, name, description=snapshot_description(task, keep), vmstate=False
        )
    except PveError as exc:
        st.fail(f"snapshot failed: {exc.text}; nothing was changed")
        _, state = await observe(svc, vmid, node)
        return JobResult(False, state, error=f"snapshot failed: {exc.text}")
    _log(st, taken.log)
    st.done(f"snapshot {name} taken")

    changes: dict[str, Any] = {}
    try:
        for number, step in enumerate(args["steps"], 1):
            await _step(svc, st, vmid, node, facts, number, step, changes)
        await _verify(svc, st, facts, args["verify"], _checked_by(job.by, vmid, task))
    except Failed as failure:
        return await _roll_back(svc, st, vmid, node, facts, name, keep, str(failure))

    st.begin(KEEP, "the checks passed: keeping the change")
    # Stored before the snapshot goes: a restart keeps a change that had begun keeping itself
    # (began_keeping) and would otherwise roll it back, or find no snapshot to roll back to.
    await st.stored()
    snapshot = name
    if not keep:
        try:
            _log(st, (await pve.delete_snapshot(node, vmid, name)).log)
            snapshot = ""
        except PveError as exc:
            # The change stands; only the snapshot is left over, and said so.
            st.note(f"snapshot {name} could not be removed: {exc.text}; delete it by hand")
    kept = f"; snapshot {name} kept" if snapshot else f"; snapshot {name} removed"
    st.done(f"change kept{kept}", vm_id=vmid, ip=facts.ip)
    return JobResult(True, State.RUNNING, changes=changes, snapshot=snapshot or None)


async def _step(
    svc: Services,
    st: Stages,
    vmid: int,
    node: str,
    facts: Facts,
    number: int,
    step: dict[str, Any],
    changes: dict[str, Any],
) -> None:
    where = f"step {number}"
    pve = svc.pve
    if "run" in step:
        st.begin(step_name(number, step), f"running step {number}'s script as root")
        status, tail = await _script(svc, st, facts, step["run"], step["timeout"])
        if status != 0:
            st.fail(_outcome(status, tail))
            raise Failed(f"{where} (run) failed: {_outcome(status, tail)}")
        st.done(f"step {number} done")
        return
    if "reboot" in step:
        st.begin(step_name(number, step), f"rebooting VM {vmid}")
        try:
            await pve.reboot(node, vmid)
            await wait_guest(svc, facts.ip, facts.user, facts.pinned_key())
        except PveError as exc:
            st.fail(f"reboot failed: {exc.text}")
            raise Failed(f"{where} (reboot) failed: {exc.text}") from None
        except GuestError as exc:
            st.fail(str(exc))
            raise Failed(f"{where} (reboot) failed: {exc}") from None
        st.done("VM rebooted; SSH is ready")
        return
    wanted: dict[str, Any] = step["set"]
    said = ", ".join(
        f"{k} {'+' if k == 'disk' else ''}{v}{' MB' if k == 'memory' else ''}"
        for k, v in wanted.items()
    )
    st.begin(step_name(number, step), f"setting {said}")
    try:
        # cairn sets sizes on a stopped VM, as set/* does; the guest shuts down cleanly.
        await pve.shutdown(node, vmid)
        options: dict[str, str] = {}
        if "cpu" in wanted:
            options["cores"] = str(wanted["cpu"])
        if "memory" in wanted:
            ram = int(wanted["memory"])
            options["memory"] = str(ram)
            config = await pve.vm_config(node, vmid)
            balloon = memory_balloon(ram, svc.settings, config.options)
            if balloon is not None:
                options["balloon"] = str(balloon)
        if options:
            await pve.set_config(node, vmid, options)
        if "disk" in wanted:
            await pve.resize(node, vmid, "scsi0", f"+{wanted['disk']}", on_line=st.note)
        await pve.start(node, vmid)
        await wait_guest(svc, facts.ip, facts.user, facts.pinned_key())
    except PveError as exc:
        st.fail(exc.text)
        raise Failed(f"{where} (set) failed: {exc.text}") from None
    except GuestError as exc:
        st.fail(str(exc))
        raise Failed(f"{where} (set) failed: {exc}") from None
    if "cpu" in wanted:
        changes["cpu"] = int(wanted["cpu"])
    if "memory" in wanted:
        changes["ram"] = int(wanted["memory"])
    if "disk" in wanted:
        grown = int(str(wanted["disk"]).rstrip("G"))
        changes["disk_gb"] = changes.get("disk_gb", facts.disk_gb) + grown
    st.done(f"step {number} done: {said}; SSH is ready")


def _checked_by(by: str | None, vmid: int, task: str) -> str:
    """The ``by`` of a function run a check makes: who asked for the change, then which change
    it checks, so the functions' journal names the person, not only the VM. Kept within the
    audit trail's length: a name that leaves no room stands alone (the change's own task
    records both)."""
    if by is None:
        return f"the change of VM {vmid} (task {task})"
    said = f"{by}, for the change of VM {vmid}"
    return said if len(said) <= BY_MAX else by


async def _verify(
    svc: Services, st: Stages, facts: Facts, checks: list[dict[str, Any]], by: str
) -> None:
    for number, check in enumerate(checks, 1):
        which = f"check {number} of {len(checks)}"
        if "function" in check:
            path = check["function"]
            st.begin(VERIFY, f"{which}: running the stored function {path}")
            why = await function_check.check(
                svc.functions, path, check["input"], check["timeout"], by
            )
            if why is not None:
                st.fail(f"{which} failed: {why}")
                raise Failed(f"verify failed: {which}: {why}")
            st.done(f"{which} passed: function {path} says ok")
            continue
        if "ssh" in check:
            st.begin(VERIFY, f"{which}: SSH answers with the host key pinned at install")
            try:
                await wait_guest(svc, facts.ip, facts.user, facts.pinned_key())
            except GuestError as exc:
                st.fail(str(exc))
                raise Failed(f"verify failed: {exc}") from None
            st.done(f"{which} passed: SSH answers")
            continue
        st.begin(VERIFY, f"{which}: running its script as root")
        status, tail = await _script(svc, st, facts, check["run"], check["timeout"])
        if status != 0:
            st.fail(f"{which} failed: {_outcome(status, tail)}")
            raise Failed(f"verify failed: {which}: {_outcome(status, tail)}")
        st.done(f"{which} passed")


def _outcome(status: int, tail: str) -> str:
    """A failed script in words: `exit status 3: <its last line>`, or why it could not run."""
    return f"exit status {status}{tail}" if status >= 0 else tail.removeprefix(": ")


async def _script(
    svc: Services, st: Stages, facts: Facts, script: str, timeout: float
) -> tuple[int, str]:
    """Run `script` as root on the guest; its exit status (-1: it could not run) and the
    end of a failure's message (`: <its last line>`). Its output goes into the records."""
    s = svc.settings
    key = facts.pinned_key()
    options = _options(facts.user, svc.key_path, s.vm_ssh_port, 15.0, key)
    shown = 0
    last = ""
    try:
        async with (
            asyncio.timeout(min(timeout, MAX_TIMEOUT)),
            asyncssh.connect(facts.ip, **options) as conn,
            conn.create_process("sudo -n bash -s", stderr=asyncssh.STDOUT) as proc,
        ):
            proc.stdin.write(script if script.endswith("\n") else script + "\n")
            proc.stdin.write_eof()
            async for raw in proc.stdout:
                line = str(raw).rstrip("\n")[:MAX_LINE]
                if line.strip():
                    last = line
                    if shown < MAX_LINES:
                        st.note(f"| {line}")
                    shown += 1
            done = await proc.wait()
    except asyncssh.HostKeyNotVerifiable:
        return -1, f": {changed_key(facts.ip, key) if key else 'host key changed'}"
    except TimeoutError:
        return -1, f": timed out after {timeout:g}s"
    except (OSError, asyncssh.Error) as exc:
        return -1, f": SSH to {facts.user}@{facts.ip} failed: {exc}"
    if shown > MAX_LINES:
        st.note(f"({shown - MAX_LINES} more lines not kept)")
    status = done.exit_status if done.exit_status is not None else -1
    return status, (f": {last}" if status != 0 and last else "")


async def _roll_back(
    svc: Services,
    st: Stages,
    vmid: int,
    node: str,
    facts: Facts,
    name: str,
    keep: bool,
    reason: str,
) -> JobResult:
    """Back to snapshot `name` after `reason`; the task fails either way, saying how the VM
    was left."""
    rolled = await rollback(svc, st, vmid, node, facts, name, keep)
    _, state = await observe(svc, vmid, node)
    if rolled is None:
        st.fail(f"change rolled back: {reason}")
        return JobResult(False, state, error=f"change rolled back: {reason}")
    error = f"{reason}; {rolled}"
    st.fail(f"change not rolled back: {error}")
    return JobResult(False, state, error=error)


async def rollback(
    svc: Services, st: Stages, vmid: int, node: str, facts: Facts | None, name: str, keep: bool
) -> str | None:
    """Roll VM `vmid` back to snapshot `name`, started again, and remove the snapshot unless
    `keep`; None when that worked, else why the VM needs attention."""
    pve = svc.pve
    st.begin(ROLLBACK, f"rolling VM {vmid} back to snapshot {name}")
    try:
        task = await pve.rollback(node, vmid, name, start=True)
    except PveError as exc:
        st.fail(f"rollback failed: {exc.text}")
        return (
            f"rollback to snapshot {name} failed: {exc.text}; VM {vmid} needs attention "
            f"(snapshot {name} is left for it)"
        )
    _log(st, task.log)
    if facts is not None and facts.user:
        try:
            await wait_guest(svc, facts.ip, facts.user, facts.pinned_key())
        except GuestError as exc:
            st.note(f"back at snapshot {name}, but {exc}")
    if not keep:
        try:
            _log(st, (await pve.delete_snapshot(node, vmid, name)).log)
        except PveError as exc:
            st.note(f"snapshot {name} could not be removed: {exc.text}; delete it by hand")
    st.done(f"VM {vmid} is back at snapshot {name}")
    return None


async def settle(
    svc: Services,
    vmid: int,
    node: str,
    facts: Facts | None,
    report: Report,
    task: str,
    reason: str,
    *,
    verified: bool = False,
) -> JobResult:
    """A change a restart cut off: rolled back to its snapshot, or, with the snapshot gone,
    the VM left as it is and said to need attention (it may be half-changed). One cut off
    after its checks passed (`verified`: it had begun keeping) is kept: undoing a change
    that proved to work would be the surprise."""
    st = Stages(report)
    name = snapshot_name(task)
    try:
        found = {s.name: s for s in await svc.pve.snapshots(node, vmid)}
    except PveError as exc:
        found = {}
        listed = f"its snapshots could not be listed ({exc.text})"
    else:
        listed = ""
    taken = found.get(name)
    keep = taken is not None and taken.description.rstrip().endswith(KEPT_MARK)
    if verified:
        return await _keep_after_restart(svc, st, vmid, node, name, reason, taken, keep, listed)
    if listed:
        reason = f"{reason}; {listed}"
    if taken is None:
        _, state = await observe(svc, vmid, node)
        return JobResult(
            False,
            state,
            error=f"{reason}; the change's snapshot {name} is gone, so it cannot be rolled "
            f"back: VM {vmid} needs attention (it may be half-changed)",
        )
    failed = await rollback(svc, st, vmid, node, facts, name, keep=keep)
    _, state = await observe(svc, vmid, node)
    if failed is not None:
        return JobResult(False, state, error=f"{reason}; {failed}")
    kept = f" (snapshot {name} kept, as asked)" if keep else ""
    return JobResult(
        False, state, error=f"{reason}; the change was rolled back to snapshot {name}{kept}"
    )


async def _keep_after_restart(
    svc: Services,
    st: Stages,
    vmid: int,
    node: str,
    name: str,
    reason: str,
    taken: Snapshot | None,
    keep: bool,
    listed: str,
) -> JobResult:
    st.begin(KEEP, "the checks had passed before the restart: keeping the change")
    left = ""
    if listed:
        left = f"; snapshot {name} may be left over ({listed}): delete it by hand"
    elif keep:
        left = f"; snapshot {name} kept, as asked"
    elif taken is not None:
        try:
            _log(st, (await svc.pve.delete_snapshot(node, vmid, name)).log)
        except PveError as exc:
            left = f"; snapshot {name} may be left over ({exc.text}): delete it by hand"
    st.done(f"change kept{left}")
    changes: dict[str, Any] = {}
    with contextlib.suppress(PveError):
        # What the steps set, read back: the actor's facts follow the VM.
        config = await svc.pve.vm_config(node, vmid)
        for key, field in (("cores", "cpu"), ("memory", "ram")):
            value = config.options.get(key, "")
            if value.isdigit():
                changes[field] = int(value)
    _, state = await observe(svc, vmid, node)
    error = f"{reason}; the change had passed its checks and is kept{left}"
    return JobResult(False, state, error=error, changes=changes)


def began_keeping(records: list[Recorded], task: str) -> bool:
    """Whether the change `task` had passed its checks and begun keeping itself."""
    return any(
        isinstance(r.event, Progress) and r.event.task == task and r.event.step == KEEP
        for r in records
    )


def _log(st: Stages, lines: tuple[str, ...]) -> None:
    for line in lines:
        if line.strip() and not line.startswith("TASK "):
            st.note(line.strip())
