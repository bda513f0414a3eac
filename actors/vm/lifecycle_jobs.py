"""The job of every lifecycle command but install: start, stop, shutdown, reboot, destroy,
set/cpu, set/memory, set/disk and set/node (install.py has the install's).

Like every job it reports each step through `report`, returns a JobResult and never touches
actor state. Destroy asks templates.py whether the VM was a linked clone of a template that
its last clone now frees.
"""

from __future__ import annotations

from typing import Any

from actors.vm import stages, templates
from actors.vm.guest import GuestError
from actors.vm.jobs import (
    Facts,
    JobResult,
    NotOurs,
    Report,
    Services,
    StageFailed,
    Stages,
    ensure_ours,
    failed,
    observe,
    powerdown_timed_out,
    wait_guest,
)
from actors.vm.lifecycle import State
from actors.vm.ownership import Claim
from actors.vm.pve import PveError
from actors.vm.requests import memory_balloon


async def power(
    svc: Services,
    command: str,
    vmid: int,
    node: str,
    facts: Facts | None,
    report: Report,
    args: dict[str, Any],
    claim: Claim | None = None,
) -> JobResult:
    """Every lifecycle command but install. Streams report steps; plain ones report too
    (the records are stored either way, so a later reader sees what happened). Destroy and
    migrate first check that the VM carries cairn's mark (`claim`)."""
    st = Stages(report)
    pve = svc.pve
    try:
        if command == "start":
            st.begin(stages.START, f"starting VM {vmid}")
            try:
                await pve.start(node, vmid)
            except PveError as exc:
                raise failed("qm start", exc) from None
            st.done("VM started")
            await _ready_step(svc, st, facts, stages.START_READY, vmid)
            return JobResult(True, State.RUNNING)
        if command == "reboot":
            st.begin(stages.REBOOT_VM, f"rebooting VM {vmid}")
            try:
                await pve.reboot(node, vmid)
            except PveError as exc:
                if powerdown_timed_out(exc):
                    raise StageFailed(
                        f"qm reboot failed: {exc.text}: the guest did not react to "
                        "the reboot request and is still running; stop and start it to force one"
                    ) from None
                raise failed("qm reboot", exc) from None
            st.done("VM rebooting")
            await _ready_step(svc, st, facts, stages.REBOOT_READY, vmid)
            return JobResult(True, State.RUNNING)
        if command in ("stop", "shutdown"):
            st.begin(stages.power_off(command), f"{command} VM {vmid}")
            try:
                await (pve.stop(node, vmid) if command == "stop" else pve.shutdown(node, vmid))
            except PveError as exc:
                if powerdown_timed_out(exc):
                    raise StageFailed(
                        f"qm {command} failed: {exc.text}: the guest did not power off "
                        "and is still running; use stop to force it off"
                    ) from None
                raise failed(f"qm {command}", exc) from None
            st.done("VM stopped")
            return JobResult(True, State.STOPPED)
        if command == "destroy":
            st.begin(stages.DESTROY, f"destroying VM {vmid}")
            await ensure_ours(svc, vmid, node, claim)
            parent = await templates.parent_of(svc, node, vmid)
            try:
                await pve.destroy(node, vmid)
            except PveError as exc:
                raise failed("qm destroy", exc) from None
            if parent is not None and (said := await templates.drop_if_unused(svc, parent)):
                st.note(said)
            st.done("VM destroyed")
            return JobResult(True, State.ABSENT)
        if command == "set/cpu":
            st.begin(stages.SET_CPU, f"setting {args['cpu']} vCPU")
            try:
                await pve.set_config(node, vmid, {"cores": str(args["cpu"])})
            except PveError as exc:
                raise failed("qm set", exc) from None
            st.done("CPU changed")
            return JobResult(True, State.STOPPED, changes={"cpu": args["cpu"]})
        if command == "set/memory":
            ram = args["memory"]
            st.begin(stages.SET_MEMORY, f"setting {ram} MB RAM")
            try:
                shown = await pve.vm_config(node, vmid)
            except PveError as exc:
                raise failed("qm config", exc) from None
            balloon = memory_balloon(ram, svc.settings, shown.options)
            if balloon is not None and balloon == ram:
                st.note(f"the balloon minimum comes down to {ram} MB with the memory")
            options = {"memory": str(ram)}
            if balloon is not None:
                options["balloon"] = str(balloon)
            try:
                await pve.set_config(node, vmid, options)
            except PveError as exc:
                raise failed("qm set", exc) from None
            st.done("memory changed")
            return JobResult(True, State.STOPPED, changes={"ram": ram})
        if command == "set/disk":
            grow = args["grow_gb"]
            # Omitted: the boot disk, in the words the spec's stage has always used.
            drive = args.get("drive")
            which = f"disk {drive}" if drive else "the disk"
            st.begin(stages.SET_DISK, f"growing {which} by {grow}G")
            try:
                # Proxmox's own lines (lvextend's, qemu-img's ...) go into the task's records.
                await pve.resize(node, vmid, drive or "scsi0", f"+{grow}G", on_line=st.note)
            except PveError as exc:
                raise StageFailed(f"disk resize failed: {exc.text}") from None
            st.done(f"{which} grown".removeprefix("the "))
            if drive not in (None, "scsi0"):
                return JobResult(True, State.STOPPED)  # the VM's `disk` is its boot disk's size
            current = facts.disk_gb if facts else 0
            return JobResult(True, State.STOPPED, changes={"disk_gb": current + grow})
        if command == "set/node":
            target = args["node"]
            st.begin(stages.MIGRATE_VM, f"migrating VM {vmid} to node {target}")
            await ensure_ours(svc, vmid, node, claim)
            try:
                await pve.migrate(node, vmid, target, on_line=st.note)
            except PveError as exc:
                raise failed("qm migrate", exc) from None
            extra = {"vm_id": vmid, "ip": facts.ip} if facts else {}
            st.done(f"VM migrated to node {target}", **extra)
            return JobResult(True, State.STOPPED, changes={"node": target})
        raise StageFailed(f"unknown command {command}")
    except (StageFailed, GuestError, OSError) as exc:
        st.fail(str(exc))
        # Where the VM really is now decides the state it is left in.
        _, state = await observe(svc, vmid, node)
        disowned = str(exc) if isinstance(exc, NotOurs) and claim is not None else None
        return JobResult(False, state, error=str(exc), disowned=disowned)


async def _ready_step(svc: Services, st: Stages, facts: Facts | None, step: str, vmid: int) -> None:
    st.begin(step, "waiting for SSH")
    if facts is None or not facts.user:
        st.done("VM running (no SSH access known for a VM cairn did not install)", vm_id=vmid)
        return
    await wait_guest(svc, facts.ip, facts.user, facts.pinned_key())
    st.done("SSH is ready", vm_id=vmid, ip=facts.ip)
