"""Templates and roles, on the VM service as `cairn` builds it (simulated cluster): anyone
may list the templates, as the VM list; a viewer or an operator may not prune them, an admin
may."""

from __future__ import annotations

import json

from actors.platform import Runtime
from gateway.http.tokens import Role, create
from tests.conftest import Serve
from tests.gateway.test_snapshot_roles import call


async def test_a_viewer_may_list_templates_but_only_an_admin_prunes(
    serve: Serve, runtime: Runtime
) -> None:
    path = runtime.data_dir / "tokens.json"
    token = {role: create(path, role.label, role) for role in Role}
    base = await serve(
        "vm",
        flags=frozenset({"sim"}),
        PVESIM_DELAY_SCALE="0",
        VM_SSH_POLL="0.05",
    )
    api = f"{base}/api/vm"
    status, text = await call(
        "POST", f"{api}/install", token[Role.ADMIN], {"os": "debian", "version": "12", "id": 130}
    )
    assert status == 200 and '"vm_id":130' in text, text

    templates = f"{api}/templates"
    # Public by default, as the list is (the `/api/vm/<id>` entry of the public routes).
    assert (await call("GET", templates, None))[0] == 200
    status, text = await call("GET", templates, token[Role.VIEWER])
    assert status == 200, text
    [row] = json.loads(text)
    assert (row["vmid"], row["clones"], row["current"]) == (9000, [130], True)
    for role in (Role.VIEWER, Role.OPERATOR):
        status, text = await call("POST", f"{templates}/prune", token[role])
        assert status == 403 and "this route needs admin" in text, (role, text)
    assert (await call("POST", f"{templates}/prune", None))[0] == 401
    status, text = await call("POST", f"{templates}/prune", token[Role.ADMIN])
    assert status == 200, text
    assert json.loads(text) == {
        "removed": [],
        "kept": [{"vmid": 9000, "reason": "installs clone it"}],
    }
    # Not a VM id: the detail route does not take `templates` for one.
    status, text = await call("GET", f"{api}/templates/prune", token[Role.ADMIN])
    assert status in (404, 405), text
