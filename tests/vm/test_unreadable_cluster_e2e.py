"""An install while the cluster's VMs cannot be read answers 503 naming what failed, in the
terms of the driver that tried: `pvesh` on the main node for the CLI driver, the API's URL for
the API driver (the API driver never runs pvesh)."""

from __future__ import annotations

from typing import Any

from tests.conftest import wait_for
from tests.vm import drivers
from tests.vm.conftest import Service

driver = drivers.driver
start_service = drivers.start_service


async def test_an_unreadable_cluster_is_a_503_naming_what_failed(
    service: Service, driver: str
) -> None:
    # Enough failures for the install's read and any inventory poll that runs beside it.
    service.sim.inject_failure("pvesh get", message="cluster not ready - no quorum?", times=20)
    status, text = await service.post("/vm/install", {"os": "debian", "version": "12"})
    assert status == 503, text
    if driver == "api":
        api_url = service.env["PVE_API_URL"]
        expected = f"cannot read the cluster's VMs: GET /cluster/resources at {api_url} failed: "
        assert "pvesh" not in text
    else:
        expected = "cannot read the cluster's VMs: pvesh get /cluster/resources on pve1 failed: "
    assert text.startswith(expected), text
    assert "cluster not ready - no quorum?" in text
    assert not any(" qm create " in c for c in service.sim.commands())


async def test_health_names_the_failed_read_in_the_drivers_terms(
    start_service: Any, driver: str
) -> None:
    service: Service = await start_service(VM_POLL_INTERVAL="0.3")
    service.sim.inject_failure("pvesh get", message="cluster not ready - no quorum?", times=1000)
    problems: list[str] = []

    async def named() -> bool:
        async with service.session.get(service.url + "/health") as resp:
            body = await resp.json()
        problems[:] = [p for p in body["problems"] if p.startswith("cluster: ")]
        return bool(problems)

    await wait_for(named, timeout=20, what="the inventory's poll to meet the failure")
    if driver == "api":
        read = f"GET /cluster/resources at {service.env['PVE_API_URL']}"
    else:
        read = "pvesh get /cluster/resources on pve1"
    assert len(problems) == 1 and problems[0].startswith(f"cluster: {read} failed: "), problems
    assert "cluster not ready - no quorum?" in problems[0]
