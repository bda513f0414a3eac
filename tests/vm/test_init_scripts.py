"""The nine init scripts, run for real by bash against stand-in package tools.

The stand-ins record what they are asked and keep a tiny package database, so a second run
shows whether a script is idempotent, and the records show whether the password travelled on
a command line.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from actors.vm.initscripts import TITLES, render, rendered, write_scripts
from actors.vm.osimages import MATRIX, script_name

ALL = [(o, v) for o, versions in MATRIX.items() for v in versions]

STUB = """#!/bin/bash
# Records "<name> <args>" and stdin; imitates just enough of the real tool.
name=$(basename "$0")
printf '%s %s\\n' "$name" "$*" >> "$STUB_LOG"
case "$name" in
  dpkg-query) grep -qx "${@: -1}" "$STUB_DB" 2>/dev/null && echo 'install ok installed' ;;
  rpm) grep -qx "${@: -1}" "$STUB_DB" 2>/dev/null || exit 1 ;;
  apt-get|dnf) [ "$1" = install ] && echo "${@: -1}" >> "$STUB_DB" ;;
  chpasswd) printf 'stdin:%s\\n' "$(cat)" >> "$STUB_LOG" ;;
esac
exit 0
"""


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    """The scripts as the VM service writes them at start-up."""
    return write_scripts(tmp_path / "sh")


@pytest.fixture
def stubs(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dpkg-query", "rpm", "apt-get", "dnf", "systemctl", "chpasswd", "cloud-init"):
        path = bin_dir / tool
        path.write_text(STUB)
        path.chmod(0o755)
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "STUB_LOG": str(tmp_path / "log"),
        "STUB_DB": str(tmp_path / "db"),
    }


def run(script: Path, env: dict[str, str], stdin_prefix: str = "") -> str:
    text = stdin_prefix + script.read_text()
    subprocess.run(["bash", "-s"], input=text.encode(), env=env, check=True, timeout=30)
    return Path(env["STUB_LOG"]).read_text() if Path(env["STUB_LOG"]).exists() else ""


@pytest.mark.parametrize(("os_name", "version"), ALL)
def test_installs_the_agent_once_and_leaves_root_alone(
    os_name: str, version: str, scripts: Path, stubs: dict[str, str]
) -> None:
    script = scripts / script_name(os_name, version)
    first = run(script, stubs)
    installer = "dnf install" if os_name == "rockylinux" else "apt-get install"
    assert first.count(installer) == 1 and "qemu-guest-agent" in first
    assert "systemctl start qemu-guest-agent" in first
    assert "chpasswd" not in first
    Path(stubs["STUB_LOG"]).unlink()
    second = run(script, stubs)
    assert installer not in second and "apt-get update" not in second


@pytest.mark.parametrize(("os_name", "version"), ALL)
def test_root_password_goes_through_stdin_only(
    os_name: str, version: str, scripts: Path, stubs: dict[str, str]
) -> None:
    script = scripts / script_name(os_name, version)
    log = run(script, stubs, stdin_prefix="VM_ROOT_PASSWORD='s3 cr$t'\nexport VM_ROOT_PASSWORD\n")
    lines = log.splitlines()
    assert "stdin:root:s3 cr$t" in lines
    assert not any("s3 cr$t" in line for line in lines if not line.startswith("stdin:"))


def test_every_os_version_has_a_script_and_nothing_else(scripts: Path) -> None:
    assert sorted(p.name for p in scripts.glob("*.sh")) == sorted(script_name(o, v) for o, v in ALL)
    for path in scripts.glob("*.sh"):
        text = path.read_text()
        assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
        code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
        for forbidden in ("timedatectl", "localtime", "sources.list", "icmp", "mirror", "sysctl"):
            assert forbidden not in code.lower(), (path.name, forbidden)
        assert os.access(path, os.R_OK)


def test_each_script_names_its_own_os_and_file_and_nothing_is_left_to_fill() -> None:
    for (os_name, version), title in TITLES.items():
        lines = render(os_name, version).splitlines()
        assert lines[1] == f"# cairn init script for {title} cloud images."
        assert f"served at /sh/{script_name(os_name, version)}. " in lines[4]
        assert not any("@TITLE@" in line or "@NAME@" in line for line in lines)
    assert sorted(TITLES) == sorted(ALL)


def test_writing_again_keeps_right_files_and_drops_strangers(tmp_path: Path) -> None:
    """A restart leaves a script that is already right untouched (its ETag stays valid), puts
    back one that was edited, and removes a script the matrix does not name, so /sh/ never
    serves it."""
    directory = write_scripts(tmp_path / "sh")
    kept, edited = directory / "debian_12.sh", directory / "rockylinux_9.sh"
    os.utime(kept, (1_000_000, 1_000_000))
    edited.write_text("#!/bin/sh\nrm -rf /\n")
    (directory / "evil.sh").write_text("#!/bin/sh\n")
    write_scripts(directory)
    assert kept.stat().st_mtime == 1_000_000
    assert edited.read_text() == rendered()["rockylinux_9.sh"]
    assert sorted(p.name for p in directory.iterdir()) == sorted(rendered())
