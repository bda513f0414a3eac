"""The snapshot jobs a VM actor starts (take, roll back, delete) and the checks made before
one starts, in the words the HTTP layer answers with.

Proxmox's own rules (docs/simulator.md, "Snapshots") decide in the end; what is checked here
first is what cairn can say more clearly and before anything changes: a snapshot that does not
exist (404), a name already used (409), a disk on a storage that cannot take snapshots (409,
naming the disk and the storage).
"""

from __future__ import annotations

import datetime
from typing import Any

import attrs

from actors.vm import stages
from actors.vm.events import SnapshotTaken, TaskStarted
from actors.vm.jobs import (
    Job,
    JobResult,
    Services,
    StageFailed,
    Stages,
    observe,
    wait_guest,
)
from actors.vm.lifecycle import Command, State
from actors.vm.pve import PveError, Snapshot, snapshot_refusal
from events.store import Recorded


@attrs.frozen
class Refusal:
    status: int
    message: str


async def storage_types(svc: Services, node: str) -> dict[str, str]:
    return {s.name: s.type for s in await svc.pve.storages(node)}


async def listing(svc: Services, vmid: int, node: str) -> tuple[list[Snapshot], str | None]:
    """The VM's snapshots and, if its storages cannot take one, why."""
    snaps = await svc.pve.snapshots(node, vmid)
    config = await svc.pve.vm_config(node, vmid)
    return snaps, snapshot_refusal(config, await storage_types(svc, node))


async def precheck(
    svc: Services, vmid: int, node: str, command: Command, args: dict[str, Any]
) -> Refusal | None:
    """Why `command` cannot run, said before it starts; None when Proxmox may try."""
    name = str(args["name"])
    snaps, refusal = await listing(svc, vmid, node)
    known = {s.name for s in snaps}
    if command is Command.SNAPSHOT:
        if name in known:
            return Refusal(409, f"VM {vmid} already has a snapshot named {name!r}")
        if refusal:
            return Refusal(409, f"VM {vmid} cannot take snapshots: {refusal}")
        return None
    if name not in known:
        return Refusal(404, f"VM {vmid} has no snapshot named {name!r}")
    return None


async def run(job: Job, command: Command) -> JobResult:
    """Take, roll back to or delete the snapshot `args["name"]`; the VM is left as Proxmox
    leaves it, read back at the end."""
    svc, vmid, node, facts, args = job.svc, job.vmid, job.node, job.facts, job.args
    st = Stages(job.report)
    pve = svc.pve
    name = str(args["name"])
    try:
        if command is Command.SNAPSHOT:
            ram = " with its RAM" if args.get("vmstate") else ""
            st.begin(stages.SNAPSHOT, f"taking snapshot {name} of VM {vmid}{ram}")
            refusal = await precheck(svc, vmid, node, command, args)
            if refusal is not None:
                raise StageFailed(refusal.message)
            try:
                task = await pve.snapshot(
                    node, vmid, name, description=args.get("description") or "",
                    vmstate=bool(args.get("vmstate")),
                )  # fmt: skip
            except PveError as exc:
                raise StageFailed(f"snapshot failed: {exc.text}") from None
            _log(st, task.log)
            st.done(f"snapshot {name} taken")
            _, state = await observe(svc, vmid, node)
            return JobResult(True, state, snapshot=name)
        if command is Command.ROLLBACK:
            st.begin(stages.ROLLBACK, f"rolling VM {vmid} back to snapshot {name}")
            try:
                was_running = (await pve.vm_status(node, vmid)).status == "running"
                # Proxmox stops a running VM; cairn starts it again, so a rollback keeps the
                # power state (a snapshot with RAM resumes it in any case).
                task = await pve.rollback(node, vmid, name, start=was_running)
            except PveError as exc:
                raise StageFailed(f"rollback failed: {exc.text}") from None
            _log(st, task.log)
            _, state = await observe(svc, vmid, node)
            st.done(f"VM {vmid} is back at snapshot {name} ({state.value})")
            if state is State.RUNNING and facts is not None and facts.user:
                st.begin(stages.ROLLBACK_READY, "waiting for SSH")
                await wait_guest(svc, facts.ip, facts.user, facts.pinned_key())
                st.done("SSH is ready", vm_id=vmid, ip=facts.ip)
            return JobResult(True, state)
        st.begin(stages.DELETE_SNAPSHOT, f"deleting snapshot {name} of VM {vmid}")
        try:
            task = await pve.delete_snapshot(node, vmid, name)
        except PveError as exc:
            raise StageFailed(f"snapshot delete failed: {exc.text}") from None
        _log(st, task.log)
        st.done(f"snapshot {name} deleted")
        _, state = await observe(svc, vmid, node)
        return JobResult(True, state)
    except (StageFailed, PveError, OSError) as exc:
        text = exc.text if isinstance(exc, PveError) else str(exc)
        st.fail(text)
        _, state = await observe(svc, vmid, node)
        return JobResult(False, state, error=text)


def _log(st: Stages, lines: tuple[str, ...]) -> None:
    """Proxmox's task log lines (lvm's, the RAM saved ...) into the task's records."""
    for line in lines:
        if line.strip() and not line.startswith("TASK "):
            st.note(line.strip())


@attrs.frozen
class Taker:
    """Who asked for a snapshot cairn took, and when its task ran (seconds since the epoch)."""

    by: str | None
    began: float
    ended: float


def takers(records: list[Recorded]) -> dict[str, list[Taker]]:
    """Per snapshot name, the tasks of cairn's that took one of that name (a name may be
    taken again after a delete, by cairn or in Proxmox)."""
    started: dict[str, tuple[float, str | None]] = {}
    out: dict[str, list[Taker]] = {}
    for record in records:
        event = record.event
        if isinstance(event, TaskStarted):
            started[event.task] = (record.recorded_at, event.by)
        elif isinstance(event, SnapshotTaken) and event.task in started:
            began, by = started[event.task]
            out.setdefault(event.name, []).append(Taker(by, began, record.recorded_at))
    return out


def row(snap: Snapshot, taken: dict[str, list[Taker]]) -> dict[str, Any]:
    """One snapshot as `GET /api/vm/<id>/snapshots` lists it. `by` is who asked cairn for it;
    None for one taken in Proxmox (its time matches none of cairn's tasks of that name)."""
    by = None
    if snap.snaptime is not None:
        for t in taken.get(snap.name, []):
            if t.began - 1 <= snap.snaptime <= t.ended + 1:  # snaptime has whole seconds
                by = t.by
    created = (
        datetime.datetime.fromtimestamp(snap.snaptime, datetime.UTC).isoformat(timespec="seconds")
        if snap.snaptime
        else None
    )
    return {
        "name": snap.name,
        "description": snap.description,
        "created": created,
        "parent": snap.parent,
        "vmstate": snap.vmstate,
        "by": by,
    }
