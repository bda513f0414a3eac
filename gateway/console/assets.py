"""The console's files: its own page, scripts and styles (``gateway/console/static``), and the
front-end libraries npm installed under ``ops/node_modules`` at set-up (``ops/package.json``;
a wheel carries the files used, ``events/resources.py``), served from here so the console works
on a network without Internet.

Only the folders named in ``VENDOR`` are served, never the whole ``node_modules``.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from events import resources

STATIC = Path(__file__).resolve().parent / "static"
NODE_MODULES = resources.node_modules()
# URL folder under /console/vendor/ -> folder of an npm package (ops/package.json).
VENDOR = {
    "preact-htm": "htm/preact",  # Preact, its hooks and htm in one ES module
    "eventsource-parser": "eventsource-parser/dist",  # SSE from fetch() (POST streams)
    "pico": "@picocss/pico/css",  # classless styles, light and dark
}
MISSING = (
    "the console's front-end packages are not installed ({missing}); run ops/setup, which "
    "installs the npm packages of ops/package.json"
)


def missing_vendor(root: Path = NODE_MODULES) -> list[str]:
    return [package for package in VENDOR.values() if not (root / package).is_dir()]


def add_routes(app: web.Application, root: Path = NODE_MODULES) -> None:
    async def index(_: web.Request) -> web.StreamResponse:
        missing = missing_vendor(root)
        if missing:
            return web.Response(status=503, text=MISSING.format(missing=", ".join(missing)))
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    app.router.add_get("/", index)
    app.router.add_static("/console/static/", STATIC, follow_symlinks=False)
    for name, package in VENDOR.items():
        folder = root / package
        if folder.is_dir():
            app.router.add_static(f"/console/vendor/{name}/", folder, follow_symlinks=False)
