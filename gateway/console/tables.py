"""ES modules the page imports, written by the server from the tables the Python side owns, so
that a list such as the install's stage names is kept in one place and the page cannot drift
from the service that reports them.

| route | what |
|---|---|
| ``GET /console/tables/stages.js`` | ``INSTALL_STAGES``: the install's stages, in order |
"""

from __future__ import annotations

import json

from aiohttp import web

from actors.vm import stages

STAGES_JS = f"export const INSTALL_STAGES = {json.dumps(list(stages.INSTALL), indent=2)};\n"


async def stages_module(_: web.Request) -> web.Response:
    return web.Response(
        text=STAGES_JS, content_type="text/javascript", headers={"Cache-Control": "no-cache"}
    )


def add_routes(app: web.Application) -> None:
    app.router.add_get("/console/tables/stages.js", stages_module)
