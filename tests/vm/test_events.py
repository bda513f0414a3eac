"""The VM's stored events stay readable as they grow fields."""

from __future__ import annotations

import json

from actors.vm.events import Installed
from events.codec import decode

STORED_BEFORE_HOST_KEYS = {
    "task": "t1", "node": "pve1", "name": "vm-120", "os": "debian", "version": "12",
    "user": "debian", "ip": "10.0.0.120", "cpu": 2, "ram": 2048, "disk_gb": 16,
}  # fmt: skip


def test_an_installed_event_stored_before_host_keys_were_kept_still_decodes() -> None:
    event = decode("vm.installed", json.dumps(STORED_BEFORE_HOST_KEYS))
    assert isinstance(event, Installed)
    assert (event.ip, event.disk_gb, event.host_key) == ("10.0.0.120", 16, "")
