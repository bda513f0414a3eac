"""The `cairn` command's own surface: version, help, the route list printed at start-up."""

from __future__ import annotations

import subprocess
import sys

from aiohttp import web

from gateway.main import route_lines


async def _ok(_: web.Request) -> web.Response:
    return web.Response()


def test_each_route_pinned_to_a_word_is_printed_with_that_word() -> None:
    app = web.Application()
    api = web.Application()
    for action in ("start", "stop"):
        api.router.add_post(f"/vm/{{id}}/{{action:{action}}}", _ok)
    api.router.add_get("/vm/{id}/status", _ok)
    api.router.add_get("/img/{path:.*}", _ok)
    app.add_subapp("/api", api)
    assert route_lines(app) == [
        "POST    /api/vm/{id}/start",
        "POST    /api/vm/{id}/stop",
        "GET     /api/vm/{id}/status",
        "GET     /api/img/{path}",
    ]


def test_version_and_plain_help() -> None:
    version = subprocess.run(
        [sys.executable, "-m", "gateway.main", "--version"], capture_output=True, text=True
    )
    assert version.returncode == 0
    assert version.stdout.strip().startswith("cairn 0.")
    helptext = subprocess.run(
        [sys.executable, "-m", "gateway.main", "--help"], capture_output=True, text=True
    ).stdout
    assert "cairn up" in helptext
    assert "``" not in helptext  # no reStructuredText markup in what a user reads
