"""A VM's serial console over PVE's API: `termproxy`, then `vncwebsocket` (docs/vm.md).

`open_session` asks pveproxy for a termproxy on the VM's node (`VM.Console` on `/vms/<id>`);
`connect` opens the websocket to it and does termproxy's handshake: the first message is
`USER:TICKET\\n`, answered `OK`. From then on what is sent must be framed: `data_frame` for
typed bytes (`0:LEN:DATA`), `resize_frame` (`1:COLS:ROWS:`), `PING` (`2`); what comes back
is the terminal's raw bytes. The ticket is a credential: it is never logged or shown.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import attrs

from actors.vm.pveapi.client import PveClient

PING = b"2"
SERIALS = ("serial0", "serial1", "serial2", "serial3")


class HandshakeRefused(Exception):
    """termproxy closed the connection instead of answering `OK` to the ticket."""


@attrs.frozen
class TermSession:
    """What `POST …/termproxy` answers: the termproxy's port, and who may use it."""

    node: str
    vmid: int
    user: str
    port: int
    upid: str
    ticket: str = attrs.field(repr=False)


def data_frame(data: bytes) -> bytes:
    return b"0:%d:" % len(data) + data


def resize_frame(cols: int, rows: int) -> bytes:
    return b"1:%d:%d:" % (cols, rows)


def auth_line(user: str, ticket: str) -> bytes:
    return f"{user}:{ticket}\n".encode()


def session_from(node: str, vmid: int, data: Any) -> TermSession:
    if not isinstance(data, dict):
        raise ValueError(f"termproxy answered {type(data).__name__}, not an object")
    return TermSession(
        node, vmid, str(data["user"]), int(data["port"]), str(data["upid"]), str(data["ticket"])
    )


async def open_session(
    client: PveClient, node: str, vmid: int, serial: str = "serial0"
) -> TermSession:
    if serial not in SERIALS:
        raise ValueError(f"serial must be one of {', '.join(SERIALS)}")
    data = await client.post(f"/nodes/{node}/qemu/{vmid}/termproxy", {"serial": serial})
    return session_from(node, vmid, data)


async def connect(
    client: PveClient, session: TermSession, *, max_msg_size: int = 1 << 20
) -> tuple[aiohttp.ClientWebSocketResponse, bytes]:
    """The websocket to the session's termproxy, past its handshake (ready for frames), and
    the terminal's first bytes if they came in the same frame as `OK` (a stream, not frames,
    carries them)."""
    ws = await client.websocket(
        f"/nodes/{session.node}/qemu/{session.vmid}/vncwebsocket",
        {"port": session.port, "vncticket": session.ticket},
        max_msg_size=max_msg_size,
    )
    await ws.send_bytes(auth_line(session.user, session.ticket))
    answer = await ws.receive()
    data = answer.data.encode() if answer.type == aiohttp.WSMsgType.TEXT else answer.data
    if answer.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT) or data[:2] != b"OK":
        await ws.close()
        raise HandshakeRefused(f"termproxy of VM {session.vmid} refused the ticket")
    return ws, bytes(data[2:])
