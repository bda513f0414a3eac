"""A VM's serial console over the API: the termproxy frame format (golden, both sides) and
the simulated pveproxy's `termproxy` + `vncwebsocket` driven by cairn's client over real
HTTPS/websocket on loopback: the handshake, the echo, the privilege, the ticket's scope."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from pvesim import termproxy as sim_term
from pvesim.cluster import SimCluster

from actors.vm.pveapi import errors
from actors.vm.pveapi import termproxy as term
from actors.vm.pveapi.client import PveClient
from actors.vm.pveapi.tasks import wait_task

# --- golden: the frame format -----------------------------------------------------------------


def test_cairn_frames_are_the_bytes_termproxy_reads() -> None:
    assert term.data_frame(b"ls -l\r") == b"0:6:ls -l\r"
    assert term.data_frame("é".encode()) == b"0:2:\xc3\xa9"  # LEN counts bytes
    assert term.data_frame(b"") == b"0:0:"
    assert term.resize_frame(120, 40) == b"1:120:40:"
    assert term.PING == b"2"
    assert term.auth_line("cairn@pve!driver", "PVEVNC:6745A0B1::c2ln") == (
        b"cairn@pve!driver:PVEVNC:6745A0B1::c2ln\n"
    )


def test_the_simulator_parses_joined_and_split_messages() -> None:
    joined = b"0:3:abc1:80:24:2" + b"0:4:a:b:"
    msgs, rest = sim_term.parse_messages(joined)
    assert msgs == [
        sim_term.Data(b"abc"),
        sim_term.Resize(80, 24),
        sim_term.Ping(),
        sim_term.Data(b"a:b:"),
    ]
    assert rest == b""
    # Split anywhere, the rest waits for the next frame.
    for cut in range(1, len(joined)):
        first, rest = sim_term.parse_messages(joined[:cut])
        second, left = sim_term.parse_messages(rest + joined[cut:])
        assert first + second == msgs and left == b""


@pytest.mark.parametrize(
    "bad",
    [b"3", b"0x", b"0:a:", b"1:80:x", b"0:70000:", b"0:1234567890:"],
)
def test_the_simulator_refuses_what_termproxy_cannot_read(bad: bytes) -> None:
    with pytest.raises(sim_term.ProtocolError):
        sim_term.parse_messages(bad)


def test_the_auth_line() -> None:
    assert sim_term.parse_auth(b"cairn@pve!driver:PVEVNC:0A::x") is None  # incomplete
    assert sim_term.parse_auth(b"u@pve:PVEVNC:0A::x\n0:1:a") == ("u@pve", "PVEVNC:0A::x", b"0:1:a")
    with pytest.raises(sim_term.ProtocolError):
        sim_term.parse_auth(b"no-colon\n")
    with pytest.raises(sim_term.ProtocolError):
        sim_term.parse_auth(b"x" * 2000)


def test_tickets_are_bound_to_user_and_path() -> None:
    ticket = sim_term.assemble_ticket(b"k", "cairn@pve!driver", "/vms/100", now=1_700_000_000)
    assert ticket.startswith("PVEVNC:6553F100::")
    ok = sim_term.verify_ticket
    assert ok(b"k", ticket, "cairn@pve!driver", "/vms/100", now=1_700_000_100)
    assert not ok(b"k", ticket, "cairn@pve!driver", "/vms/101", now=1_700_000_100)
    assert not ok(b"k", ticket, "other@pve!x", "/vms/100", now=1_700_000_100)
    assert not ok(b"other", ticket, "cairn@pve!driver", "/vms/100", now=1_700_000_100)
    assert not ok(b"k", ticket, "cairn@pve!driver", "/vms/100", now=1_700_000_000 + 7201)


# --- the simulated pveproxy --------------------------------------------------------------------


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[SimCluster]:
    async with SimCluster(tmp_path / "pve", delay_scale=0, statd_lag=0) as cluster:
        cluster.grant_api("/vms", ["VM.Console"])
        yield cluster


async def read_until(ws: aiohttp.ClientWebSocketResponse, seen: bytes, want: bytes) -> bytes:
    while want not in seen:
        msg = await ws.receive(timeout=10)
        assert msg.type == aiohttp.WSMsgType.BINARY, (msg.type, seen)
        seen += msg.data
    return seen


async def test_a_serial_login_and_an_echo(sim: SimCluster, api: PveClient) -> None:
    sim.add_gui_vm(140, "pve2", running=True)
    session = await term.open_session(api, "pve2", 140)
    assert session.user == "cairn@pve!sim" and 5900 <= session.port <= 5999
    assert session.upid.startswith("UPID:pve2:") and ":vncproxy:140:cairn@pve!sim:" in session.upid
    assert session.ticket.startswith("PVEVNC:") and session.ticket not in repr(session)
    ws, first = await term.connect(api, session)
    try:
        seen = await read_until(ws, first, b"login: ")
        await ws.send_bytes(term.resize_frame(100, 30) + term.PING)
        await ws.send_bytes(term.data_frame(b"debian\r"))
        seen = await read_until(ws, b"", b"debian@t140:~$ ")
        # One message split over two frames, then two messages in one frame.
        frame = term.data_frame(b"echo hello cairn\r")
        await ws.send_bytes(frame[:5])
        await ws.send_bytes(frame[5:] + term.data_frame(b"stty size\r"))
        seen = await read_until(ws, b"", b"30 100")
        assert b"echo hello cairn\r\nhello cairn\r\n" in seen
    finally:
        await ws.close()
    outcome = await wait_task(api, session.upid)  # the task ends with the connection
    assert outcome.exitstatus == "OK"
    status = await api.get(f"/nodes/pve2/tasks/{session.upid}/status")
    assert (status["type"], status["status"]) == ("vncproxy", "stopped")


async def test_the_port_serves_one_connection(sim: SimCluster, api: PveClient) -> None:
    sim.add_gui_vm(141, "pve1", running=True)
    session = await term.open_session(api, "pve1", 141)
    ws, _ = await term.connect(api, session)
    try:
        with pytest.raises(term.HandshakeRefused):
            await term.connect(api, session)
    finally:
        await ws.close()


async def test_a_stopped_vm_says_so_and_closes(sim: SimCluster, api: PveClient) -> None:
    sim.add_gui_vm(142, "pve1", running=False)
    session = await term.open_session(api, "pve1", 142)
    ws, first = await term.connect(api, session)
    seen = first
    while True:
        msg = await ws.receive(timeout=10)
        if msg.type != aiohttp.WSMsgType.BINARY:
            break
        seen += msg.data
    assert seen == b"VM 142 not running\r\n" and ws.closed


async def test_without_vm_console_both_calls_are_refused(sim: SimCluster, api: PveClient) -> None:
    sim.add_gui_vm(143, "pve1", running=True)
    session = await term.open_session(api, "pve1", 143)
    sim.revoke_api("/vms", ["VM.Console"])
    sim.revoke_api("/vms/143", ["VM.Console"])  # the bootstrap grants it on cairn's ids
    with pytest.raises(errors.PermissionDenied) as caught:
        await term.open_session(api, "pve1", 143)
    assert "VM.Console" in caught.value.text and "/vms/143" in caught.value.text
    with pytest.raises(errors.PermissionDenied):
        await term.connect(api, session)


async def test_the_ticket_is_for_its_vm_and_its_user(sim: SimCluster, api: PveClient) -> None:
    sim.add_gui_vm(144, "pve1", running=True)
    sim.add_gui_vm(145, "pve1", running=True)
    mine = await term.open_session(api, "pve1", 144)
    other = await term.open_session(api, "pve1", 145)
    # Another VM's ticket on this VM's websocket: refused before any upgrade.
    with pytest.raises(errors.AuthFailed):
        await term.connect(
            api, type(mine)("pve1", 144, mine.user, mine.port, mine.upid, other.ticket)
        )
    # A forged ticket in the first line, with a good one in the URL: termproxy closes.
    ws = await api.websocket(
        "/nodes/pve1/qemu/144/vncwebsocket", {"port": mine.port, "vncticket": mine.ticket}
    )
    await ws.send_bytes(term.auth_line(mine.user, mine.ticket[:-4] + "AAA="))
    msg = await ws.receive(timeout=10)
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED) and ws.closed
    # Out-of-range port and missing ticket: PVE's parameter errors.
    with pytest.raises(errors.ApiError) as caught:
        await api.get("/nodes/pve1/qemu/144/vncwebsocket", {"port": 6000, "vncticket": "x"})
    assert caught.value.status == 400
    with pytest.raises(errors.ApiError) as caught:
        await api.post("/nodes/pve1/qemu/144/termproxy", {"serial": "serial9"})
    assert caught.value.status == 400


async def test_a_plain_get_answers_the_port(sim: SimCluster, api: PveClient) -> None:
    sim.add_gui_vm(146, "pve3", running=True)
    session = await term.open_session(api, "pve3", 146)
    got = await api.get(
        "/nodes/pve3/qemu/146/vncwebsocket", {"port": session.port, "vncticket": session.ticket}
    )
    assert got == {"port": str(session.port)}
    with pytest.raises(errors.ApiError) as caught:
        await term.open_session(api, "pve3", 999)
    assert caught.value.status == 500 and "999.conf' does not exist" in caught.value.text
