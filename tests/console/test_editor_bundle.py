"""The code editor's bundle: CodeMirror from ops/node_modules, bundled by the real esbuild into
one ES module the console serves; without esbuild, a 503 that says what to run; a wheel's
bundle, made when it was built, served as it is."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.console.editor import ENTRY, EditorBundle, add_routes, terminal_bundle

ROUTE = "/console/vendor/codemirror/editor.js"


async def client_for(bundle: EditorBundle) -> TestClient[web.Request, web.Application]:
    app = web.Application()
    add_routes(app, bundle)
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client


async def test_the_editor_is_one_module_with_nothing_from_elsewhere() -> None:
    client = await client_for(EditorBundle())
    try:
        response = await client.get(ROUTE)
        assert response.status == 200
        assert response.content_type == "text/javascript"
        body = await response.text()
        again = await (await client.get(ROUTE)).text()
    finally:
        await client.close()
    assert body == again  # built once, then served from memory
    assert "createEditor" in body
    # Bundled: no import left to resolve, so nothing is fetched from anywhere else.
    assert "import(" not in body and not body.lstrip().startswith("import")
    assert "http://" not in body.replace("http://www.w3.org", "")


async def test_without_esbuild_the_route_says_what_to_run(tmp_path: Path) -> None:
    client = await client_for(EditorBundle(tmp_path / "node_modules", ENTRY))
    try:
        response = await client.get(ROUTE)
        assert response.status == 503
        text = await response.text()
    finally:
        await client.close()
    assert "the code editor is not available" in text and "run ops/setup" in text


async def test_the_serial_terminal_is_one_module_with_its_stylesheet_inside() -> None:
    client = await client_for(EditorBundle())
    try:
        response = await client.get("/console/vendor/xterm/terminal.js")
        assert response.status == 200
        assert response.content_type == "text/javascript"
        body = await response.text()
    finally:
        await client.close()
    assert "openSerialConsole" in body
    assert ".xterm-helper-textarea" in body  # xterm.css, as text for a constructed sheet
    assert "import(" not in body and not body.lstrip().startswith("import")


async def test_without_esbuild_the_terminal_route_says_what_to_run(tmp_path: Path) -> None:
    app = web.Application()
    add_routes(app, terminal=terminal_bundle(tmp_path / "node_modules"))
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    try:
        response = await client.get("/console/vendor/xterm/terminal.js")
        text = await response.text()
    finally:
        await client.close()
    assert response.status == 503
    assert "the serial console's terminal is not available" in text and "xterm.js" in text


async def test_a_wheels_bundle_is_served_as_it_was_built(tmp_path: Path) -> None:
    built = tmp_path / "editor.js"
    built.write_text("export function createEditor() {}\n")
    # No npm tree and no esbuild: what the wheel carries is all there is.
    client = await client_for(EditorBundle(tmp_path / "node_modules", ENTRY, prebuilt=built))
    try:
        response = await client.get(ROUTE)
        assert response.status == 200
        assert response.content_type == "text/javascript"
        assert await response.text() == "export function createEditor() {}\n"
    finally:
        await client.close()
