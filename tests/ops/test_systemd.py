"""The systemd unit of ops/systemd/: it parses as systemd reads it, and the functions sandbox
works under its hardening (emulated: a read-only root, a writable data directory, the
capability bounding set and no_new_privs), since a sandbox that cannot start there is a broken
deployment."""

from __future__ import annotations

import asyncio
import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from events.nats_server import free_port
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "ops" / "systemd"
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
    shutil.copytree(UNITS / "cairn.service.d", tmp_path / "cairn.service.d")
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
    for kept_off in ("ProtectKernelTunables", "RestrictNamespaces", "ProtectControlGroups"):
        assert kept_off not in unit  # each would break bubblewrap
    drop_in = unit_section(UNITS / "cairn.service.d" / "local-qm.conf")
    # An empty CapabilityBoundingSet= would leave qm (and kvm) with no capability at all.
    assert drop_in["CapabilityBoundingSet"] == ["~"]
    assert drop_in["ProtectSystem"] == ["no"] and drop_in["PrivateDevices"] == ["no"]


def _bounding_set() -> str:
    caps = unit_section(UNITS / "cairn.service")["CapabilityBoundingSet"][0].split()
    return "-all," + ",".join("+" + c.removeprefix("CAP_").lower() for c in caps)


@pytest.mark.skipif(os.geteuid() != 0, reason="emulating the unit needs root, as systemd has")
async def test_functions_run_under_the_units_hardening(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "data"
    data.mkdir()
    # StateDirectory (the data directory stays writable: a mount of its own), ProtectSystem=
    # strict (everything else read-only, the checkout included), then the bounding set and
    # no_new_privs for cairn itself. PrivateTmp is stood in for by TMPDIR inside the data
    # directory: a tmpfs over /tmp would hide a checkout that lives there.
    script = (
        f"mount --bind {data} {data} && mount -o remount,bind,ro / && "
        f'exec setpriv --bounding-set={_bounding_set()} --inh-caps=-all --no-new-privs "$@"'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "CAIRN_", "PORT"))}
    (data / "tmp").mkdir()
    env.update(CAIRN_DATA=str(data), PORT=str(port), TMPDIR=str(data / "tmp"))
    proc = await asyncio.create_subprocess_exec(
        "unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
        str(Path(sys.executable).parent / "cairn"), "serve", "functions",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
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

        await wait_for(ready, timeout=120, what="cairn under the unit's restrictions")
        async with aiohttp.ClientSession() as session:
            for language, code in (
                ("python", "import os\nreturn os.getuid() != 0"),
                ("javascript", "return process.getuid() !== 0"),
                ("typescript", "const ok: boolean = process.getuid() !== 0\nreturn ok"),
            ):
                async with session.post(
                    f"http://127.0.0.1:{port}/run-now", json={"language": language, "code": code}
                ) as resp:
                    body = await resp.text()
                    assert resp.status == 200, (language, body, b"".join(output).decode())
                    assert '"data":true' in body.replace(" ", ""), body
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
        await reader
    assert b"Traceback" not in b"".join(output)
