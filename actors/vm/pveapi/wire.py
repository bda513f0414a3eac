"""What goes over the wire to pveproxy and back, as pure functions (pinned by golden tests).

Form encoding and 0/1 booleans, the token header, the certificate fingerprint, the `{data}`
envelope and its errors, the UPID, and the double-encoded `sshkeys` and tags: each is what
pveproxy itself accepts and answers, so a mistake here is a failed call, never a guess.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import attrs

# AC AccessControl.pm: token name [A-Za-z][A-Za-z0-9.\-_]+, user part [^\s:/]+, realm id.
_TOKEN = re.compile(
    r"^(?P<user>[^\s:/@!]+)@(?P<realm>[A-Za-z][A-Za-z0-9.\-_]+)!"
    r"(?P<name>[A-Za-z][A-Za-z0-9.\-_]+)=(?P<secret>\S+)$"
)


@attrs.frozen
class Token:
    user: str
    realm: str
    name: str
    secret: str = attrs.field(repr=False)

    @property
    def userid(self) -> str:
        return f"{self.user}@{self.realm}"

    @property
    def tokenid(self) -> str:
        return f"{self.userid}!{self.name}"

    def header(self) -> str:
        """The `Authorization` header value (the secret follows the last `=`)."""
        return f"PVEAPIToken={self.tokenid}={self.secret}"


def parse_token(text: str) -> Token:
    """`USER@REALM!TOKENID=SECRET`, as `pveum user token add` prints the parts."""
    match = _TOKEN.match(text.strip())
    if match is None:
        raise ValueError(
            "PVE_API_TOKEN must look like USER@REALM!TOKENID=SECRET "
            "(e.g. cairn@pve!driver=8c3f1f0e-...), got something else"
        )
    return Token(match["user"], match["realm"], match["name"], match["secret"])


def normalize_fingerprint(text: str) -> bytes:
    """A SHA-256 certificate fingerprint as PVE prints it (`AB:CD:...`) or bare hex -> digest."""
    digits = text.strip().replace(":", "").replace(" ", "").lower()
    if not re.fullmatch(r"[0-9a-f]{64}", digits):
        raise ValueError(
            "PVE_API_FINGERPRINT must be the SHA-256 fingerprint of pveproxy's certificate, "
            "64 hex digits with or without colons (`pvenode cert info` prints it)"
        )
    return bytes.fromhex(digits)


def format_fingerprint(digest: bytes) -> str:
    """`AB:CD:...`, uppercase with colons, the way `pvenode cert info` and GET /nodes show it."""
    return ":".join(f"{b:02X}" for b in digest)


def api_base(url: str) -> str:
    """`https://host:8006` (or with `/api2/json`) -> `https://host:8006/api2/json`."""
    parts = urlsplit(url.strip())
    if parts.scheme != "https" or not parts.hostname:
        raise ValueError(f"PVE_API_URL must be an https:// URL of pveproxy, got {url!r}")
    path = parts.path.rstrip("/")
    if path in ("", "/"):
        path = "/api2/json"
    elif path != "/api2/json":
        raise ValueError(f"PVE_API_URL must end at the host:port or at /api2/json, got {url!r}")
    port = f":{parts.port}" if parts.port else ""
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"https://{host}{port}{path}"


def form_value(value: Any) -> str | None:
    """One parameter as PVE parses it: booleans 0/1 (`true` is a type error), None = absent."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise TypeError(f"cannot send {type(value).__name__} as a PVE parameter")


def form_pairs(params: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The parameters in their given order, absent ones dropped, values as strings."""
    pairs: list[tuple[str, str]] = []
    for key, value in (params or {}).items():
        text = form_value(value)
        if text is not None:
            pairs.append((key, text))
    return pairs


def form_body(params: Mapping[str, Any] | None) -> str:
    """`application/x-www-form-urlencoded` body of a POST/PUT: pveproxy reads form fields (a
    JSON body loses its booleans and lists)."""
    return urlencode(form_pairs(params))


def path_url(base: str, path: str, query: Mapping[str, Any] | None = None) -> str:
    """The full, already-encoded URL: every path segment percent-encoded (a UPID has `:`, `!`,
    `@`), GET/DELETE parameters in the query (pveproxy answers a DELETE with a body 501)."""
    segments = [quote(seg, safe="") for seg in path.strip("/").split("/") if seg]
    url = base + "/" + "/".join(segments)
    pairs = form_pairs(query)
    return url + ("?" + urlencode(pairs) if pairs else "")


def sshkeys_param(keys: str) -> str:
    """`sshkeys`: format `urlencoded`, every byte outside `[-a-zA-Z0-9_.!~*'()]` as %XX (not
    `quote_plus`: a `+` would be taken as itself). The form encoding then encodes it again."""
    return quote(keys, safe="-_.!~*'()")


def tags_param(tags: Iterable[str]) -> str:
    """Tags as PVE stores them: lower-cased, deduplicated, sorted, joined by `;`."""
    return ";".join(sorted({t.strip().lower() for t in tags if t.strip()}))


_DESCRIPTION_ESCAPE = re.compile(r"[%:\x00-\x1f\x7f]")


def encode_text(text: str) -> str:
    """A description as `qm config` prints it (PVE::Tools::encode_text: `%`, `:` and control
    characters percent-escaped), so the CLI-shaped config and the API agree."""
    return _DESCRIPTION_ESCAPE.sub(lambda m: f"%{ord(m.group()):02X}", text)


def envelope_data(body: bytes) -> Any:
    """The `data` of a `{"data": ...}` success body (PVE answers `null` as `{"data":null}`)."""
    if not body.strip():
        return None
    decoded = json.loads(body)
    if not isinstance(decoded, dict) or "data" not in decoded:
        raise ValueError('pveproxy answered without the {"data": ...} envelope')
    return decoded["data"]


@attrs.frozen
class ErrorBody:
    errors: dict[str, str]
    message: str | None


def error_body(body: bytes) -> ErrorBody:
    """An error response's `errors` (400 only) and `message` (pve-http-server >= 5.2.0); 401
    bodies and older servers' bodies are empty or `{"data":null}`."""
    try:
        decoded = json.loads(body) if body.strip() else {}
    except ValueError:
        decoded = {}
    if not isinstance(decoded, dict):
        decoded = {}
    raw = decoded.get("errors") or {}
    errors = {str(k): str(v).strip() for k, v in raw.items()} if isinstance(raw, dict) else {}
    message = decoded.get("message")
    return ErrorBody(errors, str(message).strip() if message else None)


# PC UPID.pm: UPID:<node>:<pid 8 hex>:<pstart 8-9 hex>:<starttime 8 hex>:<type>:<id>:<user>:
_UPID = re.compile(
    r"^UPID:(?P<node>[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):(?P<pid>[0-9A-Fa-f]{8}):"
    r"(?P<pstart>[0-9A-Fa-f]{8,9}):(?P<starttime>[0-9A-Fa-f]{8}):(?P<type>[^:\s/]+):"
    r"(?P<id>[^:\s/]*):(?P<user>[^:\s/]+):$"
)


@attrs.frozen
class Upid:
    node: str
    pid: int
    pstart: int
    starttime: int
    type: str
    id: str
    user: str

    def __str__(self) -> str:
        return (
            f"UPID:{self.node}:{self.pid:08X}:{self.pstart:08X}:{self.starttime:08X}:"
            f"{self.type}:{self.id}:{self.user}:"
        )


def parse_upid(text: str) -> Upid:
    match = _UPID.match(text)
    if match is None:
        raise ValueError(f"not a task id (UPID): {text!r}")
    return Upid(
        match["node"],
        int(match["pid"], 16),
        int(match["pstart"], 16),
        int(match["starttime"], 16),
        match["type"],
        match["id"],
        match["user"],
    )


def looks_like_upid(value: Any) -> bool:
    return isinstance(value, str) and _UPID.match(value) is not None


_WARNINGS = re.compile(r"^WARNINGS: (\d+)$")


def task_ok(exitstatus: str) -> bool:
    """PC UPID.pm::status_is_error, negated: `OK` or `WARNINGS: n` is a success."""
    return exitstatus == "OK" or _WARNINGS.match(exitstatus) is not None


def task_warnings(exitstatus: str) -> int:
    match = _WARNINGS.match(exitstatus)
    return int(match.group(1)) if match else 0


# AC RPCEnvironment.pm::check: "Permission check failed (<path>, <priv>[|<priv>...])"
_PERM = re.compile(r"Permission check failed \((?P<path>/[^,)]*), (?P<priv>[^)]+)\)")


@attrs.frozen
class Missing:
    path: str
    privilege: str  # one name, or alternatives joined by `|`, or a sentence PVE gave


def missing_privilege(text: str) -> Missing | None:
    """The ACL path and privilege a 403 names, when PVE says which (it does for most checks)."""
    match = _PERM.search(text)
    if match is None:
        return None
    return Missing(match["path"], match["priv"].strip())
