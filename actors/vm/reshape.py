"""Changing what the caller shaped on an existing VM: its tags and notes (in any power
state) and its NIC's bridge, VLAN and MTU (while it is stopped). Each change first checks the
VM still carries cairn's mark; notes are rewritten above that mark, which stays."""

from __future__ import annotations

from actors.vm.jobs import (
    Job,
    JobResult,
    NotOurs,
    StageFailed,
    Stages,
    failed,
    observe,
)
from actors.vm.lifecycle import Command, State
from actors.vm.ownership import Claim, mark_line, marks, not_ours
from actors.vm.pve import PveError
from actors.vm.shape import net0_with, notes

COMMANDS = frozenset({Command.SET_TAGS, Command.SET_DESCRIPTION, Command.SET_NETWORK})
# Stage names of these tasks, as the other `set` tasks name theirs.
SET_TAGS = "set > tags"
SET_DESCRIPTION = "set > description"
SET_NETWORK = "set > network"


async def run(job: Job, command: Command, claim: Claim | None, state: State) -> JobResult:
    """One change; the VM is left in `state` (the one it had) whichever way it ends."""
    svc, vmid, node, facts, args = job.svc, job.vmid, job.node, job.facts, job.args
    st = Stages(job.report)
    pve = svc.pve
    step = {Command.SET_TAGS: SET_TAGS, Command.SET_DESCRIPTION: SET_DESCRIPTION}
    try:
        st.begin(step.get(command, SET_NETWORK), f"changing the {command.value[4:]} of VM {vmid}")
        try:
            config = await pve.vm_config(node, vmid)
        except PveError as exc:
            raise failed("qm config", exc) from None
        if why := not_ours(claim, vmid, node, config.options):
            raise NotOurs(why)
        if command is Command.SET_TAGS:
            os_tag = facts.os if facts else None
            tags = [t for t in (os_tag, *args["tags"]) if t]
            options = {"tags": ";".join(dict.fromkeys(tags))}
        elif command is Command.SET_DESCRIPTION:
            mark = "\n".join(mark_line(t) for t in sorted(marks(config.options)))
            options = {"description": notes(args["description"], mark)}
        else:
            options = {"net0": net0_with(config.get("net0"), args)}
        try:
            await pve.set_config(node, vmid, options)
        except PveError as exc:
            raise failed("qm set", exc) from None
        st.done(f"{command.value[4:]} changed")
        return JobResult(True, state)
    except (StageFailed, OSError) as exc:
        st.fail(str(exc))
        _, now = await observe(svc, vmid, node)
        return JobResult(False, now, error=str(exc))
