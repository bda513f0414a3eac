"""The operator's journal over a real install and destroy: one line per meaningful change."""

from __future__ import annotations

import logging

import pytest

from tests.conftest import wait_for
from tests.vm import drivers
from tests.vm.conftest import Service

# Every test here runs with both drivers (tests/vm/drivers.py).
driver = drivers.driver
start_service = drivers.start_service


async def test_an_install_and_a_destroy_each_leave_one_line(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cairn.journal")
    sse = await service.install(name="web1")
    vmid = sse.last["vm_id"]
    assert (await service.post(f"/vm/{vmid}/stop"))[0] == 200
    assert (await service.post(f"/vm/{vmid}/destroy"))[0] == 200

    def journal() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "cairn.journal"]

    await wait_for(lambda: any("destroy done" in line for line in journal()), what="destroy line")
    lines = journal()
    assert len(lines) == 6, lines
    assert lines[0].startswith(f"vm {vmid}: installed 'web1' (debian 12) on pve1, 2 vCPU, ")
    assert lines[1].startswith(f"vm {vmid}: install done in ")
    assert lines[1].endswith(" s, now running")
    for started, done, command, state in ((2, 3, "stop", "stopped"), (4, 5, "destroy", "absent")):
        assert lines[started].startswith(f"vm {vmid}: {command} started (task ")
        assert lines[done].startswith(f"vm {vmid}: {command} done in ")
        assert lines[done].endswith(f" s, now {state}")
