"""The storage object of Proxmox's API (`GET /nodes/{node}/storage` items and
`GET /nodes/{node}/storage/{storage}/status`), read into the port's `StorageStatus`.

pveproxy sends it and `pvesh get ... --output-format json` prints the very same object, so both
adapters read it here, once. Its flags are booleans that Perl writes as 0 or 1: an absent flag
takes the value Proxmox's schema implies (an optional flag left out is not set), while a value
that is no boolean at all (`"yes"`, 2) is an answer cairn cannot trust and raises `Unreadable`
naming the storage and the field, rather than being guessed either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actors.vm.pve import StorageStatus, Unreadable

# The types whose plugins pve-storage always marks shared (network storages). Only a reader
# that gets no `shared` flag at all (`pvesm status`) falls back on this.
NETWORK_TYPES = frozenset(
    {"nfs", "cifs", "rbd", "cephfs", "glusterfs", "iscsi", "iscsidirect", "zfs"}
)


def storage_status(name: str, entry: Mapping[str, Any]) -> StorageStatus:
    content = str(entry.get("content", "") or "")
    return StorageStatus(
        name=name,
        type=str(entry.get("type", "?")),
        enabled=_flag(name, entry, "enabled", default=True),
        active=_flag(name, entry, "active", default=False),
        content=tuple(c for c in content.split(",") if c),
        total=_bytes(name, entry, "total"),
        used=_bytes(name, entry, "used"),
        avail=_bytes(name, entry, "avail"),
        shared=_flag(name, entry, "shared", default=False),
    )


def _flag(name: str, entry: Mapping[str, Any], key: str, *, default: bool) -> bool:
    value = entry.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if (type(value) is int and value in (0, 1)) or value in ("0", "1"):
        return int(value) == 1
    raise Unreadable(f"storage {name}: '{key}' is {value!r}, not a boolean (0 or 1)")


def _bytes(name: str, entry: Mapping[str, Any], key: str) -> int:
    value = entry.get(key) or 0
    try:
        if isinstance(value, bool):
            raise TypeError(key)
        return int(value)
    except (TypeError, ValueError):
        raise Unreadable(f"storage {name}: '{key}' is {value!r}, not a number of bytes") from None
