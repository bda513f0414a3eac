"""The audit trail: who asked for an install, a stop and a destroy through the console is in
the VM's `vm.task_started` events, in `/api/vm/<id>` (`created_by`, `last_task.by`) and in the
line `cairn events tail` prints; a token's name when tokens exist, `ip:<address>` otherwise.
Real VM service (simulated cluster), real console, real HTTP."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest
from aiohttp.test_utils import TestServer

from actors.platform import Runtime
from events.codec import to_dict
from gateway import server as root
from gateway.cli.events import event_line
from gateway.http.tokens import Role, create
from gateway.services import build_app

Start = Callable[[], Awaitable[str]]


@pytest.fixture
async def console(runtime: Runtime, tmp_path: Path) -> AsyncIterator[str]:
    servers: list[TestServer] = []
    fast = {"PVESIM_DELAY_SCALE": "0", "VM_SSH_POLL": "0.05"}
    sim = attrs.evolve(runtime, flags=frozenset({"sim"}), env={**runtime.env, **fast})
    vm = TestServer(await build_app(root.load("vm"), sim), host="127.0.0.1")
    await vm.start_server()
    servers.append(vm)
    rt = attrs.evolve(runtime, listen={"vm": ("127.0.0.1", int(vm.port or 0))})
    server = TestServer(await build_app(root.load("status"), rt), host="127.0.0.1")
    await server.start_server()
    servers.append(server)
    yield str(server.make_url("/console/svc/vm/api/vm")).rstrip("/")
    for s in reversed(servers):
        await s.close()


async def call(method: str, url: str, token: str | None = None, body: Any = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, url, json=body, headers=headers) as resp,
    ):
        text = await resp.text()
        assert resp.status == 200, (url, resp.status, text)
        return json.loads(text) if resp.content_type == "application/json" else text


async def install(api: str, token: str | None) -> int:
    await call("POST", f"{api}/install", token, {"os": "debian", "version": "12", "name": "a"})
    listing = await call("GET", f"{api}/list")
    return int(next(v["vmid"] for v in listing["list"] if v["name"] == "a"))


async def started_lines(runtime: Runtime, vmid: int) -> list[str]:
    records = await runtime.store.read_stream(f"vm:{vmid}")
    subject = f"cairn.evt.vm.{vmid}"
    return [
        event_line(r.version, subject, {"type": r.event.type_name, "data": to_dict(r.event)})
        for r in records
        if r.event.type_name == "vm.task_started"
    ]


async def test_with_tokens_the_token_name(
    console: str, runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.apps.vm")
    path = runtime.data_dir / "tokens.json"
    ada, otto = create(path, "ada", Role.ADMIN), create(path, "otto", Role.OPERATOR)
    vmid = await install(console, ada)
    detail = await call("GET", f"{console}/{vmid}")
    assert (detail["created_by"], detail["last_task"]["by"]) == ("ada", "ada")
    assert await call("POST", f"{console}/{vmid}/stop", otto) == "ok"
    detail = await call("GET", f"{console}/{vmid}")
    assert detail["created_by"] == "ada"
    assert (detail["last_task"]["command"], detail["last_task"]["by"]) == ("stop", "otto")
    assert await call("POST", f"{console}/{vmid}/destroy", ada) == "ok"
    lines = await started_lines(runtime, vmid)
    assert [line.split(" command=")[1] for line in lines] == [
        "install working=installing by=ada",
        "stop working=stopping by=otto",
        "destroy working=destroying by=ada",
    ]
    # The journal's line names who, never the token.
    assert f"vm: destroy of VM {vmid} asked by ada (task " in caplog.text
    assert "vm: install of a new VM asked by ada" in caplog.text
    assert ada not in caplog.text and otto not in caplog.text


async def test_without_tokens_the_address(console: str, runtime: Runtime) -> None:
    vmid = await install(console, None)
    detail = await call("GET", f"{console}/{vmid}")
    assert (detail["created_by"], detail["last_task"]["by"]) == ("ip:127.0.0.1", "ip:127.0.0.1")
    assert (await started_lines(runtime, vmid))[0].endswith("by=ip:127.0.0.1")


async def test_behind_a_trusted_proxy_a_hostile_forwarded_hop_is_quoted(runtime: Runtime) -> None:
    """A forwarded hop that is no address (any text a client put there, a tab included) is
    quoted and cut short, as for functions and images, and the install still goes through."""
    env = {
        **runtime.env,
        "PVESIM_DELAY_SCALE": "0",
        "VM_SSH_POLL": "0.05",
        "TRUSTED_PROXIES": "127.0.0.1",
    }
    sim = attrs.evolve(runtime, flags=frozenset({"sim"}), env=env)
    vm = TestServer(await build_app(root.load("vm"), sim), host="127.0.0.1")
    await vm.start_server()
    try:
        api = str(vm.make_url("/api/vm"))
        hop = "<by=\tadmin>" + "x" * 300
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{api}/install",
                json={"os": "debian", "version": "12", "name": "a"},
                headers={"X-Forwarded-For": f"{hop}, 127.0.0.1"},
            ) as resp,
        ):
            assert resp.status == 200, await resp.text()
            await resp.read()
        listing = await call("GET", f"{api}/list")
        vmid = int(next(v["vmid"] for v in listing["list"] if v["name"] == "a"))
        detail = await call("GET", f"{api}/{vmid}")
        assert detail["created_by"] == "ip:'<by=\\tadmin>" + "x" * 53 + "'"
    finally:
        await vm.close()
