"""Events of the VM service.

Stream `vm:<vmid>`: one VM's life, over several lives if an id is reused (absent again after a
destroy). Its tasks (an install, a start, a migration ...) record their progress records there
too, so a client re-attaching to a task reads them back from the store.
Stream `vmalloc:cluster`: the allocator's reservations of VMIDs (and with them IPs).
"""

from __future__ import annotations

from events.model import Event, domain_event


@domain_event("vm.task_started")
class TaskStarted(Event):
    task: str
    command: str  # a lifecycle.Command value
    working: str  # the lifecycle state while the task runs
    # Who asked: a token's name, or "ip:<address>" when identities are off
    # (gateway/http/identity.py); None in events recorded before cairn knew (and for tasks cairn
    # starts by itself).
    by: str | None = None


@domain_event("vm.install_planned")
class InstallPlanned(Event):
    """What an install is building, known at its start: the list and the VM's detail show
    the name, address and user while it runs (sizes follow in `vm.installed`, once the
    defaults and caps are applied)."""

    task: str
    node: str
    name: str
    os: str
    version: str
    user: str
    ip: str


@domain_event("vm.progress")
class Progress(Event):
    """One SSE record of a task (spec: SSE event record)."""

    task: str
    step: str
    status: str  # processing | success | error
    message: str
    vm_id: int | None = None
    ip: str | None = None


@domain_event("vm.installed")
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
    # The guest's SSH host key as first seen ("" in events from before it was kept): later
    # waits for the guest's SSH accept only this key.
    host_key: str = ""
    # Whether the VM carries cairn's mark of this install (ownership.py); False in events from
    # before cairn marked its VMs, whose proof of ownership is this event alone.
    marked: bool = False


@domain_event("vm.task_ended")
class TaskEnded(Event):
    """A task is over; `state` is where the VM was left (a lifecycle.State value)."""

    task: str
    ok: bool
    state: str
    error: str | None = None


@domain_event("vm.reconfigured")
class Reconfigured(Event):
    task: str
    cpu: int | None = None
    ram: int | None = None
    disk_gb: int | None = None
    node: str | None = None


@domain_event("vm.snapshot_taken")
class SnapshotTaken(Event):
    """A snapshot cairn took (Proxmox keeps it; this says which task, and so who, asked)."""

    task: str
    name: str


@domain_event("vm.adopted")
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


@domain_event("vm.disowned")
class Disowned(Event):
    """The VM at this id is not the one cairn created (it lacks cairn's mark): from now on it
    is a VM cairn did not make, never destroyed or migrated by cairn."""

    task: str
    reason: str


@domain_event("vm.observed")
class Observed(Event):
    """The cluster reports a power state the VM reached on its own (a guest shut down)."""

    state: str


@domain_event("vmalloc.reserved")
class IdReserved(Event):
    vmid: int
    ip: str
    task: str


@domain_event("vmalloc.released")
class IdReleased(Event):
    vmid: int
    reason: str


@domain_event("vmalloc.refused")
class IdRefused(Event):
    task: str
    reason: str
