"""`cairn up` started the way the README says, as a separate process: it brings up the
embedded nats-server and the health route, then stops cleanly on SIGINT and on SIGTERM,
leaving nothing behind that breaks the next start."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.processes import cairn_run, cairn_start, own_ports_env

ROOT = Path(__file__).resolve().parents[2]


def up_env(tmp_path: Path, *more_ports: str) -> dict[str, str]:
    """The environment of a `cairn` process with ports of its own; `more_ports` names further
    variables to give a port, picked with the others so no two are the same."""
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    env.update(own_ports_env(tmp_path, *more_ports), SEARCH_INBOX=str(tmp_path / "inbox"))
    return env


async def start(
    cmd: list[str], cwd: Path, env: dict[str, str]
) -> tuple[asyncio.subprocess.Process, list[str]]:
    # A process group of its own, as a shell gives a foreground job.
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    while True:
        raw = await asyncio.wait_for(proc.stdout.readline(), 120)
        if not raw:
            raise AssertionError("cairn exited before it was ready:\n" + "".join(lines))
        lines.append(raw.decode())
        if "cairn: ready" in lines[-1]:
            return proc, lines


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def leave_streams_mid_way(env: dict[str, str]) -> None:
    """Two clients that go away while their streams run: each leaves one access line."""
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"http://127.0.0.1:{env['VM_PORT']}/api/vm/install",
            json={"os": "debian", "version": "12"},
        ) as resp:
            assert resp.status == 200
            await resp.content.readline()  # the first record's line, then hang up
        code = "import time\nfor i in range(50):\n  print(i, flush=True)\n  time.sleep(0.1)"
        async with session.post(
            f"http://127.0.0.1:{env['FUNCTIONS_PORT']}/run-now",
            json={"language": "python", "code": code, "stream": True},
        ) as resp:
            assert resp.status == 200
            await resp.content.readline()


async def run_once(cmd: list[str], tmp_path: Path, sig: signal.Signals) -> str:
    env = up_env(tmp_path)
    proc, lines = await start(cmd, tmp_path, env)
    output = "".join(lines)
    match = re.search(r"cairn: nats nats://127\.0\.0\.1:(\d+) \(embedded\)", output)
    assert match, output
    nats_port = int(match.group(1))
    assert port_open(nats_port)
    assert f"cairn: console on http://127.0.0.1:{env['CAIRN_PORT']}/" in output
    assert "GET     /health" not in output  # the routes are listed with -v only

    ports = {
        "status": env["CAIRN_PORT"],
        "vm": env["VM_PORT"],
        "functions": env["FUNCTIONS_PORT"],
        "images": env["IMAGES_PORT"],
    }
    async with aiohttp.ClientSession() as session:
        for name, port in ports.items():  # one health shape everywhere
            async with session.get(f"http://127.0.0.1:{port}/health") as resp:
                assert resp.status == 200, name
                health = await resp.json()
            assert {k: health[k] for k in ("service", "status", "problems", "warnings")} == {
                "service": name,
                "status": "ok",
                "problems": [],
                "warnings": [],
            }
        async with session.get(f"http://127.0.0.1:{env['CAIRN_PORT']}/status") as resp:
            assert resp.status == 200
            status = await resp.json()
    assert status["nats"] == f"nats://127.0.0.1:{nats_port}"
    assert status["status"] == "up"
    services = status["services"]
    assert set(services) == {"vm", "functions", "search", "images"}
    assert all(s["status"] == "up" and s["problems"] == [] for s in services.values())
    assert services["functions"]["url"] == f"http://127.0.0.1:{env['FUNCTIONS_PORT']}"
    # No MAIN_NODE: the VM service drives the simulated cluster, and says so.
    assert services["vm"]["cluster"] == "simulated"
    await leave_streams_mid_way(env)

    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # Ctrl-C in a terminal: the whole foreground group
    else:
        proc.send_signal(sig)
    assert proc.stdout is not None
    rest = (await asyncio.wait_for(proc.stdout.read(), 60)).decode()
    assert await proc.wait() == 0, output + rest
    assert "cairn: stopping" in rest
    assert "Traceback" not in output + rest
    # A client that left mid-stream is one access line, nothing more.
    assert len(re.findall(r"vm POST /api/vm/install 200 ", output + rest)) == 1
    assert len(re.findall(r"functions POST /run-now 200 ", output + rest)) == 1
    assert "Error handling request" not in output + rest
    # The server was stopped by cairn, in order, not killed by the signal and "restarted".
    assert "restart" not in output + rest
    assert not port_open(nats_port), "the embedded nats-server outlived cairn"
    return output


@pytest.mark.slow
async def test_ops_run_starts_everything_and_stops_on_sigint_then_again_on_sigterm(
    tmp_path: Path,
) -> None:
    first = await run_once([str(ROOT / "ops" / "run")], tmp_path, signal.SIGINT)
    # The same data directory again: nothing stale may stop the second start.
    second = await run_once(
        [str(Path(sys.executable).parent / "cairn"), "up"], tmp_path, signal.SIGTERM
    )
    assert "cairn: data in" in first and "cairn: data in" in second


async def test_a_taken_port_is_a_clear_configuration_error(tmp_path: Path) -> None:
    env = up_env(tmp_path)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        env["PORT"] = str(blocker.getsockname()[1])
        status, _, err = await cairn_run("serve", "images", env=env, cwd=tmp_path)
    assert status == 2
    assert f"cannot listen on 127.0.0.1:{env['PORT']}" in err


async def test_a_bad_embedding_provider_stops_the_start_as_a_setting(tmp_path: Path) -> None:
    # A misspelt provider is the admin's setting to fix, not a fault that downs search alone
    # and lets the rest start as if nothing were wrong.
    env = up_env(tmp_path)
    env["EMBEDDING_PROVIDER"] = "torch"
    status, _, err = await cairn_run("serve", "search", env=env, cwd=tmp_path)
    assert status == 2, err
    assert "EMBEDDING_PROVIDER: must be local, e5, openai or none (got 'torch')" in err
    assert "Traceback" not in err


async def test_the_first_start_says_where_to_go_and_is_healthy_only_once_ready(
    tmp_path: Path,
) -> None:
    """A first start (the search model is built, a line says so): the addresses, console
    first, and "ready" in about ten lines, no third-party warning or chatter; the gateway's
    /health is 503 `starting` until every service listens."""
    env = up_env(tmp_path, "SEARCH_PORT")
    proc = await cairn_start("up", env=env, cwd=tmp_path, start_new_session=True)
    assert proc.stdout is not None
    lines: list[str] = []
    early: tuple[int, dict[str, object]] | None = None
    health = f"http://127.0.0.1:{env['CAIRN_PORT']}/health"
    try:
        async with aiohttp.ClientSession() as session:
            while not lines or "cairn: ready" not in lines[-1]:
                raw = await asyncio.wait_for(proc.stdout.readline(), 180)
                assert raw, "cairn exited before it was ready:\n" + "".join(lines)
                lines.append(raw.decode())
                if early is None and "cairn: console on" in lines[-1]:
                    # The gateway listens; the VM service (the next to start) cannot yet.
                    async with session.get(health) as resp:
                        early = (resp.status, await resp.json())
            async with session.get(health) as resp:
                late = (resp.status, await resp.json())
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
    lines = [line for line in lines if "cairn.access" not in line]  # the test's own request
    output = "".join(lines)
    assert len(lines) <= 11, output
    addresses = [line.split()[1] for line in lines if " on http://" in line]
    assert addresses == ["console", "vm", "functions", "search", "images"], output
    assert f"cairn: console on http://127.0.0.1:{env['CAIRN_PORT']}/\n" in lines
    assert f"cairn: search on http://127.0.0.1:{env['SEARCH_PORT']} " in output
    for noise in ("DeprecationWarning", "root:", "Quantization", "    GET"):
        assert noise not in output, output
    assert early is not None
    status, body = early
    assert (status, body["status"]) == (503, "starting"), early
    assert body["problems"] == ["starting: functions, images, search, vm not listening yet"]
    assert late[0] == 200 and late[1]["status"] == "ok", late


async def test_cairn_sim_starts_without_third_party_warnings(tmp_path: Path) -> None:
    sim = ("sim", "--root", str(tmp_path / "sim"), "--delay-scale", "0")
    proc = await cairn_start(*sim, env=os.environ, cwd=tmp_path)
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        while not any(line.startswith("PATH=") for line in lines):
            raw = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert raw, "cairn sim ended:\n" + "".join(lines)
            lines.append(raw.decode())
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
    assert len(lines) <= 20 and lines[0].startswith("# simulated Proxmox VE cluster")
    assert not [line for line in lines if "Warning" in line], lines
