"""Snapshots and roles, on the VM service as `cairn` builds it (simulated cluster): a viewer
may list a VM's snapshots but not take one, an operator may take one, only an admin may roll
back to one or delete one; and `by` names the token that asked."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from actors.platform import Runtime
from gateway.http.tokens import Role, create
from tests.conftest import Serve


async def call(method: str, url: str, token: str | None, body: Any = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, url, json=body, headers=headers) as resp,
    ):
        return resp.status, await resp.text()


async def installed(serve: Serve, runtime: Runtime, vmid: int) -> tuple[str, dict[Role, str]]:
    """The VM API of a simulated cluster holding VM `vmid` (installed by an admin), and a token
    of each role."""
    path = runtime.data_dir / "tokens.json"
    token = {role: create(path, role.label, role) for role in Role}
    base = await serve("vm", flags=frozenset({"sim"}), PVESIM_DELAY_SCALE="0", VM_SSH_POLL="0.05")
    api = f"{base}/api/vm"
    body = {"os": "debian", "version": "12", "id": vmid}
    status, text = await call("POST", f"{api}/install", token[Role.ADMIN], body)
    assert status == 200 and f'"vm_id":{vmid}' in text, text
    return api, token


async def test_a_viewer_may_list_but_not_change(serve: Serve, runtime: Runtime) -> None:
    api, token = await installed(serve, runtime, 130)

    snaps = f"{api}/130/snapshots"
    assert (await call("GET", snaps, None))[0] == 401  # not public
    assert await call("GET", snaps, token[Role.VIEWER]) == (200, "[]")
    status, text = await call("POST", snaps, token[Role.VIEWER], {"name": "pre"})
    assert status == 403 and "this route needs operator (or above)" in text, text
    status, text = await call("POST", snaps, token[Role.OPERATOR], {"name": "pre"})
    assert status == 200 and "[+] snapshot pre taken" in text, text
    status, text = await call("GET", snaps, token[Role.VIEWER])
    [listed] = json.loads(text)
    assert (listed["name"], listed["by"]) == ("pre", "operator")

    for method, url in (("POST", f"{snaps}/pre/rollback"), ("DELETE", f"{snaps}/pre")):
        for role in (Role.VIEWER, Role.OPERATOR):
            status, text = await call(method, url, token[role])
            assert status == 403 and "this route needs admin" in text, (method, role, text)
    status, text = await call("POST", f"{snaps}/pre/rollback", token[Role.ADMIN])
    assert status == 200 and "back at snapshot pre" in text, text
    assert await call("DELETE", f"{snaps}/pre", token[Role.ADMIN]) == (200, "ok")
    assert await call("GET", snaps, token[Role.VIEWER]) == (200, "[]")
