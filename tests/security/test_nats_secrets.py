"""A NATS password given in NATS_URL (an operator's own server with a shared user) never
appears in what cairn prints, logs, or answers on /status and /health; NATS_URL without
NATS_KEYS is refused, saying what to set."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp

from events.nats_server import end_server, find_binary
from tests.gateway.test_cli_up import start, up_env
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
CAIRN = str(Path(sys.executable).parent / "cairn")
PASSWORD = "s3cret-Pa55-w0rd"


async def test_a_password_in_nats_url_is_shown_nowhere(tmp_path: Path) -> None:
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        str(find_binary()), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(tmp_path / "js"),
        "--user", "cairn", "--pass", PASSWORD,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    env = {
        **{k: v for k, v in up_env(tmp_path).items() if not k.startswith("NATS_")},
        "NATS_URL": f"nats://cairn:{PASSWORD}@127.0.0.1:{port}",
        "NATS_KEYS": "none",  # this server has a shared user, not cairn's keys
    }
    status_port = env["CAIRN_PORT"]
    try:
        await run_cairn(env, tmp_path, status_port, port, server.pid)
    finally:
        await end_server(server)


async def run_cairn(
    env: dict[str, str], cwd: Path, status_port: str, port: int, server: int
) -> None:
    proc, lines = await start([CAIRN, "up"], cwd, env)
    try:
        # No process but the test's own server names the password on its command line.
        assert command_lines_holding(PASSWORD) == [server]
        async with aiohttp.ClientSession() as http:
            answers = []
            for path in ("/status", "/health"):
                async with http.get(f"http://127.0.0.1:{status_port}{path}") as resp:
                    answers.append(await resp.text())
        assert "cairn:***@127.0.0.1" not in answers[0]  # not even the user
        assert f"nats://***@127.0.0.1:{port}" in answers[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        rest, _ = await asyncio.wait_for(proc.communicate(), 60)
    printed = "".join(lines) + rest.decode(errors="replace")
    assert f"cairn: nats nats://***@127.0.0.1:{port} (external)" in printed
    for text in (printed, *answers):
        assert PASSWORD not in text


def command_lines_holding(text: str) -> list[int]:
    """Pids whose command line holds ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


def test_nats_url_without_nats_keys_is_refused(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("NATS_")},
        "NATS_URL": "nats://127.0.0.1:4222",
        "CAIRN_DATA": str(tmp_path / "data"),
    }
    done = subprocess.run(
        [CAIRN, "serve", "images"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "configuration error: NATS_KEYS: is required with NATS_URL" in done.stderr
