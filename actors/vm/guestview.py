"""What a VM's page shows of its shape, read from its Proxmox config: the notes (without
cairn's mark and the line naming a linked clone's template), the NIC, the DNS settings and
the disks."""

from __future__ import annotations

import re
from typing import Any

from actors.vm.ownership import CLONE_LINE, MARK_PREFIX
from actors.vm.pve import VmConfig

_DISK = re.compile(r"^(scsi|virtio|sata|ide)\d+$")


def tags_of(text: str | None) -> list[str]:
    """Proxmox's tags string (`;`, `,` or space separated) as a list."""
    return [t for t in re.split(r"[;, ]+", text or "") if t]


def guest_view(config: VmConfig) -> dict[str, Any]:
    notes = "\n".join(
        line
        for line in config.get("description").split("\n")
        if not line.strip().startswith((MARK_PREFIX, CLONE_LINE))
    ).strip()
    nic = dict(p.partition("=")[::2] for p in config.get("net0").split(",") if p)
    network = {
        "bridge": nic.get("bridge"),
        "vlan": int(nic["tag"]) if nic.get("tag", "").isdigit() else None,
        "mtu": int(nic["mtu"]) if nic.get("mtu", "").isdigit() else None,
    }
    disks = []
    for key in sorted(config.options, key=lambda k: (k[:4], int(re.sub(r"\D", "", k) or 0))):
        drive = config.options[key]
        if not _DISK.match(key) or "media=cdrom" in drive or "cloudinit" in drive:
            continue
        props = dict(p.partition("=")[::2] for p in drive.split(",")[1:])
        disks.append({"slot": key, "volume": drive.split(",")[0], "size": props.get("size")})
    return {
        "tags": tags_of(config.get("tags")),
        "notes": notes,
        "network": network,
        "nameserver": config.get("nameserver") or None,
        "searchdomain": config.get("searchdomain") or None,
        "disks": disks,
    }
