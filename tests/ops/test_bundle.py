"""ops/bundle makes a tarball that installs without npm: the tracked tree plus the npm packages
the plain ops/setup installs, stamped so that ops/setup finds them installed (docs/deploy.md)."""

from __future__ import annotations

import hashlib
import subprocess
import tarfile
from pathlib import Path

import pytest

from events.release import VERSION

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_bundle_ships_the_npm_packages_stamped(tmp_path: Path) -> None:
    out = tmp_path / "cairn.tar.gz"
    done = subprocess.run(
        [str(ROOT / "ops" / "bundle"), str(out)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{out}\n"
    with tarfile.open(out) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    tree = tmp_path / "x" / f"cairn-{VERSION}"
    modules = tree / "ops" / "node_modules"
    assert (modules / "@esbuild" / "linux-x64" / "bin" / "esbuild").is_file()
    assert (modules / "swagger-ui-dist" / "swagger-ui-bundle.js").is_file()
    assert (modules / "htm" / "preact" / "standalone.module.js").is_file()
    assert (modules / "@picocss" / "pico" / "css" / "pico.min.css").is_file()
    assert not (modules / "tsx").exists()  # a devDependency
    assert not (tree / ".git").exists() and not (tree / ".venv").exists()
    # What ops/setup compares before it would run npm: the plain form's stamp.
    packages = (tree / "ops" / "package.json").read_bytes()
    packages += (tree / "ops" / "package-lock.json").read_bytes()
    assert (modules / ".cairn-stamp").read_text() == hashlib.sha256(packages).hexdigest() + "\n"
    setup = (tree / "ops" / "setup").read_text()
    assert 'npm_hash="$(cat ops/package.json ops/package-lock.json' in setup
