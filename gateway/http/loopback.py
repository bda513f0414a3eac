"""Is a Host or Origin header, or a listen address, a loopback name? The search service answers
only loopback Host headers (DNS rebinding) and its stdio MCP client only connects to them; the
VM service and the console ask for ALLOW_IPS when they listen anywhere else."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


def is_loopback_host(value: str) -> bool:
    """`Host` header (host[:port]) naming a loopback address."""
    host = value.strip().lower()
    if host.startswith("["):
        host = host[: host.find("]") + 1] if "]" in host else host
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host in _LOOPBACK_HOSTS or (host.startswith("127.") and host.replace(".", "").isdigit())


def is_loopback_origin(origin: str) -> bool:
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and is_loopback_host(parts.netloc)


def is_loopback_address(host: str) -> bool:
    """A listen address (``127.0.0.1``, ``::1``, ``localhost``) only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
