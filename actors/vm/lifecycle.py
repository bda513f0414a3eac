"""The VM lifecycle as data: which command is allowed in which state, and where it leads.

A command is accepted only from a settled state; it moves the VM into a working state while its
job runs, and the job's outcome moves it on. Anything else is answered at once with the spec's
status and message, so a client can tell them apart: 404 for an absent VM, 409 for a busy
one or a wrong state.
"""

from __future__ import annotations

import enum

import attrs


class State(enum.StrEnum):
    ABSENT = "absent"
    INSTALLING = "installing"
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    SHUTTING_DOWN = "shutting down"
    REBOOTING = "rebooting"
    RESIZING = "resizing"
    MIGRATING = "migrating"
    DESTROYING = "destroying"
    SNAPSHOTTING = "snapshotting"  # taking or deleting a snapshot
    ROLLING_BACK = "rolling back"
    CONFIGURING = "configuring"  # changing tags, notes or the NIC
    CHANGING = "changing"  # a safe change: snapshot, steps, verify, keep or roll back
    FAILED = "failed"


class Command(enum.StrEnum):
    INSTALL = "install"
    START = "start"
    STOP = "stop"
    SHUTDOWN = "shutdown"
    REBOOT = "reboot"
    DESTROY = "destroy"
    SET_CPU = "set/cpu"
    SET_MEMORY = "set/memory"
    SET_DISK = "set/disk"
    SET_NODE = "set/node"
    SNAPSHOT = "snapshot"
    ROLLBACK = "snapshot/rollback"
    DELETE_SNAPSHOT = "snapshot/delete"
    SET_TAGS = "set/tags"
    SET_DESCRIPTION = "set/description"
    SET_NETWORK = "set/network"
    CHANGE = "change"


@attrs.frozen
class Transition:
    working: State  # while the job runs
    done: State  # when it succeeds
    undone: State  # when it fails: where the VM is left (cleanup included)


S = State
C = Command

# (from state, command) -> transition. Read a row as: "in <from>, <command> works as <working>,
# then ends in <done>, or <undone> if it failed".
TABLE: dict[tuple[State, Command], Transition] = {
    (S.ABSENT, C.INSTALL): Transition(S.INSTALLING, S.RUNNING, S.ABSENT),
    (S.STOPPED, C.START): Transition(S.STARTING, S.RUNNING, S.STOPPED),
    (S.RUNNING, C.STOP): Transition(S.STOPPING, S.STOPPED, S.RUNNING),
    (S.RUNNING, C.SHUTDOWN): Transition(S.SHUTTING_DOWN, S.STOPPED, S.RUNNING),
    (S.RUNNING, C.REBOOT): Transition(S.REBOOTING, S.RUNNING, S.RUNNING),
    (S.STOPPED, C.DESTROY): Transition(S.DESTROYING, S.ABSENT, S.STOPPED),
    (S.FAILED, C.DESTROY): Transition(S.DESTROYING, S.ABSENT, S.FAILED),
    (S.STOPPED, C.SET_CPU): Transition(S.RESIZING, S.STOPPED, S.STOPPED),
    (S.STOPPED, C.SET_MEMORY): Transition(S.RESIZING, S.STOPPED, S.STOPPED),
    (S.STOPPED, C.SET_DISK): Transition(S.RESIZING, S.STOPPED, S.STOPPED),
    (S.STOPPED, C.SET_NODE): Transition(S.MIGRATING, S.STOPPED, S.STOPPED),
    # Snapshots work on a running or a stopped VM and leave it as it was (a rollback to a
    # snapshot with RAM, or of a running VM, leaves it running).
    **{
        (state, command): Transition(working, state, state)
        for state in (S.RUNNING, S.STOPPED)
        for command, working in (
            (C.SNAPSHOT, S.SNAPSHOTTING),
            (C.DELETE_SNAPSHOT, S.SNAPSHOTTING),
            (C.ROLLBACK, S.ROLLING_BACK),
        )
    },
    # Tags and notes change in either power state; the NIC only while the VM is off.
    **{
        (state, command): Transition(S.CONFIGURING, state, state)
        for state in (S.RUNNING, S.STOPPED)
        for command in (C.SET_TAGS, C.SET_DESCRIPTION)
    },
    (S.STOPPED, C.SET_NETWORK): Transition(S.CONFIGURING, S.STOPPED, S.STOPPED),
    # A change works on the running guest (its steps and checks go over SSH) and leaves it
    # running, kept or rolled back.
    (S.RUNNING, C.CHANGE): Transition(S.CHANGING, S.RUNNING, S.RUNNING),
}

WORKING = frozenset(t.working for t in TABLE.values())
# The power state the status endpoint reports for each state.
POWER: dict[State, str] = {
    S.ABSENT: "stopped",
    S.INSTALLING: "stopped",
    S.STOPPED: "stopped",
    S.STARTING: "stopped",
    S.RUNNING: "running",
    S.STOPPING: "running",
    S.SHUTTING_DOWN: "running",
    S.REBOOTING: "running",
    S.RESIZING: "stopped",
    S.MIGRATING: "stopped",
    S.DESTROYING: "stopped",
    S.SNAPSHOTTING: "stopped",  # VmInfo.power says the power it had before
    S.ROLLING_BACK: "stopped",
    S.CONFIGURING: "stopped",
    S.CHANGING: "running",
    S.FAILED: "stopped",
}
# Working states that keep the power the VM had when its task began.
KEEPS_POWER = frozenset({S.SNAPSHOTTING, S.ROLLING_BACK, S.CONFIGURING})
NEEDS_RUNNING = frozenset({C.STOP, C.SHUTDOWN, C.REBOOT, C.CHANGE})


@attrs.frozen
class Refusal:
    status: int
    message: str


def decide(state: State, command: Command, vmid: int) -> Transition | Refusal:
    """The transition for `command` in `state`, or why it is refused."""
    transition = TABLE.get((state, command))
    if transition is not None:
        return transition
    if command is C.INSTALL:
        return Refusal(409, f"VM {vmid} already exists")
    if state is S.ABSENT:
        return Refusal(404, f"VM {vmid} not found")
    if state in WORKING:
        return Refusal(
            409, f"VM {vmid} is busy: a task is running; follow it at /api/vm/{vmid}/task"
        )
    if state is S.FAILED:
        return Refusal(409, f"VM {vmid} is in a failed state; destroy it")
    if command in NEEDS_RUNNING:
        return Refusal(409, "VM is not running")
    return Refusal(409, "VM is running")
