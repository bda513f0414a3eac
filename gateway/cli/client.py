"""The HTTP client behind `cairn vm`, `cairn fn` and `cairn images`: where each service is, the
token that goes with a request, and what an answer means for the command's exit code.

Where: ``CAIRN_VM_URL``, ``CAIRN_FUNCTIONS_URL``, ``CAIRN_IMAGES_URL`` when set (a cairn
elsewhere, behind a reverse proxy); otherwise the address ``cairn up`` listens on, from the
same settings (``VM_HOST``/``VM_PORT``, ``FUNCTIONS_HOST``/``FUNCTIONS_PORT``,
``IMAGES_HOST``/``IMAGES_PORT``; a wildcard listen address is reached on loopback).

The token: ``--token-file FILE``, else ``CAIRN_TOKEN``, else ``CAIRN_TOKEN_FILE``; never an
argument of its own (a command line is visible to every local user). It goes along as
``Authorization: Bearer``, only to an address of this machine or over https, never through a
proxy of the environment (``http_proxy``) and never along a redirect; it is never printed.

Exit codes (:data:`EXIT`): 0 done, 1 the service refused or the task failed (its message on
stderr), 2 a usage error (a bad option, an unreadable file), 3 the service could not be reached
or is unavailable (connection refused, a time-out, 503: try again), 4 not allowed (401/403: no
token, an unknown or revoked one, a role too low, an address outside ALLOW_IPS), 130
interrupted (Ctrl-C; a VM task goes on in cairn, ``cairn vm task ID`` follows it again).
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import attrs

from actors.config import ConfigError, env_int, env_str

OK, REFUSED, USAGE, UNREACHABLE, DENIED, INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT = {
    OK: "done",
    REFUSED: "the service refused, or the task failed (its message on stderr)",
    USAGE: "usage error: a bad option or argument, an unreadable file",
    UNREACHABLE: "the service could not be reached or is unavailable (try again later)",
    DENIED: "not allowed: no token, an unknown or revoked one, or a role or address refused",
    INTERRUPTED: "interrupted (Ctrl-C); a VM task goes on in cairn",
}

# name: (variable prefix, default port, path prefix of its routes). The ports are those of
# gateway/apps/vm.py, functions.py and images.py (a test keeps them equal).
SERVICES: dict[str, tuple[str, int, str]] = {
    "vm": ("VM", 8100, "/api"),
    "functions": ("FUNCTIONS", 8200, ""),
    "images": ("IMAGES", 8300, ""),
}

TIMEOUT = 60.0  # seconds without a byte before a request gives up (streams: 15 s keep-alives)


class CliError(Exception):
    """A command cannot go on: ``code`` is its exit code, the message says why."""

    def __init__(self, code: int, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


@attrs.frozen
class Target:
    """One service as the command line reaches it."""

    service: str
    base: str  # scheme://host:port[/api], no trailing slash
    token: str | None = attrs.field(default=None, repr=False)
    timeout: float = TIMEOUT

    def url(self, path: str, query: Mapping[str, str] | None = None) -> str:
        url = self.base + path
        if query:
            url += "?" + "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in query.items())
        return url


def quote_path(path: str) -> str:
    """A user's path (a function's, an image's) as one piece of a URL path: ``?``, ``#``,
    ``%`` and spaces are sent as themselves, not as a query or fragment."""
    return quote(path.strip("/"), safe="/")


def service_base(env: Mapping[str, str], service: str) -> str:
    prefix, port, under = SERVICES[service]
    override = env_str(env, f"CAIRN_{prefix}_URL")
    if override is not None:
        parts = urlsplit(override)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"CAIRN_{prefix}_URL", "an http:// or https:// URL", override)
        return override.rstrip("/")
    host = env_str(env, f"{prefix}_HOST") or "127.0.0.1"
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    chosen = env_int(env, f"{prefix}_PORT", port, min=1, max=65535)
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{chosen}{under}"


def read_token(env: Mapping[str, str], token_file: str | None) -> str | None:
    """The token to send, or None. A named file that cannot be read is a usage error."""
    source = token_file
    if source is None:
        value = (env.get("CAIRN_TOKEN") or "").strip()
        if value:
            return _checked_token(value, "CAIRN_TOKEN")
        source = env_str(env, "CAIRN_TOKEN_FILE")
    if source is None:
        return None
    try:
        text = Path(source).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(USAGE, f"cannot read the token file {source}: {_why(exc)}") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise CliError(USAGE, f"the token file {source} is empty")
    return _checked_token(lines[0], f"the token file {source}")


def _checked_token(value: str, where: str) -> str:
    if any(ord(c) < 33 or ord(c) > 126 for c in value):
        raise CliError(USAGE, f"{where} holds no token: a token is one word of printable ASCII")
    return value


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return type(exc).__name__


def target(env: Mapping[str, str], service: str, token_file: str | None = None) -> Target:
    base = service_base(env, service)
    token = read_token(env, token_file)
    if token is not None and not _safe_for_token(base):
        raise CliError(
            USAGE,
            f"refusing to send the token over plain http to {urlsplit(base).hostname}: "
            f"use an https:// address in CAIRN_{SERVICES[service][0]}_URL",
        )
    return Target(service, base, token)


def _safe_for_token(base: str) -> bool:
    """https, or an address of this machine (loopback, or one of its own interfaces: a
    service listening on the LAN address of this host): plain http never leaves it."""
    parts = urlsplit(base)
    if parts.scheme == "https":
        return True
    host = parts.hostname or ""
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # a name: DNS may send it anywhere
    return ip.is_loopback or is_own_address(ip)


def is_own_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``ip`` is an address of this machine: only those can be bound to."""
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.bind((str(ip), 0))
    except OSError:
        return False
    return not ip.is_unspecified


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as it is: following it would carry the token elsewhere."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


# No proxy from the environment (the token and loopback traffic stay direct), no redirects.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


@attrs.frozen
class Answer:
    status: int
    content_type: str
    body: bytes

    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            raise CliError(
                REFUSED, f"the service answered {self.status} with a body that is not JSON"
            ) from None


@attrs.frozen
class Upload:
    """A multipart/form-data body with one file field."""

    field: str
    filename: str
    data: bytes

    def encode(self) -> tuple[bytes, str]:
        boundary = "cairn-" + os.urandom(12).hex()
        name = self.filename.replace("\\", "\\\\").replace('"', '\\"')
        head = (
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="{self.field}"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        body = head + self.data + f"\r\n--{boundary}--\r\n".encode()
        return body, f"multipart/form-data; boundary={boundary}"


def _request(
    t: Target, method: str, path: str, body: Any, query: Mapping[str, str] | None
) -> urllib.request.Request:
    headers = {"Accept": "application/json, text/plain, text/event-stream"}
    data: bytes | None = None
    if isinstance(body, Upload):
        data, headers["Content-Type"] = body.encode()
    elif body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if t.token is not None:
        headers["Authorization"] = f"Bearer {t.token}"
    return urllib.request.Request(t.url(path, query), data=data, method=method, headers=headers)


def _open(t: Target, req: urllib.request.Request) -> http.client.HTTPResponse:
    try:
        resp: http.client.HTTPResponse = _OPENER.open(req, timeout=t.timeout)
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:  # a redirect, not followed (_NoRedirect)
            where = exc.headers.get("Location", "?")
            message = f"the {t.service} service redirected to {where}; not followed"
            raise CliError(REFUSED, message, exc.code) from None
        raise refusal(t, exc.code, exc.headers.get("Content-Type", ""), exc.read()) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise unreachable(t, exc) from None
    return resp


def unreachable(t: Target, exc: BaseException) -> CliError:
    prefix = SERVICES[t.service][0]
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError | socket.timeout):
        why = f"no answer within {t.timeout:g} s"
    elif isinstance(reason, ConnectionRefusedError):
        why = "connection refused"
    elif isinstance(reason, OSError) and reason.strerror:
        why = reason.strerror.lower()
    else:
        why = str(reason) or type(reason).__name__
    return CliError(
        UNREACHABLE,
        f"cannot reach the {t.service} service at {t.base}: {why}; is cairn running "
        f"(cairn up)? Its address comes from {prefix}_HOST and {prefix}_PORT, or "
        f"CAIRN_{prefix}_URL",
    )


def error_text(content_type: str, body: bytes) -> str:
    """The message of an error answer: a JSON ``error`` or the plain text, on one line."""
    text = body.decode("utf-8", "replace").strip()
    if content_type.startswith("application/json"):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
            text = parsed["error"]
    return " ".join(text.split())[:2000]


def refusal(t: Target, status: int, content_type: str, body: bytes) -> CliError:
    message = error_text(content_type, body) or f"{t.service} service answered {status}"
    if status == 401:
        hint = (
            "set CAIRN_TOKEN, CAIRN_TOKEN_FILE or --token-file"
            if t.token is None
            else "the token sent was refused"
        )
        return CliError(DENIED, f"{message} [{hint}]", status)
    if status == 403:
        return CliError(DENIED, message, status)
    if status == 503:
        return CliError(UNREACHABLE, message, status)
    return CliError(REFUSED, message, status)


def call(
    t: Target,
    method: str,
    path: str,
    body: Any = None,
    query: Mapping[str, str] | None = None,
) -> Answer:
    """One request; a 2xx answer, or CliError with the exit code it means."""
    with _open(t, _request(t, method, path, body, query)) as resp:
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise unreachable(t, exc) from None
        return Answer(resp.status, resp.headers.get("Content-Type", ""), data)


@attrs.frozen
class Event:
    """One server-sent event: ``data`` parsed from JSON (None if it was not JSON)."""

    data: Any
    event: str | None = None
    id: str | None = None


def parse_sse(lines: Iterator[bytes]) -> Iterator[Event]:
    """The events of a text/event-stream, comments (keep-alives) skipped."""
    event: str | None = None
    ident: str | None = None
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line == "":
            if data:
                text = "\n".join(data)
                try:
                    parsed: Any = json.loads(text)
                except ValueError:
                    parsed = None
                yield Event(parsed, event, ident)
            event, ident, data = None, None, []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                data.append(value)
            elif name == "event":
                event = value
            elif name == "id":
                ident = value
    # A last event without its blank line was cut off with the connection: not yielded.


@attrs.frozen
class Stream:
    """An answer that is either a stream of events or a plain one (a text ``ok``)."""

    status: int
    headers: Mapping[str, str]
    events: Iterator[Event] | None
    plain: Answer | None


@contextlib.contextmanager
def stream(t: Target, method: str, path: str, body: Any = None) -> Iterator[Stream]:
    """A request whose answer may be an event stream (or a plain answer: a refusal the service
    makes before any stream, a text ``ok``). Reading the events raises CliError(UNREACHABLE)
    when the connection breaks."""
    with _open(t, _request(t, method, path, body, None)) as resp:
        content_type = resp.headers.get("Content-Type", "")
        if content_type.startswith("text/event-stream"):
            yield Stream(resp.status, dict(resp.headers), parse_sse(_lines(t, resp)), None)
        else:
            yield Stream(
                resp.status,
                dict(resp.headers),
                None,
                Answer(resp.status, content_type, resp.read()),
            )


def _lines(t: Target, resp: http.client.HTTPResponse) -> Iterator[bytes]:
    while True:
        try:
            line = resp.readline()
        except (OSError, http.client.HTTPException) as exc:
            raise unreachable(t, exc) from None
        if not line:
            return
        yield line
