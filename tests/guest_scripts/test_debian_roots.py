"""The Debian init scripts, run as cairn runs them, inside debootstrapped Debian 11, 12 and 13.

Each test unpacks a fresh minbase root (tests.debian_root), adds the default user the way
cloud-init does (`debian`, passwordless sudo), pipes `debian_<v>.sh` to `sudo -n bash -s`
run as that user, exactly as cairn does over SSH (the password, when set, as the
`VM_ROOT_PASSWORD=...; export` head that actors.vm.guest.init_stdin writes), and looks at the
result from outside: the package database, the unit and its udev rule, /etc/shadow checked with
crypt(3), and a snapshot of /etc before and after.

Slow and networked (apt-get downloads from deb.debian.org): run with `ops/test --install`.
"""

from __future__ import annotations

import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from actors.vm.guest import init_stdin
from actors.vm.initscripts import render
from tests.debian_root import CODENAMES, DebianRoot, changed, snapshot, unpack
from tests.debian_root import skip_reason as root_skip_reason

pytestmark = [
    pytest.mark.skipif(root_skip_reason() is not None, reason=str(root_skip_reason())),
    pytest.mark.timeout(900),
]

VERSIONS = sorted(CODENAMES)
# Spaces, both quotes, a command substitution in both spellings, a non-ASCII letter.
PASSWORD = "p w 'q\" $(id) `id` é"
AGENT = "qemu-guest-agent"
USER = "debian"  # the default user of Debian's cloud images
LOCKS = {
    "apt lists lock": "var/lib/apt/lists/lock",
    "dpkg frontend lock": "var/lib/dpkg/lock-frontend",
    "dpkg lock": "var/lib/dpkg/lock",
}
HOLD_SECONDS = 20


def run_script(root: DebianRoot, password: str = "") -> subprocess.CompletedProcess[bytes]:
    """`sudo -n bash -s` as the default user with the script on stdin, as
    actors.vm.guest.run_init runs it over SSH."""
    script = render("debian", root.version)
    command = ["runuser", "-u", USER, "--", "sudo", "-n", "bash", "-s"]
    return root.run(command, input=init_stdin(script, password), timeout=800)


def succeeded(result: subprocess.CompletedProcess[bytes]) -> list[str]:
    """The lines the script printed; it must exit 0, say nothing on stderr and print only its
    own `cairn-init:` lines (no apt or dpkg progress)."""
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, f"exit {result.returncode}\n{out}\n{err}"
    assert err == ""
    lines = out.splitlines()
    assert lines and all(line.startswith("cairn-init: ") for line in lines), out
    return lines


def installed(root: DebianRoot) -> set[str]:
    listing = root.sh("dpkg-query -W -f='${db:Status-Status} ${Package}\\n'")
    return {line.split()[1] for line in listing.splitlines() if line.startswith("installed ")}


def assert_agent_enabled(root: DebianRoot) -> None:
    """Installed and enabled as far as a root without a running systemd can show it: the unit
    exists, and either [Install] links it into a target or (Debian's packaging, where the unit
    is `static`) the udev rule pulls it in when the virtio port appears."""
    assert AGENT in installed(root)
    state = root.sh(f"systemctl is-enabled {AGENT} || true").strip()
    assert state in ("enabled", "static"), state
    if state == "static":
        rules = root.sh("cat /lib/udev/rules.d/*qemu-guest-agent*.rules")
        assert 'SYSTEMD_WANTS}="qemu-guest-agent.service"' in rules
    else:
        assert list(root.path.glob(f"etc/systemd/system/*.wants/{AGENT}.service"))


def expected_etc_changes(root: DebianRoot, new_packages: set[str]) -> set[str]:
    """What installing the agent may change in /etc: the new packages' own files, their
    init links (update-rc.d, systemd), and the dynamic linker's cache."""
    paths = {"ld.so.cache"}
    for package in new_packages:
        for line in root.sh(f"dpkg -L {package}").splitlines():
            if line.startswith("/etc/"):
                paths.add(line.removeprefix("/etc/"))
    for link in root.path.glob("etc/rc?.d/*"):
        if link.name.endswith(AGENT):
            paths.add(str(link.relative_to(root.path / "etc")))
    for link in root.path.glob("etc/systemd/system/*.wants/*"):
        if AGENT in link.name:
            paths.add(str(link.relative_to(root.path / "etc")))
    return paths


def root_hash(root: DebianRoot) -> str:
    for line in (root.path / "etc/shadow").read_text().splitlines():
        name, hashed = line.split(":")[:2]
        if name == "root":
            return hashed
    raise AssertionError("no root entry in /etc/shadow")


def verifies(password: str, hashed: str) -> bool:
    """crypt(3) of the host's libc (Python 3.11's crypt module), not the script's own check."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    return crypt.crypt(password, hashed) == hashed


@pytest.fixture(params=VERSIONS, ids=[f"debian{v}" for v in VERSIONS])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> DebianRoot:
    """A fresh root with the cloud image's default user, as cloud-init leaves it."""
    root = unpack(str(request.param), tmp_path / "root")
    root.sh(
        f"useradd --create-home --shell /bin/bash {USER} && "
        f"echo '{USER} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/90-cloud-init-users"
    )
    return root


def test_without_a_password_installs_the_agent_and_changes_nothing_else(root: DebianRoot) -> None:
    etc, shadow, packages = snapshot(root.path / "etc"), root_hash(root), installed(root)
    assert AGENT not in packages

    assert succeeded(run_script(root)) == [
        "cairn-init: installing qemu-guest-agent",
        "cairn-init: done",
    ]
    assert_agent_enabled(root)
    after = snapshot(root.path / "etc")
    new = installed(root) - packages
    assert changed(etc, after) <= expected_etc_changes(root, new)
    assert "shadow" not in changed(etc, after) and root_hash(root) == shadow

    state = snapshot(root.path / "var/lib")
    assert succeeded(run_script(root)) == [
        "cairn-init: qemu-guest-agent already installed",
        "cairn-init: done",
    ]
    assert changed(after, snapshot(root.path / "etc")) == set()
    assert changed(state, snapshot(root.path / "var/lib")) == set()


def test_the_password_is_set_verbatim_once(root: DebianRoot) -> None:
    etc, packages = snapshot(root.path / "etc"), installed(root)

    first = run_script(root, PASSWORD)
    assert succeeded(first) == [
        "cairn-init: installing qemu-guest-agent",
        "cairn-init: setting the root password",
        "cairn-init: done",
    ]
    hashed = root_hash(root)
    assert verifies(PASSWORD, hashed)
    assert not verifies("p w 'q\" uid=0(root) gid=0(root) groups=0(root) `id` é", hashed)
    assert_agent_enabled(root)
    after = snapshot(root.path / "etc")
    allowed = expected_etc_changes(root, installed(root) - packages) | {"shadow"}
    assert changed(etc, after) <= allowed and "shadow" in changed(etc, after)

    second = run_script(root, PASSWORD)
    assert succeeded(second) == [
        "cairn-init: qemu-guest-agent already installed",
        "cairn-init: root password already set",
        "cairn-init: done",
    ]
    assert root_hash(root) == hashed  # same salt: chpasswd did not run again
    assert changed(after, snapshot(root.path / "etc")) == set()

    # A different password is a change the script makes.
    assert "cairn-init: setting the root password" in succeeded(run_script(root, "other"))
    assert verifies("other", root_hash(root))


HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o640)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the fcntl lock apt and dpkg take
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_waits_for_another_package_manager_holding_a_lock(root: DebianRoot, lock: str) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root.path / LOCKS[lock]), str(HOLD_SECONDS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        started = time.monotonic()
        lines = succeeded(run_script(root))
        waited = time.monotonic() - started
        assert holder.poll() is not None, "the script finished while the lock was still held"
    finally:
        holder.kill()
        holder.wait()
    assert lines[0] == "cairn-init: installing qemu-guest-agent"
    assert lines[-1] == "cairn-init: done"
    waiting = [line for line in lines if "waiting for another package manager" in line]
    assert waiting and "/" + LOCKS[lock] in waiting[0], lines
    assert waited >= HOLD_SECONDS - 2
    assert_agent_enabled(root)


def test_gives_up_on_a_lock_held_too_long_with_apt_s_words(root: DebianRoot) -> None:
    """The bound: with LOCK_WAIT cut to 4 s (600 in the script), a lock held for 60 s ends the
    script with status 100 after about 4 s, saying what it waited for, and installs nothing."""
    script = render("debian", root.version)
    assert script.count("\nLOCK_WAIT=600\n") == 1
    script = script.replace("\nLOCK_WAIT=600\n", "\nLOCK_WAIT=4\n")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root.path / LOCKS["apt lists lock"]), "60"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        started = time.monotonic()
        result = root.run(
            ["runuser", "-u", USER, "--", "sudo", "-n", "bash", "-s"],
            input=init_stdin(script, ""),
            timeout=60,
        )
        took = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    err = result.stderr.decode()
    assert result.returncode == 100, (result.returncode, err)
    assert 3 <= took < 30  # bash counts whole seconds
    assert "cairn-init: gave up after 4 s waiting for another package manager:" in err
    assert "/var/lib/apt/lists/lock" in err
    assert AGENT not in installed(root)


def test_a_failing_mirror_fails_at_once_with_apt_s_last_lines(root: DebianRoot) -> None:
    """Not every failure is a lock: with the mirror refusing connections the script stops at
    once (no 10-minute wait), exits non-zero and shows apt's own last lines on stderr."""
    refused = "http://127.0.0.1:9/debian"
    codename = CODENAMES[root.version]
    root.sh(
        f"rm -f /etc/apt/sources.list.d/*; "
        f"echo 'deb {refused} {codename} main' > /etc/apt/sources.list; "
        "rm -rf /var/lib/apt/lists/*"
    )
    started = time.monotonic()
    result = run_script(root)
    took = time.monotonic() - started
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode != 0
    assert took < 60
    assert out.splitlines() == ["cairn-init: installing qemu-guest-agent"]
    assert "cairn-init: apt-get failed with status" in err
    # apt-get update exits 0 with a warning naming the mirror; the failure shows it.
    assert "127.0.0.1:9" in err and "Unable to locate package qemu-guest-agent" in err
    assert "waiting for another package manager" not in out + err
