"""The systemd unit of ops/deploy/systemd/: it parses as systemd reads it, and the functions sandbox
works under its hardening (emulated: its unprivileged user without capabilities, systemd's
syscall allow-list, a read-only root, a writable data directory, /proc with hidepid), since a
sandbox that cannot start there is a broken deployment."""

from __future__ import annotations

import asyncio
import configparser
import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import wait_for
from tests.ports import free_port
from tests.processes import until_ready

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "ops" / "deploy" / "systemd"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def unit_section(path: Path, wanted: str = "Service") -> dict[str, list[str]]:
    """Every ``key=value`` of one section of a unit file, repeated keys kept in order."""
    parser = configparser.RawConfigParser(strict=False, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    values: dict[str, list[str]] = {}
    section = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        if section == wanted:
            values.setdefault(key, []).append(value)
    return values


def test_the_unit_and_its_drop_in_parse_without_a_warning(tmp_path: Path) -> None:
    if SYSTEMD_ANALYZE is None:
        pytest.skip("systemd-analyze is not installed; test_the_hardening_lines covers the rest")
    # verify checks that ExecStart exists: point it at this checkout's cairn.
    unit = (UNITS / "cairn.service").read_text()
    unit = unit.replace("/opt/cairn/.venv/bin/cairn", str(Path(sys.executable).parent / "cairn"))
    unit = unit.replace("EnvironmentFile=/etc", "EnvironmentFile=-/etc")
    (tmp_path / "cairn.service").write_text(unit)
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "cairn.service"],
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:"},
        capture_output=True,
        text=True,
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_the_hardening_lines() -> None:
    unit = unit_section(UNITS / "cairn.service")
    assert unit["ExecStart"] == ["/opt/cairn/.venv/bin/cairn up"]
    assert unit["KillMode"] == ["mixed"]
    # Longer than the graceful stop (CAIRN_STOP_GRACE, 10 s) and the connections' close.
    assert int(unit["TimeoutStopSec"][0].removesuffix("s")) >= 30
    for kept_off in (
        "ProtectKernelTunables",
        "ProtectKernelLogs",
        "ProcSubset",
        "ProtectHostname",
        "RestrictNamespaces",
        "ProtectControlGroups",
    ):
        assert kept_off not in unit  # each would break bubblewrap
    # No root, no capability: nothing to lift for qm any more (docs/deploy.md).
    assert unit["User"] == ["cairn"] and unit["Group"] == ["cairn"]
    assert unit["CapabilityBoundingSet"] == [""] and unit["AmbientCapabilities"] == [""]
    assert not (UNITS / "cairn.service.d").exists()


def syscall_groups() -> dict[str, list[str]]:
    """systemd's own syscall groups (``systemd-analyze syscall-filter``): name -> members."""
    assert SYSTEMD_ANALYZE is not None
    text = subprocess.run(
        [SYSTEMD_ANALYZE, "syscall-filter", "--no-pager"], capture_output=True, text=True
    ).stdout
    groups: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif line.strip() and not line.strip().startswith("#"):
            current.append(line.strip())
    return groups


def allowed_syscalls(filter_line: str) -> list[str]:
    """The syscalls an allow-list ``SystemCallFilter=`` line lets through, groups expanded."""
    groups = syscall_groups()
    out: set[str] = set()

    def add(name: str) -> None:
        if name.startswith("@"):
            for member in groups[name]:
                add(member)
        else:
            out.add(name)

    for name in filter_line.split():
        add(name)
    return sorted(out)


# Loads a seccomp allow-list (every other syscall answers EPERM, as SystemCallErrorNumber=EPERM
# makes systemd's filter do), then runs the rest of its command line under it.
SECCOMP_EXEC = """\
import errno, os, sys
import pyseccomp as sc
names, argv = sys.argv[1].split(","), sys.argv[2:]
f = sc.SyscallFilter(defaction=sc.ERRNO(errno.EPERM))
for name in names:
    try:
        f.add_rule(sc.ALLOW, name)
    except Exception:
        pass  # not a syscall on this architecture
f.load()
os.execv(argv[0], argv)
"""


def unit_user() -> tuple[int, int]:
    """The uid and gid of the unit's user (ops/setup creates cairn); without it, nobody's."""
    name = unit_section(UNITS / "cairn.service")["User"][0]
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def prepare(data: Path, uid: int, gid: int) -> None:
    """The data directory as StateDirectory= leaves it: the unit's user's."""
    (data / "tmp").mkdir()
    (data / "seccomp_exec.py").write_text(SECCOMP_EXEC)
    for path in (data, *data.rglob("*")):
        os.chown(path, uid, gid)


def sandboxed(root: int) -> dict[int, int]:
    """pid -> host uid of every descendant of ``root`` in a user namespace other than ours."""
    own = os.readlink("/proc/self/ns/user")
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    below = {root}
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in below and pid not in below:
                below.add(pid)
                grew = True
    out: dict[int, int] = {}
    for pid in below - {root}:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/ns/user") != own:
                status = Path(f"/proc/{pid}/status").read_text()
                uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
                out[pid] = int(uid_line.split()[1])
    return out


def hidden_home_keeping(executable: str) -> str:
    """Shell lines standing in for ProtectHome=yes: an empty /root, except the folder that
    holds this interpreter when it lives there (on a developer's machine, pyenv's); on a
    server the venv's interpreter is Debian's /usr/bin/python3."""
    real = Path(os.path.realpath(executable))
    if real.parts[1] != "root":
        return "mount -t tmpfs -o mode=0755 tmpfs /root"
    keep = Path("/root", real.parts[2])
    return (
        f"mkdir /tmp/.keep-$$ && mount --bind {keep} /tmp/.keep-$$ && "
        "mount -t tmpfs -o mode=0755 tmpfs /root && "
        f"mkdir {keep} && mount --move /tmp/.keep-$$ {keep} && rmdir /tmp/.keep-$$"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="emulating the unit needs root, as systemd has")
@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="needs systemd-analyze for the syscall groups")
async def test_functions_run_as_the_units_user_under_its_hardening() -> None:
    """cairn started as the unit starts it: its user, no capability at all (bounding, inherited,
    ambient), no_new_privs, systemd's syscall allow-list, a read-only root with the data
    directory writable, /root hidden, /proc with other users' processes invisible. A function
    in each language runs, through bubblewrap, as uid 65534 inside a user namespace whose
    65534 is the unit's user on the host."""
    unit = unit_section(UNITS / "cairn.service")
    assert unit["ProtectProc"] == ["invisible"] and unit["ProtectSystem"] == ["strict"]
    syscalls = allowed_syscalls(unit["SystemCallFilter"][0])
    uid, gid = unit_user()
    port = free_port()
    data = Path(tempfile.mkdtemp(prefix="cairn-unit-"))
    try:
        prepare(data, uid, gid)
        script = (
            f"mount --bind {data} {data} && "
            "mount -t proc -o hidepid=invisible proc /proc && "
            f"{hidden_home_keeping(sys.executable)} && "
            "mount -o remount,bind,ro / && "
            f"exec setpriv --reuid={uid} --regid={gid} --clear-groups --inh-caps=-all "
            '--ambient-caps=-all --bounding-set=-all --no-new-privs "$@"'
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "CAIRN_", "PORT"))}
        env.update(
            CAIRN_DATA=str(data),
            PORT=str(port),
            TMPDIR=str(data / "tmp"),
            HOME=str(data),
            XDG_CACHE_HOME=str(data / "cache"),
            XDG_CONFIG_HOME=str(data / "config"),
        )
        python = str(Path(sys.executable).parent / "python")
        argv = [
            "unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
            python, str(data / "seccomp_exec.py"), ",".join(syscalls),
            python, str(Path(sys.executable).parent / "cairn"), "serve", "functions",
        ]  # fmt: skip
        what = "cairn under the unit's restrictions"
        async with (
            until_ready(*argv, what=what, env=env) as cairn,
            aiohttp.ClientSession() as session,
        ):
            for language, code in (
                ("python", "import os\nreturn os.getuid()"),
                ("javascript", "return process.getuid()"),
                ("typescript", "const id: number = process.getuid()\nreturn id"),
            ):
                async with session.post(
                    f"http://127.0.0.1:{port}/run-now",
                    json={"language": language, "code": code},
                ) as resp:
                    body = await resp.text()
                    assert resp.status == 200, (language, body, cairn.text())
                    assert json.loads(body)["data"] == 65534, (language, body)
            # Seen from the host while a run sleeps: every process in a sandbox (another
            # user namespace below cairn) is the unit's user, none is root.
            slow = asyncio.create_task(
                session.post(
                    f"http://127.0.0.1:{port}/run-now",
                    json={"language": "python", "code": "import time\ntime.sleep(3)"},
                )
            )
            running: dict[int, int] = {}

            def seen() -> bool:
                running.update(sandboxed(cairn.proc.pid))
                return bool(running)

            await wait_for(seen, timeout=30, what="a sandboxed process")
            assert set(running.values()) == {uid}, running
            async with await slow as resp:
                assert resp.status == 200, await resp.text()
        assert "Traceback" not in cairn.text()
    finally:
        shutil.rmtree(data, ignore_errors=True)
