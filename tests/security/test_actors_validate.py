"""Actors refuse what the HTTP layer would refuse, whoever sends it: a command sent straight on
NATS with a gateway's key (the role that may send commands) gets the status and message the
HTTP route gives for the same body, and nothing reaches Proxmox or the registry."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest

from actors.functions import protocol
from actors.functions.settings import DEFAULT_CODE_MAX_SIZE
from actors.platform import Runtime
from actors.vm.host import (
    SUBJECT_DETAIL,
    SUBJECT_DO,
    SUBJECT_INSTALL,
    SUBJECT_SNAPSHOTS,
    SUBJECT_STATUS,
)
from actors.vm.messages import install_payload
from actors.vm.shacrypt import sha512_crypt
from events.bus import CommandFailed, command
from tests.conftest import Serve


@attrs.frozen
class Served:
    runtime: Runtime
    http: aiohttp.ClientSession
    urls: dict[str, str]

    async def over_nats(self, subject: str, payload: Any) -> tuple[int, str]:
        with pytest.raises(CommandFailed) as refused:
            await command(self.runtime.gateway_nc, subject, payload, timeout=30)
        return refused.value.status, refused.value.message

    async def over_http(self, service: str, path: str, body: Any) -> tuple[int, str]:
        async with self.http.post(self.urls[service] + path, json=body) as resp:
            return resp.status, await resp.text()


@pytest.fixture
async def served(runtime: Runtime, serve: Serve) -> AsyncIterator[Served]:
    urls = {
        "vm": await serve("vm", flags=frozenset({"sim"})),
        "functions": await serve("functions"),
    }
    async with aiohttp.ClientSession() as http:
        yield Served(runtime, http, urls)


def install_command(**body: Any) -> dict[str, Any]:
    return install_payload(
        uuid.uuid4().hex, {"os": "debian", "version": "12", **body}, sha512_crypt("x")
    )


@pytest.mark.parametrize(
    "body",
    [
        {"name": "not a dns name!"},
        {"id": 99},
        {"user": "Root; rm -rf /"},
        {"os": "windows"},
        {"memory": 4096},
        {"pubkey": "ssh-rsa nonsense"},
    ],
    ids=["name", "id", "user", "os", "unknown-field", "pubkey"],
)
async def test_an_install_on_nats_is_refused_as_over_http(
    served: Served, body: dict[str, Any]
) -> None:
    over_nats = await served.over_nats(SUBJECT_INSTALL, install_command(**body))
    over_http = await served.over_http(
        "vm", "/api/vm/install", {"os": "debian", "version": "12", **body}
    )
    assert over_nats == over_http
    assert over_nats[0] == 400


async def test_an_install_with_a_clear_password_or_no_hash_is_refused(served: Served) -> None:
    clear = install_command()
    clear["body"]["passwd"] = "hunter2"
    assert await served.over_nats(SUBJECT_INSTALL, clear) == (
        400,
        "passwd: crosses the bus only hashed (passwd_hash)",
    )
    unhashed = {**install_command(), "passwd_hash": "hunter2"}
    assert await served.over_nats(SUBJECT_INSTALL, unhashed) == (
        400,
        "passwd_hash: must be a SHA-512 crypt hash ($6$...)",
    )
    forged_task = {**install_command(), "task": "../../etc"}
    status, message = await served.over_nats(SUBJECT_INSTALL, forged_task)
    assert (status, message.split(":")[0]) == (400, "task")


@pytest.mark.parametrize(
    ("do", "http_path", "http_body"),
    [
        ({"command": "set/cpu", "args": {"cpu": 999}}, "/api/vm/100/set/cpu", {"cpu": 999}),
        ({"command": "set/memory", "args": {"memory": 1}}, "/api/vm/100/set/memory", {"memory": 1}),
        (
            {"command": "set/node", "args": {"node": "evil"}},
            "/api/vm/100/set/node",
            {"node": "evil"},
        ),
        ({"command": "set/disk", "args": {"grow_gb": 0}}, "/api/vm/100/set/disk", {"disk": "0G"}),
        (
            {"command": "set/disk", "args": {"grow_gb": 2, "drive": "scsi0; rm"}},
            "/api/vm/100/set/disk",
            {"disk": "2G", "drive": "scsi0; rm"},
        ),
        (
            {"command": "set/tags", "args": {"tags": ["a b"]}},
            "/api/vm/100/set/tags",
            {"tags": ["a b"]},
        ),
    ],
    ids=["cpu", "memory", "node", "disk", "drive", "tags"],
)
async def test_a_vm_command_on_nats_is_refused_as_over_http(
    served: Served, do: dict[str, Any], http_path: str, http_body: dict[str, Any]
) -> None:
    payload = {"task": uuid.uuid4().hex, "vmid": 100, **do}
    assert await served.over_nats(SUBJECT_DO, payload) == await served.over_http(
        "vm", http_path, http_body
    )


async def test_an_unknown_command_or_a_bad_vmid_is_refused(served: Served) -> None:
    task = uuid.uuid4().hex
    status, _ = await served.over_nats(SUBJECT_DO, {"task": task, "vmid": 100, "command": "rm"})
    assert status == 400
    status, message = await served.over_nats(
        SUBJECT_DO, {"task": task, "vmid": "100; qm destroy 101", "command": "stop"}
    )
    assert status == 400 and message.startswith("invalid VM id")


@pytest.mark.parametrize("subject", [SUBJECT_STATUS, SUBJECT_DETAIL, SUBJECT_SNAPSHOTS])
@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"vmid": "100; qm destroy 101"}, "invalid VM id '100; qm destroy 101'"),
        ({"vmid": -1}, "invalid VM id '-1'"),
        ({}, "invalid VM id 'None'"),
        ([100], "command: must be a JSON object"),
    ],
)
async def test_a_query_about_one_vm_refuses_a_bad_vmid(
    served: Served, subject: str, payload: Any, message: str
) -> None:
    assert await served.over_nats(subject, payload) == (400, message)


@pytest.mark.parametrize(
    "upload",
    [
        {"path": "../escape", "language": "python", "code": "return 1"},
        {"path": "a/b", "language": "cobol", "code": "return 1"},
        {"path": "a\nb", "language": "python", "code": "return 1"},
        {"path": "big", "language": "python", "code": "#" * (DEFAULT_CODE_MAX_SIZE + 1)},
    ],
    ids=["dotdot", "language", "control", "too-large"],
)
async def test_an_upload_on_nats_is_refused_as_over_http(
    served: Served, upload: dict[str, Any], tmp_path: Path
) -> None:
    over_nats = await served.over_nats(protocol.UPLOAD_SUBJECT, upload)
    over_http = await served.over_http("functions", "/upload", upload)
    assert over_nats == over_http
    assert over_nats[0] == 400
    async with served.http.get(served.urls["functions"] + "/functions") as resp:
        assert (await resp.json())["count"] == 0  # nothing stored
