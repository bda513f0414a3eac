"""The audit trail of functions and images: who stored, replaced or deleted a function and who
uploaded, replaced or deleted an image is in the event (`by`), in the console's event feed, in
the signed events on the bus, in the line `cairn events tail` prints and in the journal's line;
a token's name when tokens exist, `ip:<address>` otherwise. A `by` sent in a body is never
taken, and a command on the bus with a `by` cairn's gateway would not send is refused. Real
services over real HTTP, a real nats-server, a real `cairn` process for the tail."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from nats.aio.msg import Msg

from actors.functions import protocol
from actors.functions.events import FunctionDeleted, FunctionVersionStored
from actors.images.commands import DELETE_SUBJECT as IMAGE_DELETE
from actors.images.events import ImageDeleted, ImageStored
from actors.platform import Runtime
from events.bus import CommandFailed, command
from events.codec import decode_stored
from events.follow import Follower
from events.store import Recorded
from gateway.http.tokens import Role, create
from gateway.server import journal as new_journal
from tests.conftest import Serve, wait_for
from tests.images.imagedata import encoded
from tests.processes import tail_lines

PNG = encoded("PNG", (16, 12))
JPEG = encoded("JPEG", (16, 12))
BILLING = "def handler(x):\n    return 1\n"
BILLING_2 = "def handler(x):\n    return 2\n"
# Every event the scenario causes, as (type, path, who) for a run by `first` and `second`.
Audit = list[tuple[str, str, str | None]]


def expected(first: str, second: str) -> Audit:
    return [
        ("functions.version_stored", "team/billing", first),
        ("functions.version_stored", "team/billing", second),  # replaced
        ("functions.deleted", "team/billing", first),
        ("images.stored", "cats/a.png", first),
        ("images.stored", "cats/a.png", second),  # replaced
        ("images.deleted", "cats/a.png", first),
    ]


async def call(
    method: str,
    url: str,
    token: str | None,
    *,
    json_body: Any = None,
    form: aiohttp.FormData | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    sent = {**(headers or {})}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, url, json=json_body, data=form, headers=sent) as resp,
    ):
        text = await resp.text()
        assert resp.status in (200, 201), (method, url, resp.status, text)
        return json.loads(text)


def image_form(data: bytes) -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("by", "root")  # a field of the form is never who asked
    form.add_field("filepath", data, filename="a.png", content_type="image/png")
    return form


async def scenario(
    functions: str,
    images: str,
    first: str | None,
    second: str | None,
    headers: dict[str, str] | None = None,
) -> None:
    """Store, replace and delete a function, then an image: the first and last step as
    `first`, the replacement as `second` (tokens, or None without)."""
    upload = {"path": "team/billing", "language": "python", "code": BILLING, "by": "root"}
    await call("POST", f"{functions}/upload", first, json_body=upload, headers=headers)
    upload["code"] = BILLING_2
    await call("POST", f"{functions}/upload", second, json_body=upload, headers=headers)
    done = await call("DELETE", f"{functions}/functions/team/billing", first, headers=headers)
    assert done == {"path": "team/billing", "deleted": 2}  # the answer is as it was
    stored = await call(
        "POST", f"{images}/upload/cats", first, form=image_form(PNG), headers=headers
    )
    # The upload's answer, no more.
    assert set(stored) == {"success", "filename", "type", "size", "src"}
    await call("POST", f"{images}/upload/cats", second, form=image_form(JPEG), headers=headers)
    gone = await call("DELETE", f"{images}/del/cats/a.png", first, headers=headers)
    assert gone == {"success": True, "message": "cats/a.png deleted"}


def audit_of(records: list[Recorded]) -> Audit:
    return [(r.event.type_name, r.event.path, r.event.by) for r in records]  # type: ignore[attr-defined]


async def stored_audit(runtime: Runtime) -> Audit:
    return audit_of(
        await runtime.store.read_stream("functions:registry")
        + await runtime.store.read_stream("images:store")
    )


def data_audit(bodies: list[dict[str, Any]]) -> Audit:
    return [(b["type"], b["data"]["path"], b["data"].get("by")) for b in bodies]


class SignedEvents:
    """The functions' and images' events as the console's feed and the image hosts take them
    from JetStream: only those a cairn host signed."""

    def __init__(self, runtime: Runtime) -> None:
        assert runtime.signer is not None, "the bus must be the closed one, events signed"
        self.runtime = runtime
        self.bodies: list[dict[str, Any]] = []
        self.followers: list[Follower] = []

    async def on_event(self, _: int, msg: Msg) -> None:
        self.bodies.append(json.loads(msg.data))

    async def __aenter__(self) -> SignedEvents:
        for subject in ("cairn.evt.functions.>", "cairn.evt.images.>"):
            follower = Follower(
                self.runtime.gateway_nc, subject, self.on_event, signer=self.runtime.signer
            )
            self.followers.append(await follower.start())
        return self

    async def __aexit__(self, *_: object) -> None:
        for follower in self.followers:
            await follower.stop()

    async def wait(self, count: int) -> list[dict[str, Any]]:
        await wait_for(lambda: len(self.bodies) >= count, timeout=20, what=f"{count} events")
        return sorted(self.bodies, key=lambda b: int(b["position"]))


def tail_audit(lines: list[str]) -> Audit:
    found: Audit = []
    for line in lines:
        type_name = line.split()[3]
        fields = dict(f.split("=", 1) for f in line.split()[4:] if "=" in f)
        found.append((type_name, fields["path"], fields.get("by")))
    return found


@pytest.fixture
async def services(serve: Serve) -> AsyncIterator[tuple[str, str]]:
    yield await serve("functions"), await serve("images")


async def test_with_tokens_each_change_names_its_token(
    services: tuple[str, str], runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    path = runtime.data_dir / "tokens.json"
    ada, bert = create(path, "ada", Role.ADMIN), create(path, "bert", Role.ADMIN)
    functions, images = services
    async with SignedEvents(runtime) as signed:
        await scenario(functions, images, ada, bert)
        on_the_bus = await signed.wait(6)
    want = expected("ada", "bert")
    assert await stored_audit(runtime) == want
    assert data_audit(on_the_bus) == want  # signed, checked, and `by` still in them
    lines = await tail_lines({**os.environ, **runtime.env}, 6, kinds=("functions", "images"))
    assert tail_audit(lines) == want
    journal = [r.getMessage() for r in caplog.records if r.name == "cairn.journal"]
    assert [line.split(": ", 1)[1] for line in journal] == [
        f"version {on_the_bus[0]['data']['version']} stored (python, {len(BILLING)} bytes), "
        "asked by ada",
        f"version {on_the_bus[1]['data']['version']} stored (python, {len(BILLING_2)} bytes), "
        "asked by bert",
        "deleted (2 versions), asked by ada",
        f"stored cats/a.png (image/png, {len(PNG)} bytes), asked by ada",
        f"stored cats/a.png (image/jpeg, {len(JPEG)} bytes), asked by bert",
        "deleted cats/a.png, asked by ada",
    ]
    assert ada not in caplog.text and bert not in caplog.text  # names, never tokens


async def test_without_tokens_the_clients_address(
    services: tuple[str, str], runtime: Runtime
) -> None:
    functions, images = services
    await scenario(functions, images, None, None)
    assert await stored_audit(runtime) == expected("ip:127.0.0.1", "ip:127.0.0.1")


async def test_behind_a_trusted_proxy_the_forwarded_address(serve: Serve, runtime: Runtime) -> None:
    """The address ALLOW_IPS checks; a forwarded hop that is no address (any text a client
    put there) is quoted and cut short, and the change still goes through."""
    # Behind a proxy, clients come from anywhere: who may change things is said out loud.
    proxy = {"TRUSTED_PROXIES": "127.0.0.1", "ALLOW_IPS": "0.0.0.0"}
    functions = await serve("functions", **proxy)
    images = await serve("images", **proxy)
    await scenario(functions, images, None, None, {"X-Forwarded-For": "203.0.113.9"})
    assert await stored_audit(runtime) == expected("ip:203.0.113.9", "ip:203.0.113.9")
    hop = "<by=\tadmin>" + "x" * 300
    upload = {"path": "team/odd", "language": "python", "code": BILLING}
    await call(
        "POST",
        f"{functions}/upload",
        None,
        json_body=upload,
        headers={"X-Forwarded-For": f"{hop}, 127.0.0.1"},
    )
    last = (await runtime.store.read_stream("functions:registry"))[-1].event
    assert isinstance(last, FunctionVersionStored)
    assert last.by == "ip:'<by=\\tadmin>" + "x" * 53 + "'"


@pytest.mark.parametrize(
    "by", ["ada\nfunction team/billing: deleted", "x" * 101, "", 7, ["ada"]], ids=repr
)
async def test_a_command_with_a_by_no_gateway_sends_is_refused(
    services: tuple[str, str], runtime: Runtime, by: object
) -> None:
    """Anyone who may send commands on the bus still cannot put a second journal line, an
    endless text or a non-text into the audit trail: refused as malformed, nothing stored."""
    nc = runtime.gateway_nc
    upload = {"path": "team/x", "language": "python", "code": BILLING, "by": by}
    with pytest.raises(CommandFailed) as refused:
        await command(nc, protocol.UPLOAD_SUBJECT, upload)
    assert (refused.value.status, refused.value.message) == (
        400,
        "by: must be a token's name or ip:<address>",
    )
    await command(nc, protocol.UPLOAD_SUBJECT, {**upload, "by": "ada"})
    for subject, payload in (
        (protocol.DELETE_SUBJECT, {"path": "team/x", "by": by}),
        (IMAGE_DELETE, {"path": "cats/a.png", "by": by}),
    ):
        with pytest.raises(CommandFailed) as refused:
            await command(nc, subject, payload)
        assert refused.value.status == 400, subject
    assert await stored_audit(runtime) == [("functions.version_stored", "team/x", "ada")]


def test_an_event_stored_before_cairn_kept_by_still_reads() -> None:
    """No schema version rise: `by` is a field with a default (docs/events.md). A row written
    without it reads with None, and its journal line names nobody."""
    rows = {
        "functions.version_stored": '{"path":"a/b","version":17,"language":"python",'
        '"sha256":"00","size":42}',
        "functions.deleted": '{"path":"a/b","versions":3}',
        "images.stored": '{"path":"cats/a.png","type":"image/png","size":1234}',
        "images.deleted": '{"path":"cats/a.png","trashed_as":"t/a.png"}',
    }
    events = [decode_stored(name, 1, data) for name, data in rows.items()]
    assert [type(e) for e in events] == [
        FunctionVersionStored,
        FunctionDeleted,
        ImageStored,
        ImageDeleted,
    ]
    assert all(e.by is None for e in events)  # type: ignore[attr-defined]
    journal = new_journal()
    lines = [journal.line(Recorded(1, "s:1", 1, e, 1.0)) for e in events]
    assert not any("asked by" in str(line) for line in lines), lines


def run_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The runner host's journal lines: a run records no event, its line says who asked."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "cairn.journal"
        and r.getMessage().startswith(("function /run-now", "function team/"))
        and " ms" in r.getMessage()
    ]


async def test_a_run_names_who_asked_in_its_journal_line(
    serve: Serve, runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cairn.journal")
    functions = await serve("functions")
    run_now = {"language": "python", "code": "return 1\n"}
    assert await call("POST", f"{functions}/run-now", None, json_body=run_now) == {
        "data": 1,
        "type": "number",
    }
    path = runtime.data_dir / "tokens.json"
    ada, otto = create(path, "ada", Role.ADMIN), create(path, "otto", Role.OPERATOR)
    upload = {"path": "team/billing", "language": "python", "code": "return 2\n"}
    version = (await call("POST", f"{functions}/upload", ada, json_body=upload))["version"]
    ran = await call("POST", f"{functions}/run/team/billing", otto, json_body={"by": "ada"})
    assert ran == {"data": 2, "type": "number"}
    await call("POST", f"{functions}/run-now", otto, json_body=run_now)
    lines = run_lines(caplog)
    assert [line.split(": ", 1)[0] for line in lines] == [
        "function /run-now (python)",
        f"function team/billing version {version} (python)",
        "function /run-now (python)",
    ]
    assert [line.rsplit(", ", 1)[1] for line in lines] == [
        "asked by ip:127.0.0.1",
        "asked by otto",
        "asked by otto",
    ]
    assert otto not in caplog.text


async def test_a_run_request_with_a_by_no_gateway_sends_is_malformed(
    serve: Serve, runtime: Runtime
) -> None:
    await serve("functions")
    request = {"id": "a1", "language": "python", "code": BILLING, "by": "otto\nfunction x: ok"}
    reply = await runtime.gateway_nc.request(protocol.RUN_SUBJECT, protocol.encode(request), 5)
    assert protocol.decode(reply.data) == {"t": "error", "message": "malformed run request"}
