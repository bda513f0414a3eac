"""A VM's serial console in the browser: ``GET /console/vm/<id>/serial`` (a websocket), and
``GET /console/serial``, ``{"available": bool, "why": str | None}``, which tells the VM page
whether to offer it (the page's terminal: ``terminal/entry.js``, ``static/pages/serial.js``).

The console relays between the browser and PVE's ``vncwebsocket`` (actors/vm/pveapi/
termproxy.py), only under the API driver (``PVE_DRIVER=api``; 409 otherwise, with why). The
console, not the browser, asks PVE for the termproxy and answers its ticket: the ticket and
the API token never reach the page or a log line.

Guards, all before PVE is asked anything:
- the Host allow-list, ``ALLOW_IPS`` and (once tokens exist) the role: operator or admin
  (``gateway/http/roles.py``), applied by the middlewares in front of every console route;
- the VM is cairn's: its id in cairn's range (``ASSIGN_IP_START``..``ASSIGN_IP_END``), checked
  before PVE is asked anything, and cairn's mark in its description (``actors/vm/
  ownership.py``), read from its config before the termproxy is asked for. A serial line is
  usually a login or a root prompt: the console opens it for the VMs cairn made, not for
  every VM its API token can see. ``VM_CONSOLE_FOREIGN=1`` lets it open any;
- the ``Origin`` of the upgrade: a websocket is a GET, which the cross-site guard lets by, and
  browsers do not hold websockets to the same-origin policy, so a page elsewhere could open
  one with the user's cookie (cross-site websocket hijacking). The upgrade must carry an
  ``Origin`` whose host and port are the request's ``Host``.

Between the two sides: a binary message from the browser is typed bytes (framed here as
termproxy's ``0:LEN:DATA``); a text message is ``{"resize": [cols, rows]}``. What PVE's
terminal sends is passed on as binary messages. A browser message over ``MAX_MESSAGE`` bytes
ends the session; either side closing closes the other. Revoking the token that opened it, or
signing its console session out, ends it within seconds: the terminal is told why, and the
websocket closes with 1008 and that reason (``gateway/http/revocation.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Mapping

import aiohttp
from aiohttp import web

from actors.config import env_bool
from actors.vm.ownership import MARK_PREFIX, marks
from actors.vm.pveapi import errors
from actors.vm.pveapi import termproxy as term
from actors.vm.pveapi.client import PveClient
from actors.vm.pveapi.wire import normalize_fingerprint, parse_token
from actors.vm.settings import SettingsError, VmSettings, load_settings
from gateway.http import revocation
from gateway.http.crosssite import same_origin
from gateway.http.identity import IDENTITY

log = logging.getLogger(__name__)

ROUTE = "/console/vm/{vmid}/serial"
# Whether this console can open one at all (the VM page shows its button only then); a read,
# so a viewer may ask: the page hides the button from roles below operator itself.
AVAILABLE = "/console/serial"
MAX_MESSAGE = 16 * 1024  # a paste of 16 KiB at once is plenty for a serial line
UPSTREAM_MAX = 1 << 20
CLOSE_REASON_MAX = 123  # a close frame's reason, in bytes (RFC 6455)
_VMID = re.compile(r"[1-9][0-9]{2,8}")


def origin_refusal(headers: Mapping[str, str], host: str) -> str | None:
    """Why this upgrade's Origin is not the console's own, or None when it is."""
    origin = headers.get("Origin")
    if not origin:
        return "a websocket upgrade without Origin"
    if not same_origin(origin, host):
        return f"Origin: {origin[:200]}, Host: {host[:200]}"
    return None


def parse_control(text: str) -> tuple[int, int] | None:
    """``{"resize": [cols, rows]}`` from the page, sane sizes only."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    size = value.get("resize") if isinstance(value, dict) else None
    if (
        isinstance(size, list)
        and len(size) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 1000 for n in size)
    ):
        return size[0], size[1]
    return None


FOREIGN = "VM_CONSOLE_FOREIGN"
ONLY_OURS = f"the serial console opens only VMs cairn created ({FOREIGN}=1 opens any)"


def outside_range(vmid: int, settings: VmSettings) -> str | None:
    """Why ``vmid`` is none of cairn's ids, or None when it is one."""
    if vmid in settings.id_range:
        return None
    return (
        f"VM {vmid} is outside cairn's VM ids ({settings.ip_start}-{settings.ip_end}, "
        f"ASSIGN_IP_START..ASSIGN_IP_END): {ONLY_OURS}"
    )


def unmarked(vmid: int, node: str, config: Mapping[str, object]) -> str | None:
    """Why the VM of this config is not cairn's, or None when it carries cairn's mark."""
    text = {k: str(v) for k, v in config.items()}
    if marks(text):
        return None
    name = text.get("name") or str(vmid)
    return (
        f"VM {vmid} ({name}) on node {node} was not created by cairn (no '{MARK_PREFIX}…' "
        f"line in its description): {ONLY_OURS}"
    )


NEEDS_API = (
    "the serial console needs the Proxmox API driver (PVE_DRIVER=api with "
    "PVE_API_URL and PVE_API_TOKEN); this cairn drives Proxmox with qm over SSH"
)


def unavailable(env: Mapping[str, str]) -> str | None:
    """Why this console cannot open a serial console, or None when it can."""
    try:
        settings = load_settings(env)
    except SettingsError as exc:
        return f"the VM settings are not usable here: {exc}"
    return NEEDS_API if settings.driver != "api" or settings.api is None else None


class SerialConsole:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        # Read at start: a bad value stops start-up naming the variable.
        self.foreign = env_bool(env, FOREIGN)

    def _client(self) -> tuple[PveClient | None, VmSettings | None, str]:
        try:
            settings = load_settings(self.env)
        except SettingsError as exc:
            return None, None, f"the VM settings are not usable here: {exc}"
        api = settings.api
        if settings.driver != "api" or api is None:
            return None, settings, NEEDS_API
        fingerprint = normalize_fingerprint(api.fingerprint) if api.fingerprint else None
        client = PveClient(
            api.url,
            parse_token(api.token),
            fingerprint=fingerprint,
            ca_file=api.ca_file,
            timeout=api.timeout,
        )
        return client, settings, ""

    async def availability(self, _: web.Request) -> web.Response:
        why = unavailable(self.env)
        return web.json_response({"available": why is None, "why": why})

    async def handle(self, request: web.Request) -> web.StreamResponse:
        vmid_text = request.match_info["vmid"]
        if not _VMID.fullmatch(vmid_text):
            return web.Response(status=404, text="no such VM id")
        vmid = int(vmid_text)
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return web.Response(status=400, text="this route is a websocket (the VM page opens it)")
        why = origin_refusal(request.headers, request.host)
        if why is not None:
            log.warning("console: serial console of VM %d refused: cross-site (%s)", vmid, why)
            return web.Response(status=403, text=f"cross-site websocket refused ({why})")
        client, settings, why = self._client()
        if client is None:
            return web.Response(status=409, text=why)
        assert settings is not None
        if not self.foreign and (why := outside_range(vmid, settings)) is not None:
            await client.close()
            log.warning("console: serial console refused: %s", why)
            return web.Response(status=403, text=why)
        try:
            return await self._serve(request, client, vmid)
        finally:
            await client.close()

    async def _serve(
        self, request: web.Request, client: PveClient, vmid: int
    ) -> web.StreamResponse:
        who = request.get(IDENTITY)
        name = who.name if who is not None else "local"
        try:
            found = await client.get("/cluster/resources", {"type": "vm"})
            node = next(
                (
                    str(r["node"])
                    for r in found
                    if r.get("vmid") == vmid and r.get("type") == "qemu"
                ),
                None,
            )
            if node is None:
                return web.Response(status=404, text=f"VM {vmid} is not in the cluster")
            if not self.foreign:
                config = await client.get(f"/nodes/{node}/qemu/{vmid}/config")
                why = unmarked(vmid, node, config if isinstance(config, dict) else {})
                if why is not None:
                    log.warning("console: serial console refused: %s", why)
                    return web.Response(status=403, text=why)
            session = await term.open_session(client, node, vmid)
            upstream, first = await term.connect(client, session, max_msg_size=UPSTREAM_MAX)
        except errors.PermissionDenied as exc:
            return web.Response(
                status=403,
                text=f"Proxmox refused the console of VM {vmid}: {exc.text} "
                "(the token needs VM.Console: cairn pve bootstrap)",
            )
        except (errors.ApiError, term.HandshakeRefused, aiohttp.ClientError) as exc:
            return web.Response(status=502, text=f"Proxmox's console of VM {vmid}: {exc}")
        browser = web.WebSocketResponse(max_msg_size=MAX_MESSAGE, heartbeat=30)
        try:
            await browser.prepare(request)
        except ConnectionResetError:
            # The page went away while PVE was asked (closed, or the terminal closed at once):
            # nothing to answer, PVE's session ends here.
            await upstream.close()
            log.info("console: serial console of VM %d: the page left before it opened", vmid)
            return web.Response(status=499, text="the page left before its serial console opened")
        try:
            log.info("console: serial console of VM %d on %s opened by %s", vmid, node, name)
            if first:
                await browser.send_bytes(first)
            lapsed = await revocation.until_lapsed(request, self._relay(browser, upstream))
            if lapsed:
                # The terminal shows why it stopped; the close frame says it to a program.
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await browser.send_bytes(
                        f"\r\n[cairn: {lapsed}: the serial console ends here]\r\n".encode()
                    )
                await browser.close(
                    code=aiohttp.WSCloseCode.POLICY_VIOLATION,
                    message=lapsed.encode()[:CLOSE_REASON_MAX],
                )
        finally:
            await upstream.close()
            await browser.close()
            log.info("console: serial console of VM %d closed", vmid)
        return browser

    @staticmethod
    async def _relay(
        browser: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse
    ) -> None:
        async def down() -> None:
            async for msg in upstream:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    await browser.send_bytes(msg.data)
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    await browser.send_bytes(msg.data.encode())
                else:
                    break

        async def up() -> None:
            async for msg in browser:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    await upstream.send_bytes(term.data_frame(msg.data))
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    size = parse_control(msg.data)
                    if size is not None:
                        await upstream.send_bytes(term.resize_frame(*size))
                else:
                    break  # closed, or a message over MAX_MESSAGE (aiohttp closes with 1009)

        tasks = [asyncio.ensure_future(down()), asyncio.ensure_future(up())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


def add_routes(app: web.Application, env: Mapping[str, str]) -> None:
    console = SerialConsole(env)
    # A websocket opens with GET only: without the HEAD aiohttp adds to every GET route, any
    # other method gets the router's 405 before the handler could upgrade anything.
    app.router.add_get(ROUTE, console.handle, allow_head=False)
    app.router.add_get(AVAILABLE, console.availability)
