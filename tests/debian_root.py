"""Debian roots for tests: debootstrapped once per release, cached as a tarball, entered as root.

A root is Debian's `minbase` variant plus systemd, sudo and python3 (a cloud image and a
Proxmox node have them; systemd is not running inside the root), built by `debootstrap` from
deb.debian.org. The first build of a release takes a minute or two and needs the network; it is
kept as `<cache>/<codename>-minbase+systemd+sudo+python3-r<N>.tar` and every later root is unpacked
from that tarball in seconds. The cache is `$CAIRN_DEBIAN_ROOTS`, else
`/var/cache/cairn/debian-roots`.

Commands run with the root as the `/` of a private mount namespace (`unshare --mount`, then
`pivot_root` and the host's tree detached: a plain chroot would do but for bubblewrap, since the
kernel refuses a chrooted process a user namespace), with /proc, /sys, /dev and /run mounted:
the mounts belong to the namespace and disappear with its last process, so nothing is left
mounted on the host even when a test is killed. The root has its own host name (a UTS
namespace), which its /etc/hosts resolves as a cloud image's does. With
`isolated=True` they also get a network namespace of their own with nothing but loopback, so a
service started inside listens on its default ports without meeting the host's. Needs root.

    python -m tests.debian_root build 12      # fill the cache for Debian 12
    python -m tests.debian_root shell 13 DIR  # unpack Debian 13 into DIR and open a shell there
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import attrs

MIRROR = "http://deb.debian.org/debian"
CODENAMES = {"11": "bullseye", "12": "bookworm", "13": "trixie"}
# Packages added to minbase, which every cloud image and Proxmox node has: systemd (so that
# `systemctl enable` and unit files are real), sudo (cairn runs the init script with
# `sudo -n bash -s`) and python3 (cloud-init's language; cairn's guest proof needs it).
INCLUDE = ("systemd", "sudo", "python3")
# Part of the tarball's name: bump it when what a root gets (INCLUDE, _prepare) changes, so a
# cache made by an older version of this module is not used.
REVISION = 2
# A service may not start inside a chroot (no init is running); 101 is "action forbidden".
POLICY_RC_D = "#!/bin/sh\n# tests.debian_root: no service starts inside a test chroot.\nexit 101\n"
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "USER": "root",
    "LOGNAME": "root",
}
# Run inside `unshare --mount`: mount what a package manager and services need, then make the
# root the namespace's own root with pivot_root (not a bare chroot: the kernel refuses user
# namespaces, hence bubblewrap's sandbox, to a chrooted process) and detach the host's tree.
_ENTER = """\
set -e
r=$1; isolated=$2; shift 2
[ "$isolated" = 0 ] || ip link set lo up
hostname "$(cat "$r/etc/hostname")"
mount --make-rprivate /
mount --bind "$r" "$r"
mount -t proc proc "$r/proc"
mount -t sysfs sysfs "$r/sys"
mount --rbind /dev "$r/dev"
mount -t tmpfs tmpfs "$r/run"
mkdir -p "$r/run/lock" "$r/mnt"
cd "$r"
pivot_root . mnt
exec chroot . sh -c 'umount -l /mnt && exec "$@"' sh "$@"
"""


class RootUnavailable(Exception):
    """The machine cannot build or enter a Debian root (not root, no debootstrap, no network)."""


def cache_dir() -> Path:
    return Path(os.environ.get("CAIRN_DEBIAN_ROOTS", "/var/cache/cairn/debian-roots"))


def tarball_path(version: str) -> Path:
    return cache_dir() / f"{CODENAMES[version]}-minbase+{'+'.join(INCLUDE)}-r{REVISION}.tar"


def debootstrap_command(version: str, target: Path) -> list[str]:
    return [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(INCLUDE)}",
        CODENAMES[version],
        str(target),
        MIRROR,
    ]


ENABLE_ENV = "CAIRN_ROOT_TESTS"


def skip_reason() -> str | None:
    """Why the Debian-root tests are skipped in this run, or None: they are slow and need the
    network, so they run only when asked (`ops/test --install` sets CAIRN_ROOT_TESTS=1)."""
    if os.environ.get(ENABLE_ENV) != "1":
        return f"Debian-root tests run with `ops/test --install` ({ENABLE_ENV}=1)"
    return unavailable_reason()


def unavailable_reason() -> str | None:
    """Why roots cannot be used here, or None."""
    if os.geteuid() != 0:
        return "Debian roots need root (chroot, mount)"
    for tool in ("debootstrap", "unshare", "pivot_root", "chroot", "tar", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install debootstrap util-linux)"
    return None


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_tarball(version: str) -> Path:
    """The cached tarball of a release's root, built with debootstrap if absent."""
    reason = unavailable_reason()
    if reason:
        raise RootUnavailable(reason)
    tarball = tarball_path(version)
    with _locked(tarball.with_suffix(".lock")):
        if tarball.exists():
            return tarball
        work = Path(tempfile.mkdtemp(prefix=f"{CODENAMES[version]}-", dir=cache_dir()))
        try:
            target = work / "root"
            started = time.monotonic()
            built = subprocess.run(
                debootstrap_command(version, target), capture_output=True, text=True, check=False
            )
            if built.returncode != 0:
                tail = "\n".join((built.stdout + built.stderr).splitlines()[-15:])
                raise RootUnavailable(f"debootstrap {CODENAMES[version]} failed:\n{tail}")
            _prepare(target)
            partial = tarball.with_suffix(".tar.part")
            subprocess.run(
                ["tar", "-C", str(target), "--numeric-owner", "--xattrs", "-cf", str(partial), "."],
                check=True,
            )
            partial.rename(tarball)
            print(
                f"debian_root: built {tarball.name} in {time.monotonic() - started:.0f} s",
                file=sys.stderr,
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return tarball


HOSTNAME = "debian-root"


def _prepare(target: Path) -> None:
    """What every root gets beyond debootstrap: no service starts, name resolution works, and
    a host name of its own that /etc/hosts resolves (the installer's or cloud-init's job)."""
    (target / "etc/hostname").write_text(f"{HOSTNAME}\n")
    (target / "etc/hosts").write_text(
        f"127.0.0.1\tlocalhost\n127.0.1.1\t{HOSTNAME}\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    )
    policy = target / "usr/sbin/policy-rc.d"
    policy.write_text(POLICY_RC_D)
    policy.chmod(0o755)
    resolv = target / "etc/resolv.conf"
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    shutil.copyfile("/etc/resolv.conf", resolv)
    # Package downloads debootstrap left behind are not part of a fresh system.
    for deb in (target / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()


@attrs.frozen
class DebianRoot:
    """An unpacked root at `path`; `run` executes a command inside it as root."""

    version: str
    path: Path

    def command(self, argv: Sequence[str], *, isolated: bool = False) -> list[str]:
        """The host command line that runs `argv` inside the root (`isolated`: loopback only)."""
        unshare = ["unshare", "--mount", "--uts", *(["--net"] if isolated else []), "--"]
        return [*unshare, "sh", "-c", _ENTER, "sh", str(self.path), str(int(isolated)), *argv]

    def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 900,
        check: bool = False,
        isolated: bool = False,
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            self.command(argv, isolated=isolated),
            input=input,
            env={**ENV, **(env or {})},
            capture_output=True,
            timeout=timeout,
            check=check,
        )

    def sh(self, script: str, *, timeout: float = 900) -> str:
        """Run a shell snippet inside the root; its stdout, or an error naming its output."""
        result = self.run(["sh", "-c", script], timeout=timeout)
        if result.returncode != 0:
            raise AssertionError(
                f"{script!r} exited {result.returncode}:\n{result.stdout.decode(errors='replace')}"
                f"{result.stderr.decode(errors='replace')}"
            )
        return result.stdout.decode()


def unpack(version: str, dest: Path) -> DebianRoot:
    """A fresh root of Debian `version` at `dest` (an empty or absent directory)."""
    tarball = ensure_tarball(version)
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["tar", "-C", str(dest), "--numeric-owner", "--xattrs", "-xpf", str(tarball)], check=True
    )
    return DebianRoot(version=version, path=dest)


def snapshot(directory: Path) -> dict[str, str]:
    """Every entry under `directory` -> its kind, owner, mode and content (or link target)."""
    entries: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            info = path.lstat()
            head = f"{info.st_uid}:{info.st_gid} {info.st_mode:o}"
            if path.is_symlink():
                entries[str(path.relative_to(directory))] = f"{head} -> {os.readlink(path)}"
            elif path.is_file():
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                entries[str(path.relative_to(directory))] = f"{head} {digest}"
            else:
                entries[str(path.relative_to(directory))] = head
    return entries


def changed(before: Mapping[str, str], after: Mapping[str, str]) -> set[str]:
    """The paths added, removed or altered between two snapshots."""
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def main(argv: Sequence[str]) -> int:
    if len(argv) >= 2 and argv[0] == "build":
        for version in argv[1:]:
            print(ensure_tarball(version))
        return 0
    if len(argv) == 3 and argv[0] == "shell":
        root = unpack(argv[1], Path(argv[2]))
        return subprocess.run(root.command(["bash", "-l"]), env=ENV, check=False).returncode
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
