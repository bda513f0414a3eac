"""Which role each route needs (gateway/http/roles.py): the table, golden."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from actors.config import ConfigError
from gateway.http.roles import RouteRoles
from gateway.http.tokens import Role

V, OP, A = Role.VIEWER, Role.OPERATOR, Role.ADMIN
DEFAULT = RouteRoles.from_env({})
CASES = [
    # Public by default: health, the VM queries, init scripts, image reads.
    ("vm", "GET", "/health", None),
    ("vm", "GET", "/api/health", None),
    ("vm", "GET", "/api/vm/list", None),
    ("vm", "GET", "/api/vm/101", None),
    ("vm", "HEAD", "/api/vm/101/status", None),
    ("vm", "GET", "/sh/ubuntu.sh", None),
    ("images", "GET", "/c/img/a/b/c.png", None),
    ("functions", "GET", "/health", None),
    ("search", "GET", "/api/health", None),
    ("status", "GET", "/health", None),
    # Reads.
    ("vm", "GET", "/api/vm/101/task", V),
    ("vm", "GET", "/api/openapi.json", V),
    ("functions", "GET", "/functions", V),
    ("functions", "GET", "/code/team/billing", V),
    ("images", "GET", "/ls/a", V),
    ("search", "GET", "/api/search", V),
    ("search", "POST", "/mcp", V),
    ("status", "GET", "/status", V),
    ("status", "GET", "/", V),
    ("status", "GET", "/console/events", V),
    # Operator: runs and the lifecycle.
    ("vm", "POST", "/api/vm/101/start", OP),
    ("vm", "POST", "/api/vm/101/stop", OP),
    ("vm", "POST", "/api/vm/101/shutdown", OP),
    ("vm", "POST", "/api/vm/101/reboot", OP),
    ("vm", "POST", "/api/vm/101/set/cpu", OP),
    ("vm", "POST", "/api/vm/101/set/node", OP),
    ("functions", "POST", "/run-now", OP),
    ("functions", "POST", "/run/team/billing", OP),
    # Admin: installs, destroys, uploads, deletes, and anything not listed that is no read.
    ("vm", "POST", "/api/vm/install", A),
    ("vm", "POST", "/api/vm/101/destroy", A),
    ("vm", "POST", "/api/vm/101/stop/destroy", A),
    ("functions", "POST", "/upload", A),
    ("functions", "DELETE", "/functions/team/billing", A),
    ("images", "POST", "/upload/a", A),
    ("images", "DELETE", "/del/a/b.png", A),
    ("vm", "PUT", "/api/vm/101", A),
    ("vm", "POST", "/api/vm/list", A),
    # The console: its sign-in always public; a forwarded call needs what its route needs.
    ("status", "GET", "/console/login", None),
    ("status", "POST", "/console/login", None),
    ("status", "POST", "/console/logout", None),
    ("status", "GET", "/console/static/app.js", None),
    ("status", "GET", "/console/svc/vm/api/vm/list", None),
    ("status", "POST", "/console/svc/vm/api/vm/102/stop", OP),
    ("status", "POST", "/console/svc/vm/api/vm/102/destroy", A),
    ("status", "POST", "/console/svc/functions/run-now", OP),
    ("status", "POST", "/console/svc/search/mcp", V),
    ("status", "GET", "/console/svc/images/c/img/a.png", None),
]


@pytest.mark.parametrize(("service", "method", "path", "role"), CASES)
def test_default_table(service: str, method: str, path: str, role: Role | None) -> None:
    assert DEFAULT.needed(service, method, path) == role


def test_the_operator_replaces_the_public_list() -> None:
    roles = RouteRoles.from_env({"CAIRN_PUBLIC_ROUTES": "images GET /ls/**, * GET /health"})
    assert roles.needed("images", "GET", "/ls/a/b") is None
    assert roles.needed("vm", "GET", "/api/vm/list") == V
    assert roles.needed("images", "GET", "/c/img/a.png") == V
    closed = RouteRoles.from_env({"CAIRN_PUBLIC_ROUTES": "none"})
    assert closed.needed("vm", "GET", "/health") == V
    assert closed.needed("status", "GET", "/console/login") is None  # nobody could sign in
    with pytest.raises(ConfigError, match="CAIRN_PUBLIC_ROUTES"):
        RouteRoles.from_env({"CAIRN_PUBLIC_ROUTES": "GET /health"})


def documented_routes() -> list[tuple[str, str, set[str]]]:
    """Every route of every service's OpenAPI document: (service, sample path, methods)."""
    prefixes = {"vm": "/api", "search": "/api"}
    found = []
    for service in ("vm", "functions", "search", "images", "status"):
        document = yaml.safe_load((OPENAPI / f"{service}.yaml").read_text())
        for template, item in document["paths"].items():
            path = prefixes.get(service, "") + re.sub(r"\{[^}]+\}", "150", template)
            methods = {m.upper() for m in item if m in HTTP_METHODS}
            found.append((service, path, methods))
    return found


OPENAPI = Path(__file__).parents[2] / "gateway" / "openapi"
HTTP_METHODS = ("get", "head", "post", "put", "patch", "delete", "options")
ROUTES = documented_routes()


@pytest.mark.parametrize(("service", "path", "methods"), ROUTES)
def test_head_needs_what_get_needs_on_every_route(
    service: str, path: str, methods: set[str]
) -> None:
    """aiohttp routes HEAD to every GET handler: a HEAD must never need less than its GET (a
    viewer's HEAD upgrade to the operator's serial console was let through)."""
    if "GET" in methods:
        assert DEFAULT.needed(service, "HEAD", path) == DEFAULT.needed(service, "GET", path)


@pytest.mark.parametrize(("service", "path", "methods"), ROUTES)
def test_any_other_method_needs_admin_on_every_route(
    service: str, path: str, methods: set[str]
) -> None:
    """A method no rule names (PUT, PATCH, one made up) is an admin's, whatever the path."""
    for method in ("PUT", "PATCH", "PROPFIND", "FOO"):
        assert DEFAULT.needed(service, method, path) == A, (method, path)


def test_head_of_the_serial_console_is_the_operators() -> None:
    assert DEFAULT.needed("status", "HEAD", "/console/vm/150/serial") == OP
    assert DEFAULT.needed("status", "head", "/console/vm/150/serial") == OP
    assert DEFAULT.needed("status", "OPTIONS", "/console/vm/150/serial") == V  # 405 below
