"""Is a Host or Origin header a loopback name? The search service answers only those (DNS
rebinding), and its stdio MCP client only connects to them."""

from __future__ import annotations

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
