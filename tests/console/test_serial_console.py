"""A VM's serial console through the console (`/console/vm/<id>/serial`), over real HTTP and
websockets: the gateway app as `cairn up` builds it, in front of the simulated pveproxy. The
echo, the resize, who may, the attacks (a foreign Origin, a rebound Host, ALLOW_IPS, an
oversized message), refused before PVE hears of them, and no ticket or token in the logs."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from pvesim.cluster import SimCluster
from pvesim.pveproxy import Exchange

from actors.config import ConfigError
from actors.platform import Runtime
from actors.vm.ownership import mark_line
from actors.vm.pveapi.tasks import wait_task
from gateway.http.tokens import Role, create, revoke
from tests.conftest import Serve
from tests.pveapi.conftest import client_for

VMID = 150
# A websocket upgrade by hand, to read the refusal's text.
UPGRADE = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


async def mark(sim: SimCluster, vmid: int, node: str) -> None:
    """Give VM ``vmid`` cairn's mark, as cairn's install does."""
    client = client_for(sim)
    try:
        await client.put(f"/nodes/{node}/qemu/{vmid}/config", {"description": mark_line("t1")})
    finally:
        await client.close()


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[SimCluster]:
    async with SimCluster(tmp_path / "pve", delay_scale=0, statd_lag=0) as cluster:
        cluster.grant_api("/vms", ["VM.Console"])  # as `cairn pve bootstrap` now grants
        cluster.add_gui_vm(VMID, "pve2", running=True)
        await mark(cluster, VMID, "pve2")  # cairn's: the console opens only those
        yield cluster


def api_env(sim: SimCluster) -> dict[str, str]:
    return {**sim.env(include_path=False), "PVE_DRIVER": "api"}


def pve_calls(sim: SimCluster) -> list[str]:
    assert sim.pveproxy is not None
    return [f"{e.method} {e.path}" for e in sim.pveproxy.journal]


async def read_until(ws: aiohttp.ClientWebSocketResponse, want: bytes) -> bytes:
    seen = b""
    while want not in seen:
        msg = await ws.receive(timeout=10)
        assert msg.type == aiohttp.WSMsgType.BINARY, (msg.type, seen)
        seen += msg.data
    return seen


async def open_ws(
    http: aiohttp.ClientSession, base: str, **headers: str
) -> aiohttp.ClientWebSocketResponse:
    headers.setdefault("Origin", base)
    return await http.ws_connect(f"{base}/console/vm/{VMID}/serial", headers=headers)


async def termproxy_ended(sim: SimCluster) -> Exchange:
    """The page's close ended PVE's termproxy task too, and well; its journal entry."""
    termproxy = next(e for e in sim.pveproxy.journal if e.path.endswith("/termproxy"))
    client = client_for(sim)
    try:
        assert (await wait_task(client, termproxy.data["upid"])).exitstatus == "OK"
    finally:
        await client.close()
    return termproxy


async def test_typing_reaches_the_vm_and_its_echo_comes_back(
    serve: Serve, sim: SimCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    base = await serve("status", **api_env(sim))
    async with aiohttp.ClientSession() as http:
        ws = await open_ws(http, base)
        assert b"t150 login: " in await read_until(ws, b"login: ")
        await ws.send_bytes(b"debian\r")
        await read_until(ws, b"debian@t150:~$ ")
        await ws.send_str(json.dumps({"resize": [90, 20]}))
        await ws.send_str("not json")  # ignored, not forwarded
        await ws.send_bytes(b"echo hello from the page\r")
        assert b"\r\nhello from the page\r\n" in await read_until(ws, b"$ ")
        await ws.send_bytes(b"stty size\r")
        assert b"20 90" in await read_until(ws, b"$ ")
        await ws.close()
    # The browser's close ended PVE's termproxy task too.
    termproxy = await termproxy_ended(sim)
    # Neither the ticket nor the API token is in any log line.
    secret = api_env(sim)["PVE_API_TOKEN"].rsplit("=", 1)[1]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "serial console of VM 150 on pve2 opened by local" in text
    assert termproxy.data["ticket"] not in text and secret not in text
    assert termproxy.data["ticket"].split("::")[1] not in text


async def test_cross_site_and_rebound_upgrades_never_reach_pve(
    serve: Serve, sim: SimCluster
) -> None:
    base = await serve("status", **api_env(sim))
    port = base.rsplit(":", 1)[1]
    before = pve_calls(sim)
    attacks = [
        {"Origin": "https://evil.example"},  # a page elsewhere, the user's cookie along
        {"Origin": f"http://localhost:{int(port) + 1}"},  # another port is another origin
        {"Origin": "null"},
        {"Host": f"rebind.evil.example:{port}", "Origin": f"http://rebind.evil.example:{port}"},
    ]
    async with aiohttp.ClientSession() as http:
        for headers in attacks:
            with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
                await open_ws(http, base, **headers)
            assert caught.value.status == 403, headers
        # No Origin at all (not a browser, or a stripped one): refused too.
        async with http.get(
            f"{base}/console/vm/{VMID}/serial",
            headers=UPGRADE,
        ) as resp:
            assert resp.status == 403 and "without Origin" in await resp.text()
    assert pve_calls(sim) == before


async def test_allow_ips_refuses_before_pve(serve: Serve, sim: SimCluster) -> None:
    base = await serve("status", **api_env(sim), ALLOW_IPS="10.9.9.9")
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
            await open_ws(http, base)
    assert caught.value.status == 403
    assert not any("termproxy" in c for c in pve_calls(sim))


async def test_only_under_the_api_driver(serve: Serve, sim: SimCluster) -> None:
    env = {**api_env(sim), "PVE_DRIVER": "cli"}
    base = await serve("status", **env)
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
            await open_ws(http, base)
        assert caught.value.status == 409
        async with http.get(f"{base}/console/vm/{VMID}/serial") as resp:
            assert resp.status == 400 and "websocket" in await resp.text()
    base = await serve("status", **env)
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            f"{base}/console/vm/{VMID}/serial",
            headers={
                "Upgrade": "websocket",
                "Connection": "Upgrade",
                "Origin": base,
                "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            },
        ) as resp,
    ):
        assert resp.status == 409
        assert "needs the Proxmox API driver (PVE_DRIVER=api" in await resp.text()


async def test_a_vm_not_in_the_cluster_and_a_token_without_vm_console(
    serve: Serve, sim: SimCluster
) -> None:
    base = await serve("status", **api_env(sim))
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
            await http.ws_connect(f"{base}/console/vm/151/serial", headers={"Origin": base})
        assert caught.value.status == 404
        sim.revoke_api("/vms", ["VM.Console"])
        sim.revoke_api(f"/vms/{VMID}", ["VM.Console"])  # the bootstrap grants it on cairn's ids
        async with http.get(
            f"{base}/console/vm/{VMID}/serial",
            headers={**UPGRADE, "Origin": base},
        ) as resp:
            text = await resp.text()
            assert resp.status == 403 and "VM.Console" in text and "cairn pve bootstrap" in text


async def test_an_oversized_message_ends_the_session(serve: Serve, sim: SimCluster) -> None:
    base = await serve("status", **api_env(sim))
    async with aiohttp.ClientSession() as http:
        ws = await open_ws(http, base)
        await read_until(ws, b"login: ")
        await ws.send_bytes(b"x" * (17 * 1024))
        msg = await ws.receive(timeout=10)
        assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        assert ws.close_code == 1009  # message too big
    await termproxy_ended(sim)


async def test_roles_once_tokens_exist(serve: Serve, sim: SimCluster, runtime: Runtime) -> None:
    path = runtime.data_dir / "tokens.json"
    made = {role: create(path, role.label, role) for role in Role}
    base = await serve("status", **api_env(sim))
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
            await open_ws(http, base)
        assert caught.value.status == 401
        with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
            await open_ws(http, base, Authorization=f"Bearer {made[Role.VIEWER]}")
        assert caught.value.status == 403
        assert not any("termproxy" in c for c in pve_calls(sim))
        for role in (Role.OPERATOR, Role.ADMIN):
            ws = await open_ws(http, base, Authorization=f"Bearer {made[role]}")
            await read_until(ws, b"login: ")
            await ws.close()


async def test_only_a_get_upgrades_whatever_the_role(
    serve: Serve, sim: SimCluster, runtime: Runtime
) -> None:
    """aiohttp routes HEAD to a GET handler and a websocket upgrade does not look at the
    method: a viewer's HEAD upgrade reached the serial line. A viewer's HEAD is the operator's
    route (403); no other method than GET upgrades, for any role (405), and PVE hears nothing."""
    path = runtime.data_dir / "tokens.json"
    made = {role: create(path, role.label, role) for role in Role}
    base = await serve("status", **api_env(sim))
    url = f"{base}/console/vm/{VMID}/serial"
    async with aiohttp.ClientSession() as http:
        viewer = {**UPGRADE, "Origin": base, "Authorization": f"Bearer {made[Role.VIEWER]}"}
        async with http.head(url, headers=viewer) as resp:
            assert resp.status == 403
        async with http.get(url, headers=viewer) as resp:
            assert resp.status == 403
            assert "token 'viewer' has role viewer; this route needs operator" in await resp.text()
        for role in (Role.OPERATOR, Role.ADMIN):
            headers = {**UPGRADE, "Origin": base, "Authorization": f"Bearer {made[role]}"}
            for method in ("HEAD", "POST", "PUT", "OPTIONS"):
                # A method that changes things is an admin's: the operator's is refused first.
                admins = role is Role.OPERATOR and method in ("POST", "PUT")
                async with http.request(method, url, headers=headers) as resp:
                    assert resp.status == (403 if admins else 405), (role, method)
                    assert "Sec-WebSocket-Accept" not in resp.headers
    assert not any("termproxy" in c for c in pve_calls(sim))


async def test_the_page_is_told_whether_it_may_offer_one(serve: Serve, sim: SimCluster) -> None:
    async with aiohttp.ClientSession() as http:
        base = await serve("status", **api_env(sim))
        async with http.get(f"{base}/console/serial") as resp:
            assert await resp.json() == {"available": True, "why": None}
        base = await serve("status", **{**api_env(sim), "PVE_DRIVER": "cli"})
        async with http.get(f"{base}/console/serial") as resp:
            body = await resp.json()
    assert body["available"] is False and "PVE_DRIVER=api" in body["why"]


async def closed_with(ws: aiohttp.ClientWebSocketResponse) -> tuple[bytes, int | None, str]:
    """What the terminal got until the console closed it, the close code and its reason;
    fails if that takes longer than the docs promise (5 s)."""
    seen = b""
    async with asyncio.timeout(5):
        while True:
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.BINARY:
                seen += msg.data
                continue
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), msg
            return seen, ws.close_code, str(msg.extra or "")


async def test_revoking_the_token_ends_the_serial_console(
    serve: Serve, sim: SimCluster, runtime: Runtime
) -> None:
    path = runtime.data_dir / "tokens.json"
    made = {role: create(path, role.label, role) for role in Role}
    base = await serve("status", **api_env(sim))
    async with aiohttp.ClientSession() as http:
        ws = await open_ws(http, base, Authorization=f"Bearer {made[Role.OPERATOR]}")
        other = await open_ws(http, base, Authorization=f"Bearer {made[Role.ADMIN]}")
        await read_until(ws, b"login: ")
        await read_until(other, b"login: ")
        assert revoke(path, "operator")
        seen, code, reason = await closed_with(ws)
        assert b"[cairn: token 'operator' was revoked: the serial console ends here]" in seen
        assert (code, reason) == (1008, "token 'operator' was revoked")
        # Another token's console goes on.
        await other.send_bytes(b"debian\r")
        await read_until(other, b"$ ")
        await other.close()


async def test_signing_out_ends_the_serial_console(
    serve: Serve, sim: SimCluster, runtime: Runtime
) -> None:
    token = create(runtime.data_dir / "tokens.json", "ops", Role.OPERATOR)
    base = await serve("status", **api_env(sim))
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.post(
            f"{base}/console/login", data={"token": token}, allow_redirects=False
        ) as resp:
            assert resp.status == 303
        ws = await open_ws(http, base)
        await read_until(ws, b"login: ")
        async with http.post(f"{base}/console/logout", allow_redirects=False) as resp:
            assert resp.status == 303
        seen, code, reason = await closed_with(ws)
        said = "the console session of 'ops' ended (signed out, or expired)"
        assert f"[cairn: {said}: the serial console ends here]".encode() in seen
        assert (code, reason) == (1008, said)


async def refusal(http: aiohttp.ClientSession, base: str, vmid: int) -> tuple[int, str]:
    async with http.get(
        f"{base}/console/vm/{vmid}/serial", headers={**UPGRADE, "Origin": base}
    ) as resp:
        return resp.status, await resp.text()


async def test_a_vm_cairn_did_not_create_is_refused(serve: Serve, sim: SimCluster) -> None:
    """The console's token sees every VM of the cluster; a serial line is usually a login or a
    root prompt. A VM without cairn's mark, or outside cairn's ids, is refused before any
    termproxy is asked for, saying why."""
    sim.add_gui_vm(160, "pve1", running=True, name="payroll")  # someone else's, in the range
    sim.add_gui_vm(300, "pve3", running=True)  # outside cairn's ids
    base = await serve("status", **api_env(sim), ASSIGN_IP_START="100", ASSIGN_IP_END="199")
    before = pve_calls(sim)
    async with aiohttp.ClientSession() as http:
        assert await refusal(http, base, 160) == (
            403,
            "VM 160 (payroll) on node pve1 was not created by cairn (no 'created by cairn, "
            "install task …' line in its description): the serial console opens only VMs cairn "
            "created (VM_CONSOLE_FOREIGN=1 opens any)",
        )
        assert await refusal(http, base, 300) == (
            403,
            "VM 300 is outside cairn's VM ids (100-199, ASSIGN_IP_START..ASSIGN_IP_END): the "
            "serial console opens only VMs cairn created (VM_CONSOLE_FOREIGN=1 opens any)",
        )
    calls = pve_calls(sim)[len(before) :]
    assert not any("termproxy" in c or "vncwebsocket" in c for c in calls), calls
    assert not any("/300" in c for c in calls), calls  # outside the range: PVE never asked


async def test_vm_console_foreign_opens_any_vm(serve: Serve, sim: SimCluster) -> None:
    sim.add_gui_vm(300, "pve3", running=True)
    base = await serve("status", **api_env(sim), VM_CONSOLE_FOREIGN="1")
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"{base}/console/vm/300/serial", headers={"Origin": base})
        assert b"login: " in await read_until(ws, b"login: ")
        await ws.close()
    with pytest.raises(ConfigError, match="VM_CONSOLE_FOREIGN"):
        await serve("status", **api_env(sim), VM_CONSOLE_FOREIGN="maybe")


async def test_the_bootstrapped_token_opens_only_cairns_ids(serve: Serve, sim: SimCluster) -> None:
    """Without a pool, `cairn pve bootstrap` grants VM.Console on cairn's ids alone: even with
    the console's own check off, Proxmox refuses the token any other VM's serial line."""
    sim.revoke_api("/vms", ["VM.Console"])  # what the bootstrap grants is left
    sim.add_gui_vm(300, "pve3", running=True)
    base = await serve("status", **api_env(sim), VM_CONSOLE_FOREIGN="1")
    async with aiohttp.ClientSession() as http:
        status, text = await refusal(http, base, 300)
        assert status == 403 and "Proxmox refused the console of VM 300" in text
        assert "VM.Console" in text
        ws = await open_ws(http, base)
        await read_until(ws, b"login: ")
        await ws.close()
