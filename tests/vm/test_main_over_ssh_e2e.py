"""PVE_SSH_MAIN=1: cairn reaches the main node over SSH like the others (beside the cluster,
or under a hardened unit), so nothing runs locally: the simulator's qm is not even on PATH."""

from __future__ import annotations

import os
from typing import Any

import pytest

from actors.vm.settings import SettingsError, load_settings
from tests.vm.conftest import Service


async def test_an_install_and_a_stop_run_over_ssh_on_the_main_node(start_service: Any) -> None:
    service: Service = await start_service(PVE_SSH_MAIN="1", PATH=os.environ["PATH"])
    sse = await service.install()
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    vmid = sse.last["vm_id"]
    vm = service.sim.vm(vmid)
    assert vm is not None and vm.node == "pve1" and vm.status == "running"
    assert await service.post(f"/vm/{vmid}/stop") == (200, "ok")
    vm = service.sim.vm(vmid)
    assert vm is not None and vm.status == "stopped"


def test_the_main_node_needs_an_address_to_be_reached_over_ssh() -> None:
    env = {"GATEWAY": "10.0.0.1", "MAIN_NODE": "pve1", "ASSIGN_STORAGE": "local-lvm"}
    with pytest.raises(SettingsError, match=r"^PVE_SSH_MAIN=1 needs .* NODE_pve1$"):
        load_settings({**env, "PVE_SSH_MAIN": "1"})
    settings = load_settings({**env, "PVE_SSH_MAIN": "1", "NODE_pve1": "10.0.0.11"})
    assert settings.main_over_ssh and settings.nodes["pve1"] == "10.0.0.11"
    assert not load_settings(env).main_over_ssh
