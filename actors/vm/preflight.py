"""The checks an install with caller-shaped hardware passes against its target node before
anything is built: the NIC's bridge exists there (with an MTU at least the one asked), and
each extra disk's storage holds VM disks there. Proxmox itself would only find out at
`qm start` (a bridge) or half-way through the create (a storage), after cairn had built.
"""

from __future__ import annotations

from typing import Any

from actors.vm.jobs import Services
from actors.vm.shape import GuestShape, bridge_of, bridge_refusal


async def install_refusal(svc: Services, node: str, shape: GuestShape) -> str | None:
    """Why this install cannot be built on `node` (a 400's message), or None. PveError when
    Proxmox does not answer."""
    if shape.network:
        bridge = shape.bridge or svc.settings.bridge
        bridges = await svc.pve.bridges(node)
        if refusal := bridge_refusal(node, bridge, shape.mtu, bridges):
            return refusal
    if shape.disks:
        usable = [s.name for s in await svc.pve.storages(node, "images") if s.usable]
        for i, disk in enumerate(shape.disks):
            if disk.storage not in usable:
                return (
                    f"disks[{i}].storage: node {node} has no active storage {disk.storage!r} "
                    f"for VM disks; its storages for VM disks: {', '.join(usable) or 'none'}"
                )
    return None


async def network_refusal(
    svc: Services, node: str, vmid: int, change: dict[str, Any]
) -> str | None:
    """Why the NIC of VM `vmid` cannot take `change` (`set/network`) on `node`, or None: the
    bridge it would be on must exist there, with an MTU at least the NIC's."""
    bridge = change.get("bridge")
    if bridge is None:
        bridge = bridge_of((await svc.pve.vm_config(node, vmid)).get("net0")) or svc.settings.bridge
    return bridge_refusal(node, bridge, change.get("mtu"), await svc.pve.bridges(node))
