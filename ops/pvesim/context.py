"""What a fake command needs from its surroundings: state, node, streams, delays, failures."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from .args import CliError
from .state import Store, Txn

# Realistic durations in seconds at delay_scale 1 (as a small real cluster takes), one entry
# per kind of work.
DURATIONS: dict[str, float] = {
    "startup": 0.5,  # Perl start-up of any qm/pvesh/pvesm call
    "create": 2.0,
    "import_per_gib": 4.0,
    "set": 0.8,
    "resize": 1.5,
    "start": 2.0,
    "boot": 30.0,  # first boot to SSH reachable
    "pxe_timeout": 60.0,
    "stop": 1.5,
    "shutdown": 8.0,
    "restart": 2.0,  # qmeventd noticing the power-off and starting again
    "destroy": 2.0,
    "migrate_base": 2.0,
    "migrate_per_gib": 9.5,  # dd over 1 GbE, ~110 MB/s
    "query": 0.2,
    "snapshot": 1.0,  # one volume snapshot taken, rolled back or removed
    # A template conversion renames each disk and marks it read-only (lvrename + lvchange -p r,
    # or zfs snapshot @__base__ + readonly): metadata only, like a snapshot.
    "template": 1.0,
    # A linked clone is one thin snapshot or qcow2 overlay, whatever the disk's size (pve-docs
    # qm.adoc: "nearly instantaneous"); a full clone copies at import_per_gib per GiB.
    "linked_clone": 0.5,
    "timeout": 1.0,  # one second of a command's own --timeout (factor: the seconds)
}

# The default stderr text and exit status of an injected failure, per command (real strings).
FAILURE_DEFAULTS: dict[str, tuple[str, int]] = {
    "qm create": (
        "command '/sbin/lvcreate -aly -V 4194304k --name vm-{vmid}-cloudinit "
        "--thinpool pve/data' failed: exit code 5",
        255,
    ),
    "qm importdisk": (
        "copy failed: command '/usr/bin/qemu-img convert -p -n -f qcow2 -O raw {source} "
        "zeroinit:/dev/pve/vm-{vmid}-disk-0' failed: exit code 1",
        255,
    ),
    "qm set": ("can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout", 255),
    "qm resize": (
        "command '/sbin/lvextend -L 16777216k pve/vm-{vmid}-disk-0' failed: exit code 5",
        0,
    ),
    "qm start": ("start failed: QEMU exited with code 1", 255),
    "qm stop": ("can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout", 255),
    # A guest ignoring the power-down request is "guest powerdown", with the real wait.
    "qm shutdown": ("can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout", 255),
    "qm reboot": ("can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout", 255),
    "qm destroy": ("can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout", 255),
    "qm clone": (
        "clone failed: command '/usr/bin/qemu-img convert -p -n -f raw -O raw "
        "/dev/pve/base-{vmid}-disk-0 zeroinit:/dev/pve/vm-{vmid}-disk-0' failed: exit code 1",
        255,
    ),
    "qm template": ("can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout", 255),
    "qm migrate": (
        "command 'dd of=/dev/pve/vm-{vmid}-disk-0 conv=sparse bs=64k' failed: exit code 1",
        255,
    ),
    "qm status": ("VM {vmid} qmp command 'query-status' failed - got timeout", 255),
    "qm config": ("can't lock file '/var/lock/qemu-server/lock-{vmid}.conf' - got timeout", 255),
    "qm list": ("ipcc_send_rec[1] failed: Connection refused", 255),
    "pvesh get": ("ipcc_send_rec[1] failed: Connection refused", 255),
    "pvesm status": ("ipcc_send_rec[1] failed: Connection refused", 255),
    "guest exec": ("E: Unable to locate package qemu-guest-agent", 100),
}


class Failure(NamedTuple):
    message: str
    exit_code: int


def take_injection(txn: Txn, command: str, node: str, vmid: int | None) -> dict[str, Any] | None:
    """Consume the first injected event that matches (a failure, an ignored ACPI request, a
    race); None if there is none, or if a matching one still lets this run pass (`after`)."""
    failures = txn.failures()
    for i, f in enumerate(failures):
        if f["command"] != command:
            continue
        if f.get("vmid") is not None and f["vmid"] != vmid:
            continue
        if f.get("node") is not None and f["node"] != node:
            continue
        if f.get("after", 0) > 0:  # this run still passes
            f["after"] -= 1
            txn.save_failures(failures)
            return None
        if f["times"] <= 1:
            failures.pop(i)
        else:
            f["times"] -= 1
        txn.save_failures(failures)
        return dict(f)
    return None


def take_failure(
    txn: Txn, command: str, node: str, vmid: int | None, fields: dict[str, Any] | None = None
) -> Failure | None:
    """Consume the first injected failure that matches; None if there is none."""
    f = take_injection(txn, command, node, vmid)
    if f is not None:
        default_text, default_code = FAILURE_DEFAULTS.get(command, ("command failed", 255))
        text = f.get("message") or default_text
        values = {"vmid": vmid if vmid is not None else 0, "node": node, "source": ""}
        values.update(fields or {})
        with contextlib.suppress(KeyError, IndexError, ValueError):
            text = text.format(**values)
        code = f.get("exit_code")
        return Failure(text, default_code if code is None else int(code))
    return None


def raise_injected(
    txn: Txn, command: str, node: str, vmid: int | None, fields: dict[str, Any] | None = None
) -> None:
    """Fail the command the way an injected failure says, if one matches; most commands fail
    at this one point with its text and exit status, so the check is written once."""
    failure = take_failure(txn, command, node, vmid, fields)
    if failure:
        raise CliError(failure.message, failure.exit_code)


def _default_notify(root: Path, message: str) -> bool:
    """Tell a running SimCluster about a power change and wait until it has acted.

    Returns False when no cluster listens (the command then does the cluster's part itself).
    """
    try:
        settings = json.loads((root / "cluster.json").read_text())["settings"]
    except (OSError, ValueError, KeyError):
        return False
    path = settings.get("control_socket")
    if not path or not os.path.exists(path):
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(60)
            sock.connect(path)
            sock.sendall(message.encode() + b"\n")
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = sock.recv(64)
                if not chunk:
                    break
                reply += chunk
        return reply.strip() == b"ok"
    except OSError:
        return False


class Ctx:
    """Streams, clock and delays of one command run (plain class: keeps command start-up fast)."""

    def __init__(
        self,
        store: Store,
        node: str,
        out: Callable[[str], None],
        err: Callable[[str], None],
        read_stdin: Callable[[], str],
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], float] = time.time,
        scale: float | None = None,
    ) -> None:
        self.store = store
        self.node = node
        self.out = out
        self.err = err
        self.read_stdin = read_stdin
        self.sleep = sleep
        self.now = now
        self.scale = scale

    def delay(self, kind: str, factor: float = 1.0) -> None:
        if self.scale is None:
            self.scale = self.store.delay_scale()
        seconds = DURATIONS[kind] * factor * self.scale
        if seconds > 0:
            self.sleep(seconds)

    def notify(self, message: str) -> bool:
        return _default_notify(self.store.root, message)


def stdio_ctx(store: Store, node: str) -> Ctx:
    def out(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def err(text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()

    return Ctx(store, node, out, err, sys.stdin.read)
