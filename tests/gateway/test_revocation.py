"""What a token keeps open ends with it: revoking a token, or signing a console session out,
while a VM task stream, the console's event feed or a task stream forwarded by the console is
open, ends each within 5 s, the last event saying why; streams of other tokens go on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest
from pvesim.cluster import SimCluster

from actors.platform import Runtime
from events.nats_server import EmbeddedNats
from gateway.http.tokens import Role, create, revoke
from tests.conftest import Serve, wait_for
from tests.vm.conftest import mirror, service_env, sim  # noqa: F401 (fixtures)
from tests.vm.mirror import Mirror

VMID = 190
# The promise the docs make: a revoked token's streams end within this.
ENDS_WITHIN = 5.0
Frames = list[tuple[str, Any]]


@attrs.frozen
class Tokens:
    path: Path
    made: dict[Role, str]

    def bearer(self, role: Role) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.made[role]}"}


@pytest.fixture
def tokens(runtime: Runtime) -> Tokens:
    path = runtime.data_dir / "tokens.json"
    return Tokens(path, {role: create(path, role.label, role) for role in Role})


class Stream:
    """An SSE response read in the background, every (event, data) kept."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.frames: Frames = []
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> Frames:
        event = "message"
        async for raw in self.resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                self.frames.append((event, json.loads(line[6:])))
            elif line == "":
                event = "message"
        return self.frames

    async def ended(self) -> Frames:
        """Every frame, once the server ended the stream; fails past ENDS_WITHIN."""
        return await asyncio.wait_for(asyncio.shield(self.task), ENDS_WITHIN)

    @property
    def open(self) -> bool:
        return not self.task.done()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    # unsafe: keep the console's cookie of an IP address (127.0.0.1), as a browser does.
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        yield session


async def last_once_revoked(tokens: Tokens, label: str, stream: Stream) -> tuple[str, Any]:
    """Revoke the token ``label``: the last frame of ``stream``, which must end with it."""
    assert revoke(tokens.path, label)
    return (await stream.ended())[-1]


async def attach(http: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> Stream:
    resp = await http.request(method, url, **kw)
    assert resp.status == 200, await resp.text()
    assert resp.content_type == "text/event-stream"
    return Stream(resp)


@pytest.fixture
async def vm(
    serve: Serve,
    tmp_path: Path,
    nats_server: EmbeddedNats,
    sim: SimCluster,  # noqa: F811
    mirror: Mirror,  # noqa: F811
) -> str:
    """A VM service whose install of VMID never sees its guest boot: the task waits for SSH
    and its stream stays open."""
    sim.inject_failure("guest boot", vmid=VMID)
    env = service_env(tmp_path, nats_server, sim, mirror, VM_SSH_WAIT="30")
    return await serve("vm", **env)


async def test_revoking_a_token_ends_its_task_streams_and_no_other(
    vm: str,
    tokens: Tokens,
    http: aiohttp.ClientSession,
    sim: SimCluster,  # noqa: F811
) -> None:
    api = vm + "/api"
    install = await attach(
        http,
        "POST",
        f"{api}/vm/install",
        json={"os": "debian", "version": "12", "id": VMID},
        headers=tokens.bearer(Role.ADMIN),
    )
    await wait_for(lambda: sim.vm(VMID) is not None, timeout=30, what="the install to create")
    follow = await attach(http, "GET", f"{api}/vm/{VMID}/task", headers=tokens.bearer(Role.VIEWER))
    assert await last_once_revoked(tokens, "viewer", follow) == (
        "revoked",
        {
            "step": "revoked",
            "status": "error",
            "message": "[-] token 'viewer' was revoked: this stream ends here; the task goes on "
            f"(GET /api/vm/{VMID}/task follows it again with a valid token)",
        },
    )
    assert install.open  # the admin's token still holds
    async with http.get(f"{api}/vm/{VMID}/task", headers=tokens.bearer(Role.VIEWER)) as resp:
        assert resp.status == 401
    event, data = await last_once_revoked(tokens, "admin", install)
    assert event == "revoked"
    assert data["message"].startswith("[-] token 'admin' was revoked: this stream ends")


async def test_revoking_a_token_ends_the_console_event_feed(
    serve: Serve, tokens: Tokens, http: aiohttp.ClientSession
) -> None:
    base = await serve("status")
    feed = await attach(http, "GET", f"{base}/console/events", headers=tokens.bearer(Role.VIEWER))
    other = await attach(
        http, "GET", f"{base}/console/events", headers=tokens.bearer(Role.OPERATOR)
    )
    assert await last_once_revoked(tokens, "viewer", feed) == (
        "revoked",
        {"message": "token 'viewer' was revoked: this stream ends here"},
    )
    assert other.open
    other.task.cancel()


async def test_signing_out_ends_the_feed_and_a_forwarded_task_stream(
    vm: str,
    serve: Serve,
    tokens: Tokens,
    http: aiohttp.ClientSession,
    sim: SimCluster,  # noqa: F811
) -> None:
    """A session signed out ends what the browser has open through the console, though its
    token is still valid (the service alone cannot tell)."""
    base = await serve("status", listen={"vm": ("127.0.0.1", int(vm.rsplit(":", 1)[1]))})
    async with http.post(
        f"{vm}/api/vm/install",
        json={"os": "debian", "version": "12", "id": VMID},
        headers=tokens.bearer(Role.ADMIN),
    ) as install:
        assert install.status == 200
        await wait_for(lambda: sim.vm(VMID) is not None, timeout=30, what="the install to create")
        async with http.post(
            f"{base}/console/login",
            data={"token": tokens.made[Role.OPERATOR]},
            allow_redirects=False,
        ) as resp:
            assert resp.status == 303
        feed = await attach(http, "GET", f"{base}/console/events")
        task = await attach(http, "GET", f"{base}/console/svc/vm/api/vm/{VMID}/task")
        async with http.post(f"{base}/console/logout", allow_redirects=False) as resp:
            assert resp.status == 303
        said = "the console session of 'operator' ended (signed out, or expired)"
        assert (await feed.ended())[-1] == (
            "revoked",
            {"message": f"{said}: this stream ends here"},
        )
        assert (await task.ended())[-1] == (
            "revoked",
            {"message": f"{said}: this stream ends here"},
        )


SLEEPER = "print('started', flush=True)\nimport time\ntime.sleep(60)"


async def test_revoking_a_token_cancels_its_function_run(
    serve: Serve, tokens: Tokens, http: aiohttp.ClientSession
) -> None:
    base = await serve("functions")
    body = {"language": "python", "code": SLEEPER, "stream": True}
    run = await attach(
        http, "POST", f"{base}/run-now", json=body, headers=tokens.bearer(Role.OPERATOR)
    )
    await wait_for(lambda: run.frames, timeout=30, what="the run to print")
    assert run.frames == [("message", {"event": "log", "data": "started", "type": "text"})]
    assert await last_once_revoked(tokens, "operator", run) == (
        "message",
        {
            "event": "error",
            "data": "token 'operator' was revoked: the run was cancelled",
            "type": "text",
        },
    )
