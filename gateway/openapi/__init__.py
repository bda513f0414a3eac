"""Each service's OpenAPI 3.1 document, and its reference rendered by Swagger UI.

The documents are written by hand, one YAML file per service beside this module, so they read
like the docs they mirror; ``tests/openapi`` keeps them true to the routes each app serves. A
document is loaded once, at the service's build, and served as JSON. The reference pages are
our own small HTML and JS (no inline script, a Content-Security-Policy that allows only this
origin) around the files of the npm package ``swagger-ui-dist``, which ``ops/setup`` installs
under ``ops/node_modules`` (a wheel carries them, ``events/resources.py``): nothing is fetched
from a CDN. Without the package the pages say how to install it (503) and the document is
served all the same.
"""

from __future__ import annotations

import contextlib
import functools
import html
import importlib.metadata
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from events import resources

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "reference"
DEFAULT_SWAGGER_UI = resources.node_modules() / "swagger-ui-dist"

# Our files, then the package's: the only names `docs/{asset}` answers.
OWN_ASSETS = {"init.js": "text/javascript; charset=utf-8", "page.css": "text/css; charset=utf-8"}
PACKAGE_ASSETS = {
    "swagger-ui.css": "text/css; charset=utf-8",
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "favicon-32x32.png": "image/png",
    "favicon-16x16.png": "image/png",
}
# Swagger UI sets style attributes in its markup, hence 'unsafe-inline' for styles only;
# scripts come from this origin alone and "Try it out" may call only this origin.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}
MISSING = (
    "the API reference needs the npm package swagger-ui-dist: run ops/setup (it installs the "
    "npm packages of ops/package.json), or point SWAGGER_UI_DIST at an unpacked copy; the "
    "document itself is at {document}"
)


def _load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((HERE / f"{name}.yaml").read_text(encoding="utf-8"))
    return loaded


@functools.cache
def document(name: str, prefix: str = "") -> dict[str, Any]:
    """The service's document (``gateway/openapi/<name>.yaml``) with what every document shares
    (``common.yaml``: its paths under ``prefix``) and cairn's version."""
    doc = _load(name)
    common = _load("common")
    for kind, entries in common["components"].items():
        own = doc.setdefault("components", {}).setdefault(kind, {})
        twice = own.keys() & entries.keys()
        if twice:
            raise ValueError(f"{name}.yaml defines {kind} {sorted(twice)} of common.yaml again")
        own.update(entries)
    # What the service answers on every route (search's loopback guard) holds for these too.
    extra = doc.pop("x-reference-responses", {})
    for path, item in common["paths"].items():
        for operation in item.values():
            operation["responses"].update(extra)
        doc["paths"][prefix + path] = item
    tags = doc.setdefault("tags", [])
    if not any(tag["name"] == "reference" for tag in tags):
        tags.append({"name": "reference", "description": "This document and its rendering."})
    # A tree that was never installed keeps the file's word for it.
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        doc["info"]["version"] = importlib.metadata.version("cairn")
    return doc


def swagger_ui_dir(env: Mapping[str, str]) -> Path:
    return Path(env["SWAGGER_UI_DIST"]) if env.get("SWAGGER_UI_DIST") else DEFAULT_SWAGGER_UI


def add_openapi(
    app: web.Application,
    name: str,
    env: Mapping[str, str],
    *,
    prefix: str = "",
    mounted_at: str = "",
) -> None:
    """Serve ``<prefix>/openapi.json`` and the reference at ``<prefix>/docs/`` in ``app``,
    itself served at ``mounted_at`` (a sub-app: VM's ``/api``, whose routes must live in it,
    since aiohttp answers 404 rather than 405 for a path beside a sub-app's prefix)."""
    public = mounted_at + prefix
    body = json.dumps(document(name, public), ensure_ascii=False, separators=(",", ":")).encode()
    package = swagger_ui_dir(env)
    document_path = f"{public}/openapi.json"

    async def openapi(_: web.Request) -> web.Response:
        return web.Response(
            body=body, content_type="application/json", headers={"Cache-Control": "no-cache"}
        )

    def missing() -> web.Response | None:
        if (package / "swagger-ui-bundle.js").is_file():
            return None
        return web.Response(status=503, text=MISSING.format(document=document_path))

    async def to_page(_: web.Request) -> web.Response:
        # Relative, so it holds under any prefix a proxy adds: <...>/docs -> <...>/docs/
        raise web.HTTPFound("docs/")

    # The page's title names its service ("cairn VM provisioning service · API reference"), so
    # tabs and bookmarks of several references tell each other apart.
    title = html.escape(str(document(name, public)["info"]["title"]))
    page_html = (
        (REFERENCE / "index.html")
        .read_text(encoding="utf-8")
        .replace("<title>cairn API reference</title>", f"<title>{title} · API reference</title>")
    )

    async def page(_: web.Request) -> web.StreamResponse:
        if (refusal := missing()) is not None:
            return refusal
        return web.Response(
            text=page_html,
            headers={**PAGE_HEADERS, "Content-Type": "text/html; charset=utf-8"},
        )

    async def asset(request: web.Request) -> web.StreamResponse:
        asset_name = request.match_info["asset"]
        if asset_name in OWN_ASSETS:
            path, kind = REFERENCE / asset_name, OWN_ASSETS[asset_name]
        elif asset_name in PACKAGE_ASSETS:
            if (refusal := missing()) is not None:
                return refusal
            path, kind = package / asset_name, PACKAGE_ASSETS[asset_name]
        else:
            return web.Response(status=404, text="Not Found")
        return web.FileResponse(path, headers={**PAGE_HEADERS, "Content-Type": kind})

    app.router.add_get(f"{prefix}/openapi.json", openapi)
    app.router.add_get(f"{prefix}/docs", to_page)
    app.router.add_get(f"{prefix}/docs/", page)
    app.router.add_get(f"{prefix}/docs/{{asset}}", asset)
