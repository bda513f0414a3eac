"""The rendered reference beside each document: our page and initializer around the local
swagger-ui-dist files, a CSP that allows nothing from elsewhere, and a clear 503 without the
npm package."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp

from events.nats_server import EmbeddedNats
from gateway.openapi import CSP, OWN_ASSETS, PACKAGE_ASSETS, document, swagger_ui_dir
from tests.openapi.conftest import Running, start


async def test_each_service_renders_its_document_from_local_files(running: Running) -> None:
    assert (swagger_ui_dir({}) / "swagger-ui-bundle.js").is_file(), "ops/setup installs it"
    docs = f"{running.url}{running.prefix}/docs"
    async with aiohttp.ClientSession() as http:
        async with http.get(docs, allow_redirects=False) as response:
            assert response.status == 302
            assert response.headers["Location"] == "docs/"
        async with http.get(docs) as response:  # the redirect, followed
            assert response.status == 200
            assert str(response.url) == docs + "/"
            assert response.content_type == "text/html"
            assert response.headers["Content-Security-Policy"] == CSP
            page = await response.text()
        # Titled with its service's name, so several references' tabs tell each other apart.
        title = document(running.name)["info"]["title"]
        assert f"<title>{title} · API reference</title>" in page
        # Everything the page loads is a file of its own folder: no CDN, no inline script.
        loaded = re.findall(r'(?:src|href)="([^"]*)"', page)
        assert sorted(loaded) == sorted(OWN_ASSETS | PACKAGE_ASSETS)
        assert re.findall(r"<script(?![^>]*\bsrc=)", page) == []
        for name in loaded:
            async with http.get(f"{docs}/{name}") as response:
                assert response.status == 200, name
                assert response.headers["Content-Type"] == {**OWN_ASSETS, **PACKAGE_ASSETS}[name]
                assert len(await response.read()) > 100
        async with http.get(f"{docs}/init.js") as response:
            # The document beside the page, wherever the service is mounted.
            assert 'new URL("../openapi.json", window.location.href)' in await response.text()
        for other in ("index.html", "swagger-initializer.js", "..%2Fopenapi.json", "package.json"):
            async with http.get(f"{docs}/{other}") as response:
                assert response.status == 404, other


async def test_without_the_npm_package_the_page_says_how_to_get_it(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    empty = tmp_path / "no-swagger-ui"
    empty.mkdir()
    async with (
        start("functions", tmp_path, nats_server, SWAGGER_UI_DIST=str(empty)) as service,
        aiohttp.ClientSession(service.url) as http,
    ):
        for path in ("/docs/", "/docs/swagger-ui-bundle.js"):
            async with http.get(path) as response:
                assert response.status == 503
                assert response.content_type == "text/plain"
                assert await response.text() == (
                    "the API reference needs the npm package swagger-ui-dist: run ops/setup "
                    "(it installs the npm packages of ops/package.json), or point "
                    "SWAGGER_UI_DIST at an unpacked copy; the document itself is at "
                    "/openapi.json"
                )
        async with http.get("/openapi.json") as response:
            assert response.status == 200  # the document does not need the package
        async with http.get("/docs/init.js") as response:
            assert response.status == 200
