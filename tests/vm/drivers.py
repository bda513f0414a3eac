"""Both drivers for the VM service's end-to-end tests (PVE_DRIVER=cli|api, docs/vm.md).

A test module that imports `driver` and `start_service` from here runs each of its tests once
with the CLI driver (qm over a local subprocess and SSH) and once with the API driver (the
simulated pveproxy over HTTPS), against the same simulated cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import wait_for

DRIVERS = ("cli", "api")


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def start_service(start_service: Any, driver: str) -> AsyncIterator[Any]:
    """The conftest's `start_service`, with PVE_DRIVER set (a test may still override it)."""

    async def start(**extra: str) -> Any:
        service = await start_service(**{"PVE_DRIVER": driver, **extra})
        await answering(service)
        return service

    start.stop_last = start_service.stop_last  # type: ignore[attr-defined]
    yield start


async def answering(service: Any) -> None:
    """Wait until the VM service answers over NATS. It subscribes its subjects in order,
    install first and list fourth, without a flush, from another connection than the
    gateway's: with the API driver its start-up is quick enough for a first install to beat
    the subscription to the NATS server ("no service answers"). A list that answers proves
    every earlier subscription arrived."""

    async def lists() -> bool:
        status, _ = await service.get("/vm/list")
        return bool(status == 200)

    await wait_for(lists, timeout=10, what="the VM service to answer on NATS")


def cli_only(driver: str, why: str) -> None:
    """Skip the API run of a test that checks something only the CLI driver does."""
    if driver == "api":
        pytest.skip(f"CLI driver only: {why}")


def api_only(driver: str, why: str) -> None:
    """Skip the CLI run of a test of something only the API driver does."""
    if driver == "cli":
        pytest.skip(f"API driver only: {why}")
