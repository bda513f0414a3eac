"""Who may change things through the console: ``ALLOW_IPS``, as the VM API applies it.

The console forwards to services that listen on loopback, where the VM service sees the
console's own address, not the browser's. So the console checks the browser's address itself,
with the VM API's rule and message (``TRUSTED_PROXIES`` names the proxies whose
``X-Forwarded-For`` is believed), on every request that changes something and on the VM task
stream, the requests the VM API checks. Reads are open, as the VM API's are.

Beyond loopback the console lets whoever reaches it install and destroy VMs, so it does not
start there unless ``ALLOW_IPS`` says who may (the VM service's own rule).
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from actors.config import ConfigError, env_list, env_networks
from gateway.crosssite import SAFE_METHODS
from gateway.loopback import is_loopback_address
from gateway.vm import FORBIDDEN, ClientFilter

_ALLOW_ALL = ("0.0.0.0", "0.0.0.0/0")


def client_filter(env: Mapping[str, str]) -> ClientFilter:
    entries = env_list(env, "ALLOW_IPS")
    allow_all = not entries or any(e in _ALLOW_ALL for e in entries)
    return ClientFilter(
        env_networks(env, "ALLOW_IPS"), env_networks(env, "TRUSTED_PROXIES"), allow_all
    )


def check_exposure(host: str, env: Mapping[str, str]) -> None:
    if is_loopback_address(host) or env_list(env, "ALLOW_IPS"):
        return
    raise ConfigError(
        "ALLOW_IPS",
        f"must be set when the console (CAIRN_PORT) listens on {host} (beyond loopback): "
        "through it a browser installs, stops and destroys VMs; list the client addresses or "
        "CIDRs allowed to, or set ALLOW_IPS=0.0.0.0 to allow every client that can reach it",
    )


class ConsoleAccess:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.filter = client_filter(env)

    @staticmethod
    def checked(request: web.Request, service: str, tail: str) -> bool:
        """The requests the VM API checks: whatever changes state, and the task stream."""
        if request.method not in SAFE_METHODS:
            return True
        return service == "vm" and tail.rstrip("/").rsplit("/", 1)[-1] == "task"

    def refusal(self, request: web.Request) -> web.Response | None:
        if self.filter.allowed(request):
            return None
        shown = self.filter.shown_client(request)
        return web.Response(status=403, text=f"{FORBIDDEN} (client address {shown})")
