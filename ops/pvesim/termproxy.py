"""The termproxy of the simulated pveproxy: a VM's serial console behind a websocket.

What real PVE does (qemu-server `API2/Qemu.pm` `termproxy`/`vncwebsocket`, proxmox-termproxy,
pve-xtermjs):
- `POST /nodes/{node}/qemu/{vmid}/termproxy [serial=serial0..3]` needs `VM.Console` on
  `/vms/{vmid}`, loads the VM's config (a missing VM is the usual 500), makes a VNC ticket for
  (user, `/vms/{vmid}`), picks a free port 5900-5999, forks a `vncproxy` task running
  `termproxy PORT --path /vms/{vmid} --perm VM.Console -- qm terminal VMID -escape 0 [-iface
  serialN]` and answers `{user, ticket, port, upid}`.
- `GET …/vncwebsocket?port=&vncticket=` needs `VM.Console` too, verifies the ticket for the
  same user and path, and pveproxy upgrades the request to a websocket (subprotocol
  `binary`) whose bytes go to and from the termproxy's port.
- termproxy accepts one connection within 10 s, else its task ends. The connection's first
  line is `USER:TICKET\\n`, checked again (user, path, privilege); it answers `OK` and from then
  on the client sends `0:LEN:DATA` (LEN bytes typed), `1:COLS:ROWS:` (a resize) and `2` (a
  ping); the server sends the terminal's raw bytes. Messages may be split or joined across
  websocket frames: the stream, not the frame, carries them.
- `qm terminal` on a stopped VM prints `VM VMID not running` and ends, which ends the session
  (*derived*).

The VM behind it is simulated: a login prompt, then a shell that echoes what it is given and
answers `echo …` (enough to see typed keys come back).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time

import attrs

PORT_MIN = 5900
PORT_MAX = 5999
ACCEPT_TIMEOUT = 10.0  # termproxy's wait for its one connection
TICKET_LIFETIME = 7200  # PVE's tickets: 2 h
MAX_LEN = 64 * 1024  # the largest data message accepted (termproxy's buffer is smaller)


class ProtocolError(ValueError):
    """A message termproxy cannot read: it closes the connection."""


@attrs.frozen
class Data:
    data: bytes


@attrs.frozen
class Resize:
    cols: int
    rows: int


@attrs.frozen
class Ping:
    pass


Message = Data | Resize | Ping

_NUMBER = re.compile(rb"(\d{1,9}):")


def parse_auth(buf: bytes) -> tuple[str, str, bytes] | None:
    """The first line `USER:TICKET\\n`: (user, ticket, the bytes after it), or None while the
    line is incomplete. The user may hold `!` (a token) but not `:`; the ticket holds `:`."""
    line, sep, rest = buf.partition(b"\n")
    if not sep:
        if len(buf) > 1024:
            raise ProtocolError("authentication line too long")
        return None
    user, colon, ticket = line.decode("utf-8", "replace").partition(":")
    if not colon or not user or not ticket:
        raise ProtocolError("malformed authentication line")
    return user, ticket, rest


def parse_messages(buf: bytes) -> tuple[list[Message], bytes]:
    """Every complete message at the start of `buf`, and the incomplete rest."""
    out: list[Message] = []
    pos = 0
    while pos < len(buf):
        kind = buf[pos : pos + 1]
        if kind == b"2":
            out.append(Ping())
            pos += 1
            continue
        if kind not in (b"0", b"1"):
            raise ProtocolError(f"unknown message type {kind!r}")
        if len(buf) < pos + 2:
            break
        if buf[pos + 1 : pos + 2] != b":":
            raise ProtocolError("expected ':' after the message type")
        first = _NUMBER.match(buf, pos + 2)
        if first is None:
            if _incomplete_number(buf, pos + 2):
                break
            raise ProtocolError("malformed number")
        if kind == b"0":
            length = int(first.group(1))
            if length > MAX_LEN:
                raise ProtocolError(f"data message of {length} bytes (at most {MAX_LEN})")
            start = first.end()
            if len(buf) < start + length:
                break
            out.append(Data(bytes(buf[start : start + length])))
            pos = start + length
            continue
        second = _NUMBER.match(buf, first.end())
        if second is None:
            if _incomplete_number(buf, first.end()):
                break
            raise ProtocolError("malformed resize")
        out.append(Resize(int(first.group(1)), int(second.group(1))))
        pos = second.end()
    return out, bytes(buf[pos:])


def _incomplete_number(buf: bytes, start: int) -> bool:
    tail = buf[start:]
    return (len(tail) < 10 and tail.isdigit()) or tail == b""


# --- tickets -----------------------------------------------------------------------------------


def assemble_ticket(secret: bytes, user: str, path: str, now: float | None = None) -> str:
    """`PVEVNC:<hex time>::<signature>`, signed over user and path (AC assemble_vnc_ticket;
    PVE signs with the cluster's RSA key, an HMAC stands in for it)."""
    stamp = f"{int(time.time() if now is None else now):08X}"
    sig = hmac.new(secret, f"PVEVNC:{stamp}:{user}:{path}".encode(), hashlib.sha256).digest()
    return f"PVEVNC:{stamp}::{base64.b64encode(sig).decode()}"


def verify_ticket(
    secret: bytes, ticket: str, user: str, path: str, now: float | None = None
) -> bool:
    match = re.fullmatch(r"PVEVNC:([0-9A-F]{8})::([A-Za-z0-9+/=]{1,100})", ticket)
    if match is None:
        return False
    age = (time.time() if now is None else now) - int(match.group(1), 16)
    if not -300 <= age <= TICKET_LIFETIME:
        return False
    expected = assemble_ticket(secret, user, path, int(match.group(1), 16))
    return hmac.compare_digest(expected.encode(), ticket.encode())


# --- the simulated serial console ----------------------------------------------------------------


@attrs.define
class SerialConsole:
    """A serial login on ttyS0, then a shell: keys are echoed, Enter runs the line."""

    hostname: str
    user: str = ""
    line: bytearray = attrs.field(factory=bytearray)
    cols: int = 80
    rows: int = 24

    def banner(self) -> bytes:
        return (
            f"\r\nDebian GNU/Linux 12 {self.hostname} ttyS0\r\n\r\n{self.hostname} login: "
        ).encode()

    def prompt(self) -> bytes:
        return f"{self.user}@{self.hostname}:~$ ".encode()

    def resize(self, cols: int, rows: int) -> None:
        self.cols, self.rows = cols, rows

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        for byte in data:
            if byte in (13, 10):
                out += b"\r\n" + self._enter(self.line.decode("utf-8", "replace"))
                self.line.clear()
            elif byte in (8, 127):
                if self.line:
                    self.line.pop()
                    out += b"\b \b"
            elif byte == 3:  # Ctrl-C
                self.line.clear()
                out += b"^C\r\n" + (self.prompt() if self.user else b"login: ")
            elif byte >= 32 or byte == 9:
                self.line.append(byte)
                out.append(byte)
        return bytes(out)

    def _enter(self, line: str) -> bytes:
        if not self.user:
            if not line.strip():
                return f"{self.hostname} login: ".encode()
            self.user = line.strip()
            return f"Linux {self.hostname} 6.1.0-28-amd64 x86_64\r\n".encode() + self.prompt()
        words = line.strip().split(maxsplit=1)
        if not words:
            reply = ""
        elif words[0] == "echo":
            reply = (words[1] if len(words) > 1 else "") + "\r\n"
        elif words[0] == "stty" and line.strip() == "stty size":
            reply = f"{self.rows} {self.cols}\r\n"
        elif words[0] in ("exit", "logout"):
            self.user = ""
            return f"\r\n{self.hostname} login: ".encode()
        else:
            reply = f"-bash: {words[0]}: command not found\r\n"
        return reply.encode() + self.prompt()
