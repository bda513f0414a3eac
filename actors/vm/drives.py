"""Which disk a resize grows: the boot disk `scsi0` unless the caller names another, such as
the extra disks an install's `disks` attach as scsi1, scsi2 ... The name's form is checked
with the body; that the VM has the disk, and the disk's own size against VM_MAX_DISK, are
checked against its Proxmox config before the task starts."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from actors.vm.guestview import guest_view
from actors.vm.requests import BadRequest

if TYPE_CHECKING:  # the HTTP side parses drives without the jobs' machinery
    from actors.vm.jobs import Services

BOOT = "scsi0"
# Proxmox's disk buses and their highest index (scsi30, virtio15, sata5, ide3): a VM made
# outside cairn may have its disks on any of them.
_DRIVE = re.compile(r"^(scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|sata[0-5]|ide[0-3])$")
_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMGT]?)$")
_PER_GB = {"K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0, "T": 1024.0, "": 1 / 1024**3}


def parse_drive(value: Any) -> str:
    if not isinstance(value, str) or not _DRIVE.match(value):
        shown = repr(value[:20]) if isinstance(value, str) else type(value).__name__
        raise BadRequest(f"drive: must name a disk like scsi0 or scsi1, not {shown}")
    return value


def gigabytes(size: str | None) -> int | None:
    """Proxmox's `size=` of a drive (`32G`, `4096M`, `1T`) in whole GB, rounded up."""
    found = _SIZE.match(size or "")
    if not found:
        return None
    gb = float(found.group(1)) * _PER_GB[found.group(2)]
    return int(gb) if gb == int(gb) else int(gb) + 1


async def resize_refusal(
    svc: Services, node: str, vmid: int, drive: str, grow_gb: int
) -> str | None:
    """Why disk `drive` of VM `vmid` cannot grow by `grow_gb` (a 400's message), or None.
    PveError when Proxmox does not answer."""
    disks = {d["slot"]: d["size"] for d in guest_view(await svc.pve.vm_config(node, vmid))["disks"]}
    if drive not in disks:
        return f"drive: VM {vmid} has no disk {drive}; its disks: {', '.join(disks) or 'none'}"
    limit = svc.settings.max_disk
    current = gigabytes(disks[drive])
    # The boot disk's limit is checked by the VM's actor, against the size it knows.
    if drive != BOOT and limit is not None and current is not None and current + grow_gb > limit:
        return f"disk: {drive}: {current}G + {grow_gb}G exceeds VM_MAX_DISK ({limit}G)"
    return None
