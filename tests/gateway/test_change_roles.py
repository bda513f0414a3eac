"""A safe change runs scripts as root on the guest: only an admin may ask for one (a viewer
and an operator are refused before anything happens), and `by` names the admin's token."""

from __future__ import annotations

import json

from actors.platform import Runtime
from gateway.http.tokens import Role
from tests.conftest import Serve
from tests.gateway.test_snapshot_roles import call, installed


async def test_only_an_admin_may_change_a_vm(serve: Serve, runtime: Runtime) -> None:
    api, token = await installed(serve, runtime, 131)

    change = {"steps": [{"run": "echo hi > /root/x"}], "verify": {"ssh": True}}
    assert (await call("POST", f"{api}/131/change", None, change))[0] == 401
    for role in (Role.VIEWER, Role.OPERATOR):
        status, text = await call("POST", f"{api}/131/change", token[role], change)
        assert status == 403 and "this route needs admin" in text, (role, text)
    status, text = await call("GET", f"{api}/131", token[Role.VIEWER])
    assert json.loads(text)["last_task"]["command"] == "install"  # nothing was started
    status, text = await call("POST", f"{api}/131/change", token[Role.ADMIN], change)
    assert status == 200 and "[+] change kept; snapshot cairn-change-" in text, text
    status, text = await call("GET", f"{api}/131", token[Role.VIEWER])
    assert json.loads(text)["last_task"]["by"] == "admin"
