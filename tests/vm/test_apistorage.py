"""The storage object of Proxmox's API read into `StorageStatus`, for both adapters: the
`shared` flag as Proxmox sends it, and answers that no Proxmox sends refused by name."""

from __future__ import annotations

import json
from typing import Any

import pytest

from actors.vm import apistorage
from actors.vm.pve import StorageStatus, Unreadable

# `GET /nodes/pve2/storage/san/status` of an LVM group on a SAN LUN an admin marked shared,
# as pveproxy answers it and `pvesh get ... --output-format json` prints it (Perl's 0/1 flags).
SAN = (
    '{"active":1,"avail":1073741824000,"content":"images,rootdir","enabled":1,"shared":1,'
    '"total":1099511627776,"type":"lvm","used":25769803776}'
)


def test_a_status_as_proxmox_prints_it() -> None:
    assert apistorage.storage_status("san", json.loads(SAN)) == StorageStatus(
        name="san",
        type="lvm",
        enabled=True,
        active=True,
        content=("images", "rootdir"),
        total=1099511627776,
        used=25769803776,
        avail=1073741824000,
        shared=True,
    )


@pytest.mark.parametrize(
    ("value", "shared"),
    [(1, True), (0, False), (True, True), (False, False), ("1", True), ("0", False)],
)
def test_the_shared_flag_in_each_spelling_of_a_boolean(value: object, shared: bool) -> None:
    entry = {"type": "dir", "content": "images", "active": 1, "shared": value}
    assert apistorage.storage_status("d", entry).shared is shared


def test_a_missing_flag_is_not_set() -> None:
    """Proxmox's schema marks `shared` optional: left out, the storage is not shared (each node
    then gets its own template: more space, never a clone that cannot reach its volumes)."""
    found = apistorage.storage_status("d", {"type": "dir", "content": "images"})
    assert (found.shared, found.enabled, found.active) == (False, True, False)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"shared": "yes"}, "storage san: 'shared' is 'yes', not a boolean (0 or 1)"),
        ({"shared": 2}, "storage san: 'shared' is 2, not a boolean (0 or 1)"),
        ({"shared": 1.0}, "storage san: 'shared' is 1.0, not a boolean (0 or 1)"),
        ({"shared": [1]}, "storage san: 'shared' is [1], not a boolean (0 or 1)"),
        ({"active": "true"}, "storage san: 'active' is 'true', not a boolean (0 or 1)"),
        ({"enabled": -1}, "storage san: 'enabled' is -1, not a boolean (0 or 1)"),
        ({"total": "lots"}, "storage san: 'total' is 'lots', not a number of bytes"),
        ({"avail": True}, "storage san: 'avail' is True, not a number of bytes"),
    ],
)
def test_an_answer_no_proxmox_sends_is_unreadable(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(Unreadable) as caught:
        apistorage.storage_status("san", {"type": "lvm", "content": "images"} | entry)
    assert caught.value.text == message
