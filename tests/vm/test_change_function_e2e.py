"""A safe change checked by a stored function, end to end with both drivers: the VM service
and the functions service in one cairn (as `cairn up` runs them), a real sandbox running the
function. Its result `true` or `{"ok": true}` keeps the change; any other result, or an
error, rolls it back with the reason; a path with no stored function, or a bad input, is
refused before anything changes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from pvesim.cluster import SimCluster

from actors.platform import open_runtime
from events.nats_server import EmbeddedNats
from gateway.apps import functions, vm
from gateway.server import journal
from tests.functions.conftest import SERVICE_ENV
from tests.vm import drivers
from tests.vm.conftest import Service, service_env
from tests.vm.mirror import Mirror

driver = drivers.driver

VERIFY = "change > verifying"
ROLLBACK = "change > rolling back"
# A function is the body of one (docs/functions.md): `input` is the check's input.
PROBE = "return {'ok': input.get('want') == 'ok'}\n"
YES = "return True\n"
BROKEN = "raise RuntimeError('the probe is broken')\n"
SLOW = "import time\ntime.sleep(2.5)\nreturn True\n"


@pytest.fixture
async def cairn(
    tmp_path: Path, nats_server: EmbeddedNats, sim: SimCluster, mirror: Mirror, driver: str
) -> AsyncIterator[tuple[Service, int]]:
    """The VM service and the functions service on one runtime, the checks stored: the VM
    service as a Service, and the id of a VM it installed (2048 MB) for the changes."""
    env = {**service_env(tmp_path, nats_server, sim, mirror, PVE_DRIVER=driver), **SERVICE_ENV}
    async with open_runtime(env, tmp_path / "data", journal=journal()) as runtime:
        runners = []
        try:
            for app in (await functions.build(runtime), await vm.build(runtime)):
                runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
                await runner.setup()
                runners.append(runner)
                await web.TCPSite(runner, "127.0.0.1", 0).start()
            urls = [f"http://127.0.0.1:{r.addresses[0][1]}" for r in runners]
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
                service = Service(urls[1], session, sim, mirror, env)
                await drivers.answering(service)
                for path, code in (("checks/probe", PROBE), ("checks/yes", YES),
                                   ("checks/broken", BROKEN), ("checks/slow", SLOW)):  # fmt: skip
                    upload = {"path": path, "language": "python", "code": code}
                    async with session.post(urls[0] + "/upload", json=upload) as resp:
                        assert resp.status == 200, await resp.text()
                yield service, await service.installed(id=170, ram=2048)
        finally:
            for runner in reversed(runners):
                await runner.cleanup()


def memory(sim: SimCluster, vmid: int) -> str:
    found = sim.vm(vmid)
    assert found is not None
    return str(found.config["memory"])


async def test_a_function_check_keeps_or_rolls_back_the_change(
    cairn: tuple[Service, int], sim: SimCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cairn.journal")
    service, vmid = cairn
    path = f"/vm/{vmid}/change"

    probe = {"function": "/checks/probe", "input": {"want": "ok"}}
    passing = {"steps": [{"set": {"memory": 4096}}], "verify": [probe, {"function": "checks/yes"}]}
    sse = await service.post_sse(path, passing)
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    said = [r["message"] for r in sse.records if r["step"] == VERIFY]
    assert any(m.startswith("[+] check 1 of 2 passed: function checks/probe says ok") for m in said)
    assert any(m.startswith("[+] check 2 of 2 passed: function checks/yes says ok") for m in said)
    assert memory(sim, vmid) == "4096"
    # The functions' journal names who asked for the change (no tokens here: the client's
    # address), and which change the run checked.
    runs = [r.getMessage() for r in caplog.records if r.getMessage().startswith("function ")]
    assert any(
        m.startswith("function checks/probe version ")
        and " (python): ok in " in m
        and m.endswith(f", asked by ip:127.0.0.1, for the change of VM {vmid}")
        for m in runs
    ), runs

    failing = {
        "steps": [{"set": {"memory": 3072}}],
        "verify": {"function": "checks/probe", "input": '{"want": "no"}'},
    }
    sse = await service.post_sse(path, failing)
    assert sse.closed and sse.last["step"] == ROLLBACK and sse.last["status"] == "error", sse.last
    assert sse.last["message"].startswith(
        "[-] change rolled back: verify failed: check 1 of 1: function checks/probe returned "
        '{"ok":false}, not true or {"ok": true} ('
    ), sse.last
    assert memory(sim, vmid) == "4096"  # as before the change

    broken = {"steps": [{"set": {"memory": 3072}}], "verify": {"function": "checks/broken"}}
    sse = await service.post_sse(path, broken)
    assert sse.closed and sse.last["step"] == ROLLBACK, sse.last
    assert sse.last["message"].startswith(
        "[-] change rolled back: verify failed: check 1 of 1: function checks/broken failed: "
    ), sse.last
    assert "the probe is broken" in sse.last["message"], sse.last
    assert memory(sim, vmid) == "4096"

    slow = {
        "steps": [{"set": {"memory": 3072}}],
        "verify": {"function": "checks/slow", "timeout": 1},
    }
    sse = await service.post_sse(path, slow)
    assert sse.closed and sse.last["step"] == ROLLBACK, sse.last
    assert sse.last["message"].startswith(
        "[-] change rolled back: verify failed: check 1 of 1: function checks/slow timed out "
        "after 1s ("
    ), sse.last
    assert memory(sim, vmid) == "4096"


async def test_bad_function_checks_are_refused_before_anything_changes(
    cairn: tuple[Service, int], sim: SimCluster
) -> None:
    service, vmid = cairn
    path = f"/vm/{vmid}/change"
    step = [{"set": {"memory": 4096}}]
    cases: list[tuple[Any, str]] = [
        ({"function": "checks/nothing"}, "verify.function: no stored function 'checks/nothing'"),
        ([{"ssh": True}, {"function": "checks/nothing"}],
         "verify[1].function: no stored function 'checks/nothing'"),
        ({"function": ""}, 'verify.function: must be the path of a stored function, like '
         '"checks/http"'),
        ({"function": "../etc/x"}, 'verify.function: must be the path of a stored function, '
         'like "checks/http"'),
        ({"function": 7}, 'verify.function: must be the path of a stored function, like '
         '"checks/http"'),
        ({"function": "checks/yes", "input": "x" * 70000},
         "verify.input: a string must hold JSON (or give the value itself)"),
        ({"function": "checks/yes", "input": {"blob": "x" * 65536}},
         "verify.input: at most 65536 bytes as JSON"),
        ({"function": "checks/yes", "input": "{not json"},
         "verify.input: a string must hold JSON (or give the value itself)"),
        ({"function": "checks/yes", "timeout": 0},
         "verify.timeout: must be a whole number of seconds from 1 to 3600"),
        ({"function": "checks/yes", "url": "http://x"},
         "verify.url: unknown field in a 'function' check"),
    ]  # fmt: skip
    for verify, message in cases:
        assert await service.post(path, {"steps": step, "verify": verify}) == (400, message)
    assert memory(sim, vmid) == "2048"
    status, text = await service.get(f"/vm/{vmid}/snapshots")
    assert (status, text) == (200, "[]")
