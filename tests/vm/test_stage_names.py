"""The install's stage names are written once, in actors/vm/stages.py, in the contract's order;
the copies that cannot import it (the console's page, the OpenAPI document's example) must
say the same."""

from __future__ import annotations

import re
from pathlib import Path

from actors.vm import stages
from gateway.apps import vm as gateway_vm

ROOT = Path(__file__).resolve().parents[2]
SPEC_ORDER = (
    "preparation > checking VMID",
    "preparation > assigning IP",
    "preparation > validating CPU and RAM",
    "preparation > validating disk size",
    "preparation > setting default config values",
    "preparation > checking storage pool",
    "OS preparation > getting OS image",
    "OS preparation > validating OS image URL",
    "OS preparation > downloading OS image",
    "SSH preparation > checking SSH key",
    "VM creation > creating VM",
    "VM creation > importing disk image",
    "VM initialization > initializing configuration",
    "VM initialization > migrating VM",
    "VM initialization > waiting for ready",
    "VM initialization > SSH initialization",
    "VM initialization > rebooting VM",
    "VM initialization > finalizing",
)


def test_the_install_stages_are_the_contracts_table_in_its_order() -> None:
    assert stages.INSTALL == SPEC_ORDER
    assert gateway_vm.STEP_CHECK_ID is stages.CHECK_ID


def test_the_consoles_stage_list_is_the_same() -> None:
    page = (ROOT / "gateway" / "console" / "static" / "pages" / "install.js").read_text()
    block = re.search(r"INSTALL_STAGES = \[(.*?)\];", page, re.S)
    assert block is not None
    assert tuple(re.findall(r'"([^"]+)"', block.group(1))) == stages.INSTALL
