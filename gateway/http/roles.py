"""Which role each route needs once tokens exist (``gateway/http/identity.py`` applies it).

One table for every service, read top to bottom, first match wins:

| service | routes | role |
|---|---|---|
| vm | ``POST /api/vm/install``, ``POST /api/vm/<id>/destroy`` | admin |
| vm | ``POST /api/vm/<id>/snapshots/<name>/rollback``, ``DELETE .../snapshots/<name>`` | admin |
| vm | ``POST /api/vm/<id>/change`` (runs shell as root on the guest) | admin |
| vm | ``POST /api/vm/<id>/{start,stop,shutdown,reboot}``, ``POST /api/vm/<id>/set/*`` | operator |
| vm | ``POST /api/vm/<id>/snapshots`` (take one) | operator |
| functions | ``POST /upload``, ``DELETE /functions/<path>`` | admin |
| functions | ``POST /run-now``, ``POST /run/<path>`` | operator |
| images | ``POST /upload/<path>``, ``DELETE /del/<path>`` | admin |
| search | ``/mcp`` (its tools only read) | viewer |
| status | ``/console/svc/<service>/<path>``: what that service's route needs | |
| status | ``GET /console/vm/<id>/serial`` (a VM's serial console, a websocket) | operator |
| any | any other ``GET``, ``HEAD`` or ``OPTIONS`` | viewer |
| any | any other method | admin |

A rule keyed by ``GET`` binds ``HEAD`` too: aiohttp routes ``HEAD`` to every ``GET`` handler,
so a ``HEAD`` that fell to the viewer's default would reach an operator's route (a websocket
upgrade sent with ``HEAD`` is still an upgrade to the handler).

Public (no token asked), by default: every service's health route, the VM queries a
client makes without credentials (``GET /api/vm/list``, ``/api/vm/<id>``,
``/api/vm/<id>/status``), the init scripts new VMs fetch (``GET /sh/*``) and image reads
(``GET /c/img/*``, what pages embed). ``CAIRN_PUBLIC_ROUTES`` replaces that list:
comma-separated ``SERVICE METHOD PATH`` entries (``*`` for any service; in a path ``*`` is one
segment, ``**`` the rest), or ``none``. The console's sign-in page and its scripts are always
public: without them nobody could sign in.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

import attrs

from actors.config import ConfigError, env_list
from gateway.http.tokens import Role

ENV = "CAIRN_PUBLIC_ROUTES"
READS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_PUBLIC = (
    "* GET /health",
    "vm GET /api/health",
    "search GET /api/health",
    "vm GET /api/vm/list",
    "vm GET /api/vm/*",
    "vm GET /api/vm/*/status",
    "vm GET /sh/*",
    "images GET /c/img/**",
)
ALWAYS_PUBLIC = (
    "status GET /console/login",
    "status POST /console/login",
    "status POST /console/logout",
    "status GET /console/whoami",
    "status GET /console/static/**",
    "status GET /console/vendor/**",
)
# (service, methods, path pattern, role): first match wins.
_RULES: tuple[tuple[str, frozenset[str], str, Role], ...] = (
    ("vm", frozenset({"POST"}), "/api/vm/install", Role.ADMIN),
    ("vm", frozenset({"POST"}), "/api/vm/*/destroy", Role.ADMIN),
    ("vm", frozenset({"POST"}), "/api/vm/*/start", Role.OPERATOR),
    ("vm", frozenset({"POST"}), "/api/vm/*/stop", Role.OPERATOR),
    ("vm", frozenset({"POST"}), "/api/vm/*/shutdown", Role.OPERATOR),
    ("vm", frozenset({"POST"}), "/api/vm/*/reboot", Role.OPERATOR),
    ("vm", frozenset({"POST"}), "/api/vm/*/set/*", Role.OPERATOR),
    # Taking a snapshot changes nothing in the VM; going back to one, or deleting one, throws
    # away what the VM or the snapshot held.
    ("vm", frozenset({"POST"}), "/api/vm/*/snapshots", Role.OPERATOR),
    ("vm", frozenset({"POST"}), "/api/vm/*/snapshots/*/rollback", Role.ADMIN),
    ("vm", frozenset({"DELETE"}), "/api/vm/*/snapshots/*", Role.ADMIN),
    # A change runs its scripts as root on the guest and may roll the VM back.
    ("vm", frozenset({"POST"}), "/api/vm/*/change", Role.ADMIN),
    ("functions", frozenset({"POST"}), "/upload", Role.ADMIN),
    ("functions", frozenset({"DELETE"}), "/functions/**", Role.ADMIN),
    ("functions", frozenset({"POST"}), "/run-now", Role.OPERATOR),
    ("functions", frozenset({"POST"}), "/run/**", Role.OPERATOR),
    ("images", frozenset({"POST"}), "/upload", Role.ADMIN),
    ("images", frozenset({"POST"}), "/upload/**", Role.ADMIN),
    ("images", frozenset({"DELETE"}), "/del/**", Role.ADMIN),
    ("search", frozenset({"GET", "POST", "DELETE"}), "/mcp", Role.VIEWER),
    ("search", frozenset({"GET", "POST", "DELETE"}), "/mcp/**", Role.VIEWER),
    ("status", frozenset({"GET"}), "/console/vm/*/serial", Role.OPERATOR),
)
_CONSOLE_SVC = re.compile(r"/console/svc/([^/]+)(/.*)?\Z", re.DOTALL)


def compile_path(pattern: str) -> re.Pattern[str]:
    """``*``: one path segment (no ``/``); ``**``: anything, ``/`` included."""
    parts = re.split(r"(\*\*|\*)", pattern)
    body = "".join(".*" if p == "**" else "[^/]*" if p == "*" else re.escape(p) for p in parts)
    return re.compile(body + r"\Z", re.DOTALL)


@attrs.frozen
class Rule:
    service: str  # "*": any
    methods: frozenset[str]
    path: re.Pattern[str]

    def matches(self, service: str, method: str, path: str) -> bool:
        return (
            self.service in ("*", service)
            and method in self.methods
            and self.path.match(path) is not None
        )


def with_head(methods: frozenset[str]) -> frozenset[str]:
    """``methods``, and ``HEAD`` wherever ``GET`` is: the router serves both with one handler."""
    return methods | {"HEAD"} if "GET" in methods else methods


def parse_public(entry: str) -> Rule:
    """``SERVICE METHOD PATH``; GET includes HEAD."""
    words = entry.split()
    if len(words) != 3 or not words[2].startswith("/"):
        raise ConfigError(
            ENV, "entries are 'SERVICE METHOD /path' (e.g. 'vm GET /api/vm/*')", entry
        )
    service, method, path = words[0].lower(), words[1].upper(), words[2]
    return Rule(service, with_head(frozenset({method})), compile_path(path))


_COMPILED_RULES = tuple(
    (Rule(service, with_head(methods), compile_path(path)), role)
    for service, methods, path, role in _RULES
)


@attrs.frozen
class RouteRoles:
    public: tuple[Rule, ...]
    always: tuple[Rule, ...] = tuple(parse_public(e) for e in ALWAYS_PUBLIC)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RouteRoles:
        entries = env_list(env, ENV, DEFAULT_PUBLIC)
        if [e.lower() for e in entries] == ["none"]:
            return cls(())
        return cls(tuple(parse_public(e) for e in entries))

    def needed(self, service: str, method: str, path: str) -> Role | None:
        """The least role this request needs; None: public."""
        if len(path) > 512:
            return self._needed(service, method, path)
        return self._cached(service, method, path)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 (a few instances, alive as long as cairn)
    def _cached(self, service: str, method: str, path: str) -> Role | None:
        return self._needed(service, method, path)

    def _needed(self, service: str, method: str, path: str) -> Role | None:
        method = method.upper()
        if service == "status":
            if any(r.matches(service, method, path) for r in self.always):
                return None
            forwarded = _CONSOLE_SVC.match(path)
            if forwarded is not None:
                return self._needed(forwarded.group(1), method, forwarded.group(2) or "/")
        if any(r.matches(service, method, path) for r in self.public):
            return None
        for rule, role in _COMPILED_RULES:
            if rule.matches(service, method, path):
                return role
        return Role.VIEWER if method in READS else Role.ADMIN
