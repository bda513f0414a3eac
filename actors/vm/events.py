"""Events of the VM service.

Stream `vm:<vmid>`: one VM's life, over several lives if an id is reused (absent again after a
destroy). Its tasks (an install, a start, a migration ...) record their progress records there
too, so a client re-attaching to a task reads them back from the store.
Stream `vmalloc:cluster`: the allocator's reservations of VMIDs (and with them IPs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, dataclass_transform

from events.model import Event, domain_event

E = TypeVar("E", bound=type[Event])


@dataclass_transform(frozen_default=True)
def vm_event(type_name: str) -> Callable[[E], E]:
    """`domain_event`, typed so mypy sees the attrs fields (it cannot see through the
    foundation's decorator, which is not a dataclass_transform)."""
    return domain_event(type_name)


@vm_event("vm.task_started")
class TaskStarted(Event):
    task: str
    command: str  # a lifecycle.Command value
    working: str  # the lifecycle state while the task runs


@vm_event("vm.progress")
class Progress(Event):
    """One SSE record of a task (spec: SSE event record)."""

    task: str
    step: str
    status: str  # processing | success | error
    message: str
    vm_id: int | None = None
    ip: str | None = None


@vm_event("vm.installed")
class Installed(Event):
    task: str
    node: str
    name: str
    os: str
    version: str
    user: str
    ip: str
    cpu: int
    ram: int
    disk_gb: int


@vm_event("vm.task_ended")
class TaskEnded(Event):
    """A task is over; `state` is where the VM was left (a lifecycle.State value)."""

    task: str
    ok: bool
    state: str
    error: str | None = None


@vm_event("vm.reconfigured")
class Reconfigured(Event):
    task: str
    cpu: int | None = None
    ram: int | None = None
    disk_gb: int | None = None
    node: str | None = None


@vm_event("vm.adopted")
class Adopted(Event):
    """A VM found in the cluster that cairn did not install (or lost track of)."""

    node: str
    name: str
    os: str
    running: bool
    cpu: int
    ram: int
    disk_gb: int
    ip: str


@vm_event("vm.observed")
class Observed(Event):
    """The cluster reports a power state the VM reached on its own (a guest shut down)."""

    state: str


@vm_event("vmalloc.reserved")
class IdReserved(Event):
    vmid: int
    ip: str
    task: str


@vm_event("vmalloc.released")
class IdReleased(Event):
    vmid: int
    reason: str


@vm_event("vmalloc.refused")
class IdRefused(Event):
    task: str
    reason: str
