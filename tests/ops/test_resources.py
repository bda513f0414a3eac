"""events/resources.py: the one place the product finds its files outside its packages, from a
checkout or from an installed wheel; what a wheel's build copies (``pack``) and the words
when it cannot. tests/ops/test_wheel.py builds and runs a real wheel."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from events import resources
from gateway.console import assets, bundles
from gateway.openapi import PACKAGE_ASSETS

ROOT = Path(__file__).resolve().parents[2]


def test_a_checkout_finds_its_files_where_they_are_edited() -> None:
    assert not resources.installed()
    assert resources.init_scripts() == ROOT / "sh"
    assert (resources.init_scripts() / "templates" / "debian.sh.in").is_file()
    assert resources.node_modules() == ROOT / "ops" / "node_modules"
    assert resources.console_bundle("editor.js") is None  # bundled on the first request


@pytest.fixture
def wheel_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    packaged = tmp_path / "packaged"
    (packaged / resources.BUNDLES).mkdir(parents=True)
    (packaged / resources.BUNDLES / "editor.js").write_text("export {}\n")
    monkeypatch.setattr(resources, "PACKAGED", packaged)
    return packaged


def test_an_install_finds_them_in_what_its_wheel_carries(wheel_install: Path) -> None:
    assert resources.installed()
    assert resources.init_scripts() == wheel_install / "sh"
    assert resources.node_modules() == wheel_install / "node_modules"
    assert resources.console_bundle("editor.js") == wheel_install / "bundles" / "editor.js"
    assert resources.console_bundle("terminal.js") is None


def test_esbuild_is_the_setting_then_npms_then_the_one_on_path(
    wheel_install: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    # An install carries no esbuild (a native program): without one on PATH, none.
    assert resources.esbuild({}) is None
    assert resources.esbuild({"ESBUILD": "/opt/esbuild"}) == "/opt/esbuild"
    on_path = bin_dir / "esbuild"
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    assert resources.esbuild({}) == str(on_path)


def test_a_wheel_carries_every_npm_file_the_product_serves() -> None:
    # The console's libraries: each folder it serves, with the files its pages name.
    for folder in assets.VENDOR.values():
        assert folder in resources.NPM_FILES, folder
    named = {
        url
        for path in (ROOT / "gateway" / "console" / "static").rglob("*")
        if path.is_file()
        for url in re.findall(r"/console/vendor/([\w-]+)/([\w./-]+)", path.read_text())
    }
    served = {name for name, _ in named}
    assert served == {*assets.VENDOR, "codemirror", "xterm"}
    for name, file in named:
        if name in assets.VENDOR:
            patterns = resources.NPM_FILES[assets.VENDOR[name]]
            assert any(Path(file).match(pattern) for pattern in patterns), (name, file)
    # The API reference's.
    assert set(PACKAGE_ASSETS) == set(resources.NPM_FILES["swagger-ui-dist"])
    # And the two bundles, made at the build.
    assert set(bundles.ENTRIES) == {"editor.js", "terminal.js"}


def test_pack_copies_the_scripts_the_npm_files_and_the_bundles(tmp_path: Path) -> None:
    target = tmp_path / "packaged"
    resources.pack(target, ROOT, {"editor.js": lambda: b"bundle\n"})
    templates = sorted(p.name for p in (target / "sh" / "templates").iterdir())
    assert templates == ["debian.sh.in", "rockylinux.sh.in"]
    assert (target / "sh" / "templates" / "debian.sh.in").read_bytes() == (
        ROOT / "sh" / "templates" / "debian.sh.in"
    ).read_bytes()
    modules = target / "node_modules"
    assert (modules / "htm" / "preact" / "standalone.module.js").is_file()
    assert (modules / "eventsource-parser" / "dist" / "parse.js").is_file()  # index.js's import
    assert [p.name for p in (modules / "@picocss" / "pico" / "css").iterdir()] == ["pico.min.css"]
    assert (modules / "swagger-ui-dist" / "swagger-ui-bundle.js").is_file()
    assert (target / "bundles" / "editor.js").read_bytes() == b"bundle\n"


def test_pack_without_the_npm_packages_says_to_run_setup(tmp_path: Path) -> None:
    (tmp_path / "sh" / "templates").mkdir(parents=True)
    (tmp_path / "sh" / "templates" / "debian.sh.in").write_text("#!/bin/sh\n")

    def bundle() -> bytes:
        raise AssertionError("the missing npm files are named before esbuild is tried")

    with pytest.raises(FileNotFoundError) as caught:
        resources.pack(tmp_path / "packaged", tmp_path, {"editor.js": bundle})
    assert str(caught.value) == (
        f"cannot build a wheel: no htm/preact/standalone.module.js in {tmp_path}/ops/node_modules;"
        " run ops/setup in the checkout first (it installs the npm packages of ops/package.json)"
    )


def test_pack_without_init_scripts_refuses(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        resources.pack(tmp_path / "packaged", tmp_path, {})
    assert str(caught.value) == f"no init script templates in {tmp_path / 'sh' / 'templates'}"


def test_no_other_product_module_reaches_outside_its_package() -> None:
    """A module finding a file by climbing out of its package works only from a checkout."""
    climbs = re.compile(r"\.parents\[|\.parent\.parent\b")
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for package in ("events", "actors", "gateway")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "events" / "resources.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if climbs.search(line) and ("__file__" in line or "HERE" in line)
    ]
    assert found == []
