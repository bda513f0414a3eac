"""cairn's unit holds no privilege a root-owned secret would yield to: a process with exactly
the unit's user and capability sets (emulated with setpriv, as systemd would set them) cannot
read a root-owned 0600 file (on a Proxmox node: /etc/pve/priv/), while the service's own files
stay readable. The contrasts show the emulation can tell: yesterday's set (root with a small
bounding set) and the one a switch to a sandbox user would need (CAP_SETUID) both read it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from tests.ops.test_systemd import UNITS, unit_section, unit_user

ROOT = Path(__file__).resolve().parents[2]
SECRET = "the cluster's private key\n"


def setpriv_argv(unit: Mapping[str, Sequence[str]], uid: int, gid: int) -> list[str]:
    """setpriv's options for a process as systemd starts this unit's: its user and group with
    no supplementary group, the bounding and ambient sets it names (inherited: the ambient
    ones), and no_new_privs when it asks for it."""

    def caps(key: str) -> str:
        names = " ".join(unit.get(key, [""])).split()
        return ",".join(["-all", *("+" + n.removeprefix("CAP_").lower() for n in names)])

    argv = [f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    ambient = caps("AmbientCapabilities")
    argv += [f"--inh-caps={ambient}", f"--ambient-caps={ambient}"]
    argv += [f"--bounding-set={caps('CapabilityBoundingSet')}"]
    if unit.get("NoNewPrivileges") == ["yes"]:
        argv.append("--no-new-privs")
    return argv


def test_the_setpriv_line_of_the_shipped_unit() -> None:
    unit = unit_section(UNITS / "cairn.service")
    assert setpriv_argv(unit, 998, 997) == [
        "--reuid=998", "--regid=997", "--clear-groups",
        "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--no-new-privs",
    ]  # fmt: skip
    given = {"CapabilityBoundingSet": ["CAP_SETUID CAP_KILL"], "AmbientCapabilities": ["CAP_KILL"]}
    assert setpriv_argv(given, 1, 2)[3:] == [
        "--inh-caps=-all,+kill",
        "--ambient-caps=-all,+kill",
        "--bounding-set=-all,+setuid,+kill",
    ]


@pytest.fixture
def files() -> Iterator[tuple[Path, Path]]:
    """A root-owned 0600 secret and a 0600 file of the service's own, in folders anyone may
    enter (pytest's tmp_path is root's alone)."""
    uid, gid = unit_user()
    top = Path(tempfile.mkdtemp(prefix="cairn-noroot-"))
    try:
        top.chmod(0o755)
        secret = top / "priv" / "authkey.key"
        secret.parent.mkdir(mode=0o755)
        secret.write_text(SECRET)
        secret.chmod(0o600)
        own = top / "data" / "events.sqlite3"
        own.parent.mkdir(mode=0o700)
        own.write_text("cairn's own\n")
        own.chmod(0o600)
        os.chown(own.parent, uid, gid)
        os.chown(own, uid, gid)
        yield secret, own
    finally:
        shutil.rmtree(top)


def run_as(options: list[str], *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", *options, *command], capture_output=True, text=True, timeout=30
    )


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="emulating a unit's credentials needs root and setpriv, as systemd has",
)


@needs_root
def test_the_units_credentials_cannot_read_a_root_secret(files: tuple[Path, Path]) -> None:
    secret, own = files
    uid, gid = unit_user()
    options = setpriv_argv(unit_section(UNITS / "cairn.service"), uid, gid)
    refused = run_as(options, "cat", str(secret))
    assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused
    assert SECRET not in refused.stdout
    # What the service needs stays readable: its data and the checkout it runs from.
    assert run_as(options, "cat", str(own)).stdout == "cairn's own\n"
    assert run_as(options, "cat", str(ROOT / "pyproject.toml")).stdout.startswith("[build-system]")
    # And it has nothing to regain: every set is empty.
    status = run_as(options, "grep", "^Cap", "/proc/self/status").stdout
    assert {line.split()[1] for line in status.splitlines()} == {"0000000000000000"}, status


@needs_root
def test_the_old_root_set_read_it(files: tuple[Path, Path]) -> None:
    """Before: root, bounded to CAP_SETUID CAP_SETGID CAP_CHOWN CAP_KILL, read the secret (the
    owner's bit needs no capability)."""
    secret, _ = files
    old = {"CapabilityBoundingSet": ["CAP_SETUID CAP_SETGID CAP_CHOWN CAP_KILL"]}
    done = run_as([*setpriv_argv(old, 0, 0), "--no-new-privs"], "cat", str(secret))
    assert done.stdout == SECRET


@needs_root
def test_a_user_switch_capability_would_give_root_back(files: tuple[Path, Path]) -> None:
    """Why sandboxes no longer switch to cairn-sandbox: that takes CAP_SETUID, with which the
    unit's user becomes uid 0 and reads the secret. So they run as cairn's own uid instead,
    65534 inside an unprivileged user namespace (docs/deploy.md)."""
    secret, _ = files
    uid, gid = unit_user()
    switch = {"CapabilityBoundingSet": ["CAP_SETUID"], "AmbientCapabilities": ["CAP_SETUID"]}
    python = shutil.which("python3", path="/usr/bin:/bin")
    assert python is not None
    done = run_as(
        setpriv_argv(switch, uid, gid),
        python,
        "-c",
        f"import os; os.setuid(0); print(open({str(secret)!r}).read(), end='')",
    )
    assert done.stdout == SECRET, done.stderr
