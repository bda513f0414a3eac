"""Write the upgrade test's fixture: a data directory (``CAIRN_DATA``) made by this cairn.

    .venv/bin/python -m tests.upgrade.make_fixture [DIR]

DIR defaults to ``tests/upgrade/fixture-<version>``. It starts the VM, functions, search and
images services on an empty data directory (the simulated cluster under ``pvesim/``), installs
two VMs, stores functions in Python (two versions) and JavaScript, indexes two documents of a
search database, uploads an image and a PDF, then stops everything and keeps the data
directory without the nats-server's store and the simulator's log. Run it once per release,
with that release's code (a checkout of its tag), and commit the result:
tests/upgrade/test_upgrade.py opens every kept fixture with the current code.

0.1.0 predates this script: its fixture was made by this script and serving.py placed in
``git archive b3bd802`` (0.1.0's last commit), run with that tree first on ``PYTHONPATH``.
"""

from __future__ import annotations

import asyncio
import io
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
from PIL import Image

from actors.search.registry import Registry
from gateway.server import domain_events
from tests.upgrade.serving import Served, serving

HERE = Path(__file__).parent

# What the fixture holds; the test asserts these are served after the upgrade.
VMS = (
    {"name": "web-1", "cpu": 2, "ram": 2048},
    {"name": "db-1", "os": "rockylinux", "version": "9"},
)
PYTHON_V1 = "return {'sum': input['a'] + input['b']}"
PYTHON_V2 = "return {'sum': input['a'] + input['b'], 'by': 'v2'}"
JAVASCRIPT = "return input.words.map(w => w.toUpperCase()).join(' ')"


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 80, 40)).save(out, "PNG")
    return out.getvalue()


# A search database and its documents (keyword search: the fixture is made without a model).
NOTES = {
    "granite.txt": "Granite cairns mark the ridge path above the tarn.",
    "ferns.md": "# Ferns\n\nBracken and lady fern grow in the damp ravine below the cairn.",
}

PDF = (
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
    b"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
    b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 200]>>endobj\n"
    b"trailer<</Root 1 0 R>>\n%%EOF\n"
)


async def _post_json(http: aiohttp.ClientSession, url: str, body: Any) -> Any:
    async with http.post(url, json=body) as resp:
        assert resp.status == 200, (url, resp.status, await resp.text())
        return await resp.json()


async def _upload(http: aiohttp.ClientSession, url: str, name: str, data: bytes) -> None:
    form = aiohttp.FormData()
    form.add_field("filepath", data, filename=name, content_type="application/octet-stream")
    async with http.post(url, data=form) as resp:
        assert resp.status == 201, await resp.text()


def version() -> str:
    """The version of the code tree this runs from (0.1.0 wrote it in pyproject.toml)."""
    pyproject = (HERE.parents[1] / "pyproject.toml").read_text()
    static = re.search(r'^version = "([^"]+)"$', pyproject, re.MULTILINE)
    if static:
        return static.group(1)
    from events.release import VERSION

    return VERSION


async def _indexed(served: Served, db: str, documents: int) -> None:
    url = served.urls["search"] + "/api/status"
    async with asyncio.timeout(120):
        while True:
            async with served.http.get(url, params={"db": db}) as resp:
                body = await resp.json() if resp.status == 200 else {}
            if body.get("documents") == documents and body.get("state") == "idle":
                return
            await asyncio.sleep(0.05)


async def populate(served: Served) -> None:
    for body in VMS:
        await served.install(**body)
    upload = served.urls["functions"] + "/upload"
    for path, language, code in (
        ("math/add", "python", PYTHON_V1),
        ("math/add", "python", PYTHON_V2),
        ("text/shout", "javascript", JAVASCRIPT),
    ):
        await _post_json(served.http, upload, {"path": path, "language": language, "code": code})
        await asyncio.sleep(0.002)  # versions are millisecond timestamps
    await _indexed(served, "notes", len(NOTES))
    img = served.urls["images"]
    await _upload(served.http, img + "/upload/photos/2026", "tile.png", png(64, 48))
    await _upload(served.http, img + "/upload/docs", "note.pdf", PDF)


async def written(work: Path) -> Path:
    """The data directory, populated, its services stopped."""
    data = work / "data"
    Registry(data / "config" / "cairn" / "search").add("notes")
    for name, text in NOTES.items():
        (data / "inbox" / "notes").mkdir(parents=True, exist_ok=True)
        (data / "inbox" / "notes" / name).write_text(text)
    async with serving(data, work) as served:
        await populate(served)
    return data


def make(target: Path) -> None:
    domain_events()
    with tempfile.TemporaryDirectory(prefix="cairn-fixture-") as tmp:
        data = asyncio.run(written(Path(tmp)))
        for dropped in ("nats", "pvesim/commands.log", "config/cairn/search/query_cache.sqlite"):
            path = data / dropped
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(data, target, symlinks=True)
    (target / "VERSION").write_text(f"{version()}\n")


def main() -> None:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / f"fixture-{version()}"
    make(target)
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"fixture written by cairn {version()} to {target}: {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
