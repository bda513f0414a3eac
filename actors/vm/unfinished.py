"""An install's template build or clone cut short by a restart (kill -9, a crash), settled
when its task is recovered at the next start, before the install's own VM is looked for.

What cairn was doing comes from its own records of the task: the template it was building
("creating template N on NODE"), and whether it had begun cloning a ready template ("template
N (...) ready on NODE", then "creating VM" begun but not done) into the install's own id.
Each of these is a write-ahead record: the job waits until the event store has it before it
asks Proxmox for what it announces (jobs.Stages.noted), and stops if the store refuses it. So
a kill -9 at any point leaves the record of whatever Proxmox may have begun making; a build or
clone without its record was never asked for, and nothing is looked for beyond what the
records name.

What Proxmox does meanwhile (qemu-server's clone_vm): the clone runs as a task of the
template (`qmclone:<template id>`), on the template's node, and goes on when the client that
asked for it dies. It writes the new VM's config first as a temporary file holding only
`lock: clone`, then, after each disk, the whole config (cairn's mark with it) still locked;
the lock goes at the end. On a signal it handles (an SSH session hung up) it frees what it made
and removes the file; a worker killed outright (SIGKILL, a pvedaemon restart) leaves it locked.

So the settling waits for a clone task of that template to end, then:
- a finished clone carries the install's mark: the usual removal (jobs.remove_vm) takes it;
- a placeholder left locked by a clone whose worker died is removed (`--skiplock`: `qm unlock`
  and destroy in one) only when it is provably this install's clone: it carries this
  install's mark, or it is still the bare temporary file (`lock: clone`, nothing else) at the
  id cairn reserved for this install and was cloning into. Anything else is left to
  jobs.remove_vm, which leaves a VM without the mark untouched.
A template whose build stopped before `qm template` (it carries the install's mark and no
`template: 1`) is removed; a finished one is kept for later installs. A template the CLI driver
was copying to another node ("creating template N on NODE from template M", pernode.py) is a
clone of template M: the settling waits for M's clone task, then removes the copy if it carries
the install's mark or is still the bare temporary file, and it is not a template yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time

import attrs

from actors.vm import stages
from actors.vm.events import Progress
from actors.vm.jobs import CREATE_POLL, Services, find_config
from actors.vm.ownership import being_created, marks
from actors.vm.pve import PveError, VmConfig
from events.store import Recorded

log = logging.getLogger(__name__)

_READY = re.compile(r"^\[\+\] template (\d+) \(.*\) ready on (\S+) \(")
_BUILDING = re.compile(r"^\[\*\] creating template (\d+) on (\S+)(?: from template (\d+))? \(")
# What qmclone's temporary file holds (`digest` is what `qm config` adds to any config).
_BARE = frozenset({"lock", "digest"})


def building_note(vmid: int, node: str, source: int | None = None) -> str:
    """The note an install writes before it creates a template, or copies template `source`
    into a new one (read back by `read`)."""
    return f"creating template {vmid} on {node}" + (f" from template {source}" if source else "")


@attrs.frozen
class Building:
    """A template build not finished: its id and node, and the template it was a copy of."""

    vmid: int
    node: str
    source: int | None = None


@attrs.frozen
class Unfinished:
    building: Building | None = None
    cloning: tuple[int, str] | None = None  # (template id, its node) of a clone not finished


def read(records: list[Recorded], task: str) -> Unfinished:
    """What install `task` had begun and not finished, from its progress records."""
    building: Building | None = None
    ready: tuple[int, str] | None = None
    creating = created = False
    for r in records:
        e = r.event
        if not isinstance(e, Progress) or e.task != task:
            continue
        if e.step == stages.DOWNLOAD:
            if m := _BUILDING.match(e.message):
                building = Building(int(m[1]), m[2], int(m[3]) if m[3] else None)
            if e.status == "success" and (m := _READY.match(e.message)):
                ready = int(m[1]), m[2]
        elif e.step == stages.CREATE:
            creating = True
            created = created or e.status == "success"
    return Unfinished(
        building=building if ready is None else None,
        cloning=ready if creating and not created else None,
    )


async def settle(svc: Services, vmid: int, what: Unfinished, task: str) -> list[str]:
    """Settle what `what` names; what was done, as sentences for the task's last record."""
    said: list[str] = []
    if what.building is not None:
        said += await _build(svc, what.building, task)
    if what.cloning is not None:
        said += await _clone(svc, vmid, *what.cloning, task)
    return said


async def _wait(
    svc: Services, vmid: int, hint: str, lock: str, task_node: str, task_vmid: int
) -> tuple[str, VmConfig] | None:
    """VM `vmid`'s config once no task (on `task_node`, of VM `task_vmid`) works on it any
    more while it holds `lock`, or VM_COMMAND_TIMEOUT has passed."""
    found = await find_config(svc, vmid, hint)
    began = time.monotonic()
    idle = 0
    while found is not None and found[1].lock == lock:
        if time.monotonic() - began >= svc.settings.command_timeout:
            break
        try:
            running = bool(await svc.pve.active_tasks(task_node, task_vmid))
        except PveError:
            running = True  # cannot tell: the wait is bounded by the timeout alone
        idle = 0 if running else idle + 1
        if idle >= 2:  # twice, a poll apart: not the moment between the file and its task
            break
        await asyncio.sleep(CREATE_POLL)
        found = await find_config(svc, vmid, found[0])
    return found


async def _build(svc: Services, b: Building, task: str) -> list[str]:
    tid = b.vmid
    if b.source is None:
        found = await _wait(svc, tid, b.node, "create", b.node, tid)
    else:  # a copy is a clone: a task of its source template makes it
        found = await _wait(svc, tid, b.node, "clone", b.node, b.source)
    if found is None:
        return []
    where, config = found
    if config.get("template") in ("1", "true"):
        return []  # built: later installs clone it
    if b.source is None and config.lock == "clone":
        return []  # a copy at work whose source is not known: the next build removes it
    bare = b.source is not None and set(config.options) <= _BARE
    if not bare and (being_created(config.options) or task not in marks(config.options)):
        return []  # not provably this install's: left as Proxmox holds it
    try:
        await svc.pve.destroy(where, tid, cleanup=True)
    except PveError as exc:
        log.warning("template %d on %s, left half built: %s", tid, where, exc.text)
        return [f"template {tid} on node {where}, left half built, not removed: {exc.text}"]
    return [f"template {tid}, left half built, removed from node {where}"]


async def _clone(svc: Services, vmid: int, tid: int, tnode: str, task: str) -> list[str]:
    found = await _wait(svc, vmid, tnode, "clone", tnode, tid)
    if found is None or found[1].lock != "clone":
        return []  # none made, or finished (with its mark): jobs.remove_vm decides
    where, config = found
    ours = task in marks(config.options) or set(config.options) <= _BARE
    if not ours:
        return []
    log.warning("VM %d on %s: its clone of template %d died half-way", vmid, where, tid)
    with contextlib.suppress(PveError):
        await svc.pve.destroy(where, vmid, cleanup=True)
    if await find_config(svc, vmid, where) is None:
        return [f"VM {vmid} removed from node {where} (a clone of template {tid} left half made)"]
    return [
        f"VM {vmid} on node {where} is left locked by a clone of template {tid} that died "
        f"half-way (Proxmox lets only root unlock it): remove it with `qm unlock {vmid} && "
        f"qm destroy {vmid} --purge`"
    ]
