"""Who may call a service: ``ALLOW_IPS``, the VM service's check on who may change VMs, which
the functions and images services and the console apply too.

The client is the socket peer, unless the peer is a proxy named in ``TRUSTED_PROXIES``: then
the nearest address in its ``X-Forwarded-For`` that is not itself a trusted proxy. Unset
``ALLOW_IPS`` (or ``0.0.0.0``) allows every client; otherwise a client outside it gets
``403 this IP is not allowed to perform this action (client address …)`` before any effect.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs
from aiohttp import web
from aiohttp.typedefs import Handler

from actors.config import env_list, env_networks

if TYPE_CHECKING:
    from actors.vm.settings import VmSettings

FORBIDDEN = "this IP is not allowed to perform this action"
_ALLOW_ALL = ("0.0.0.0", "0.0.0.0/0")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(e, strict=False) for e in entries)


def _in(address: str, networks: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip.version == n.version and ip in n for n in networks)


@attrs.frozen
class ClientFilter:
    allow: tuple[Network, ...]
    proxies: tuple[Network, ...]
    allow_all: bool

    @classmethod
    def from_settings(cls, settings: VmSettings) -> ClientFilter:
        allow_all = any(e.strip() in _ALLOW_ALL for e in settings.allow_ips)
        return cls(_networks(settings.allow_ips), _networks(settings.trusted_proxies), allow_all)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ClientFilter:
        """``ALLOW_IPS`` and ``TRUSTED_PROXIES`` of the environment (a bad entry is a
        ConfigError naming the variable)."""
        entries = env_list(env, "ALLOW_IPS")
        allow_all = not entries or any(e in _ALLOW_ALL for e in entries)
        return cls(env_networks(env, "ALLOW_IPS"), env_networks(env, "TRUSTED_PROXIES"), allow_all)

    def client_ip(self, peer: str, forwarded_for: str | None) -> str:
        """The socket peer, unless the peer is a trusted proxy: then the nearest address in
        X-Forwarded-For that is not itself a trusted proxy (a client can prepend anything)."""
        if not forwarded_for or not _in(peer, self.proxies):
            return peer
        hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
        for hop in reversed(hops):
            if not _in(hop, self.proxies):
                return hop
        return hops[0] if hops else peer

    def from_proxy(self, peer: str) -> bool:
        """The socket peer is a proxy named in TRUSTED_PROXIES, whose headers are believed."""
        return _in(peer, self.proxies)

    def client(self, request: web.Request) -> str:
        return self.client_ip(request.remote or "", request.headers.get("X-Forwarded-For"))

    def shown_client(self, request: web.Request) -> str:
        """The client address for a message: an address as such, anything else (a forwarded
        hop can hold any text) quoted and cut short."""
        seen = self.client(request)
        try:
            return str(ipaddress.ip_address(seen))
        except ValueError:
            return repr(seen[:64])

    def allowed(self, request: web.Request) -> bool:
        return self.allow_all or _in(self.client(request), self.allow)

    def refusal(self, request: web.Request) -> web.Response | None:
        """The 403 for a client outside ALLOW_IPS, naming the address the check saw (so an
        operator behind a proxy sees whether TRUSTED_PROXIES or ALLOW_IPS is what to change);
        None when it may go on."""
        if self.allowed(request):
            return None
        return web.Response(
            status=403, text=f"{FORBIDDEN} (client address {self.shown_client(request)})"
        )

    def gate(self, handler: Handler) -> Handler:
        """``handler`` behind this check: a client outside ALLOW_IPS gets the 403 before the
        handler reads anything."""

        async def gated(request: web.Request) -> web.StreamResponse:
            refused = self.refusal(request)
            if refused is not None:
                return refused
            return await handler(request)

        return gated
