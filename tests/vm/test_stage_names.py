"""The install's stage names are written once, in actors/vm/stages.py, in the contract's order;
the console's page imports them from a module the server writes from that list."""

from __future__ import annotations

import json
from pathlib import Path

from actors.vm import stages
from gateway.apps import vm as gateway_vm
from gateway.console import tables

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


def test_the_console_imports_the_list_the_server_writes_from_it() -> None:
    page = (ROOT / "gateway" / "console" / "static" / "pages" / "install.js").read_text()
    assert 'import { INSTALL_STAGES } from "/console/tables/stages.js";' in page
    assert "VM initialization >" not in page  # no copy of its own
    head = "export const INSTALL_STAGES = "
    assert tables.STAGES_JS.startswith(head) and tables.STAGES_JS.endswith(";\n")
    assert tuple(json.loads(tables.STAGES_JS[len(head) : -2])) == stages.INSTALL
