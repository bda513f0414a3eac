"""The transition table: allowed commands, working states, and the refusals' words."""

from __future__ import annotations

import pytest

from actors.vm.lifecycle import TABLE, WORKING, Command, Refusal, State, Transition, decide

C, S = Command, State


def test_the_spec_transitions() -> None:
    expect = {
        (S.ABSENT, C.INSTALL): (S.INSTALLING, S.RUNNING),
        (S.STOPPED, C.START): (S.STARTING, S.RUNNING),
        (S.RUNNING, C.STOP): (S.STOPPING, S.STOPPED),
        (S.RUNNING, C.SHUTDOWN): (S.SHUTTING_DOWN, S.STOPPED),
        (S.RUNNING, C.REBOOT): (S.REBOOTING, S.RUNNING),
        (S.STOPPED, C.DESTROY): (S.DESTROYING, S.ABSENT),
        (S.STOPPED, C.SET_CPU): (S.RESIZING, S.STOPPED),
        (S.STOPPED, C.SET_MEMORY): (S.RESIZING, S.STOPPED),
        (S.STOPPED, C.SET_DISK): (S.RESIZING, S.STOPPED),
        (S.STOPPED, C.SET_NODE): (S.MIGRATING, S.STOPPED),
    }
    for (state, command), (working, done) in expect.items():
        verdict = decide(state, command, 101)
        assert isinstance(verdict, Transition)
        assert (verdict.working, verdict.done) == (working, done)


def test_a_failed_install_leaves_nothing() -> None:
    assert TABLE[(S.ABSENT, C.INSTALL)].undone is S.ABSENT


@pytest.mark.parametrize("command", [c for c in Command if c is not C.INSTALL])
def test_unknown_vm_is_404(command: Command) -> None:
    assert decide(S.ABSENT, command, 101) == Refusal(404, "VM 101 not found")


@pytest.mark.parametrize("working", sorted(WORKING))
def test_busy_vm_refuses_everything(working: State) -> None:
    for command in Command:
        if command is C.INSTALL:
            continue
        busy = "VM 7 is busy: a task is running; follow it at /api/vm/7/task"
        assert decide(working, command, 7) == Refusal(409, busy)


def test_wrong_state_messages() -> None:
    assert decide(S.STOPPED, C.STOP, 1) == Refusal(409, "VM is not running")
    assert decide(S.STOPPED, C.REBOOT, 1) == Refusal(409, "VM is not running")
    assert decide(S.STOPPED, C.SHUTDOWN, 1) == Refusal(409, "VM is not running")
    for command in (C.START, C.DESTROY, C.SET_CPU, C.SET_MEMORY, C.SET_DISK, C.SET_NODE):
        assert decide(S.RUNNING, command, 1) == Refusal(409, "VM is running")
    assert decide(S.RUNNING, C.INSTALL, 1) == Refusal(409, "VM 1 already exists")


def test_a_failed_vm_can_only_be_destroyed() -> None:
    assert isinstance(decide(S.FAILED, C.DESTROY, 1), Transition)
    refusal = decide(S.FAILED, C.START, 1)
    assert isinstance(refusal, Refusal) and refusal.status == 409
