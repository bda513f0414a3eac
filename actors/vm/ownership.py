"""Which VMs are cairn's: the mark cairn writes at `qm create`, and the test every destructive
step passes before it touches a VM.

A VM id is only a number: between cairn's reservation and its `qm create`, anyone (a GUI
"Create VM", another tool asking `/cluster/nextid`) may take it, and a VM cairn once installed
may since have been replaced. So cairn never trusts the id alone. Its `qm create` writes a
description line naming the install task; clean-up, destroy, the stop during clean-up and every
migration first read the VM's config on its node and look for that line. A VM without it is
reported and left alone.

Proxmox's create is two writes: a config holding only `lock: create` at once, the full config
(the mark with it) when the create's work is done. A VM seen in between carries no mark yet
(`being_created`): cairn waits for its create to end before it decides (a kill -9 of cairn
during `qm create` leaves the command running to its end, and the restart reads the config),
as long as Proxmox lists a task still working on it; a create whose worker died (killed with
the SSH session or the daemon that ran it) never ends, and is reported (`abandoned_create`).

VMs installed before cairn marked its VMs carry no line: their `vm.installed` event (stored
without `marked`) is the proof, as long as the VM carries no other install's mark either.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote

import attrs

MARK_PREFIX = "created by cairn, install task "
# The line a linked clone's description carries: which template its disk depends on.
CLONE_LINE = "cairn linked clone of template "
_MARK = re.compile(r"^created by cairn, install task ([0-9A-Za-z_-]+)\s*$")


def mark_line(task: str) -> str:
    """The description line `qm create` gives a VM of install `task`."""
    return MARK_PREFIX + task


def marks(config: Mapping[str, str]) -> set[str]:
    """The install tasks whose mark a VM's config (`qm config`, parsed) carries.

    `qm config` prints the description with `:`, newlines and other bytes percent-encoded
    (PVE::Tools::encode_text), so it is decoded first; a user's notes around the line are fine.
    """
    text = unquote(config.get("description", ""))
    return {m.group(1) for line in text.splitlines() if (m := _MARK.match(line.strip()))}


@attrs.frozen
class Claim:
    """Why cairn holds a VM for its own: the install that created it.

    `task` is that install's task id, whose mark the VM must carry; None for a VM installed
    before cairn marked its VMs (its own event log is the proof).
    """

    task: str | None


def not_ours(claim: Claim | None, vmid: int, node: str, config: Mapping[str, str]) -> str | None:
    """None if the VM whose config this is may be touched under `claim`; else why not, as a
    sentence for the user."""
    found = marks(config)
    name = config.get("name") or str(vmid)
    if claim is None:
        return (
            f"VM {vmid} ({name}) on node {node} was not created by cairn; cairn leaves it untouched"
        )
    if claim.task is None:
        if not found:
            return None
        return (
            f"VM {vmid} ({name}) on node {node} carries the mark of another cairn install "
            f"({', '.join(sorted(found))}), not of the one that made VM {vmid}; left untouched"
        )
    if claim.task in found:
        return None
    return (
        f"VM {vmid} ({name}) on node {node} does not carry cairn's mark "
        f"('{mark_line(claim.task)}' in its description): it is not the VM cairn created, "
        "so cairn leaves it untouched"
    )


def being_created(config: Mapping[str, str]) -> bool:
    """The config is Proxmox's placeholder of a create still at work (`lock: create`, no mark
    yet): whose VM it is shows only once the create ends."""
    return config.get("lock") == "create" and not marks(config)


def unfinished_create(vmid: int, node: str, waited: float) -> str:
    """Why cairn leaves a VM whose create never ended, as a sentence for the user."""
    return (
        f"VM {vmid} on node {node} is still locked by a create that has not ended after "
        f"{waited:.0f} s ('lock: create', no description yet): cairn cannot tell whose it is "
        f"and leaves it untouched; if it is this install's, remove it with `qm unlock {vmid} "
        f"&& qm destroy {vmid} --purge`"
    )


def abandoned_create(vmid: int, node: str) -> str:
    """Why cairn leaves a VM whose create died half-way (no task runs for it any more), as a
    sentence for the user."""
    return (
        f"VM {vmid} on node {node} is locked by a create that no longer runs ('lock: create', "
        "no description: its worker died half-way, with the process or connection that ran "
        "it): cairn cannot tell whose it is and leaves it untouched; if it is this install's, "
        f"remove it with `qm unlock {vmid} && qm destroy {vmid} --purge`"
    )
