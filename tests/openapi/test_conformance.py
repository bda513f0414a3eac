"""Each service's OpenAPI document names exactly the routes its app serves, is valid OpenAPI
3.1, and is the one the service serves."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp import web
from openapi_spec_validator import validate

from gateway.main import route_path
from gateway.openapi import document
from tests.openapi.conftest import PREFIX, SERVICES, Running

METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
Routes = set[tuple[str, str]]


CONSOLE_ASSETS = ("/console/static", "/console/vendor/")
# Modules the console page imports, written by the server from Python's tables
# (gateway/console/tables.py): files of the page, not an API.
CONSOLE_TABLES = "/console/tables/"


def served_routes(app: web.Application) -> Routes:
    """(method, path template) of every route, sub-apps included; a placeholder pinned to one
    word is that word (`/api/vm/{id}/start`), a static folder `<prefix>/{file}`, a route for
    every method `*`. aiohttp answers HEAD wherever it answers GET: left out here."""
    routes = set()
    for route in app.router.routes():
        if route.method == "HEAD":
            continue
        assert route.resource is not None
        info = route.resource.get_info()
        static = "directory" in info
        if static and str(info["prefix"]).startswith(CONSOLE_ASSETS):
            continue  # the console page's own scripts and styles: files, not an API
        path = f"{str(info['prefix']).rstrip('/')}/{{file}}" if static else route_path(info)
        if path.startswith(CONSOLE_TABLES):
            continue
        routes.add((route.method.lower(), path))
    return routes


def documented_routes(doc: dict[str, Any]) -> Routes:
    paths = doc["paths"].items()
    return {(method, path) for path, item in paths for method in item if method in METHODS}


def differences(served: Routes, documented: Routes) -> tuple[list[str], list[str]]:
    """What is served but not documented, and what is documented but not served."""
    # A route for every method (search's /mcp) stands for whatever the document lists there.
    anywhere = {path for method, path in served if method == "*"}
    served = {(m, p) for m, p in served if m != "*"}
    served |= {(m, p) for m, p in documented if p in anywhere}
    listed = {p for _, p in documented}
    missing_everywhere = [f"* {p}" for p in sorted(anywhere - listed)]
    # HEAD is documented only where it is meant to be used; aiohttp serves it beside each GET.
    served |= {("head", p) for m, p in served if m == "get"} & documented
    undocumented = [f"{m.upper()} {p}" for m, p in sorted(served - documented)]
    unserved = [f"{m.upper()} {p}" for m, p in sorted(documented - served)]
    return undocumented + missing_everywhere, unserved


@pytest.mark.parametrize("name", SERVICES)
def test_each_document_is_valid_openapi_3_1(name: str) -> None:
    doc = document(name, PREFIX[name])
    assert doc["openapi"].startswith("3.1")
    validate(doc)


def test_each_document_names_every_route_served_and_no_other(running: Running) -> None:
    served = served_routes(running.app)
    documented = documented_routes(document(running.name, running.prefix))
    undocumented, unserved = differences(served, documented)
    assert undocumented == [], f"{running.name}: served but not in its document"
    assert unserved == [], f"{running.name}: in its document but not served"
    assert len(served) >= 6  # the reference's four routes and the health routes at least


def test_the_comparison_finds_a_route_on_either_side_only() -> None:
    app = web.Application()

    async def handler(_: web.Request) -> web.Response:
        return web.Response()

    api = web.Application()
    api.router.add_post("/vm/{id}/{action:start}", handler)
    api.router.add_get("/vm/{id}", handler)
    app.add_subapp("/api", api)
    app.router.add_route("*", "/mcp", handler)
    served = served_routes(app)
    assert served == {("post", "/api/vm/{id}/start"), ("get", "/api/vm/{id}"), ("*", "/mcp")}
    documented = {
        ("post", "/api/vm/{id}/start"),
        ("head", "/api/vm/{id}"),
        ("get", "/health"),
        ("post", "/mcp"),
        ("delete", "/mcp"),
    }
    assert differences(served, documented) == (["GET /api/vm/{id}"], ["GET /health"])
    assert differences(served, documented - {("post", "/mcp"), ("delete", "/mcp")}) == (
        ["GET /api/vm/{id}", "* /mcp"],
        ["GET /health"],
    )


async def test_each_service_serves_its_document(running: Running) -> None:
    async with aiohttp.ClientSession() as http, http.get(running.document_url) as response:
        assert response.status == 200
        assert response.content_type == "application/json"
        served = await response.json()
    assert served == document(running.name, running.prefix)
    assert served["info"]["version"] != "set from the installed package"
