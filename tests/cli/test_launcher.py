"""`cairn vm|fn|images` start without the server side: a script calling them in a loop does not
pay for importing aiohttp, SQLAlchemy and the actors on every call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.ports import free_port

CAIRN = str(Path(sys.executable).parent / "cairn")

PROBE = """
import sys
from gateway.launcher import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("aiohttp", "sqlalchemy", "pykka", "nats", "actors.platform")
               if m in sys.modules)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
raise SystemExit(code)
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    closed = f"http://127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there
    env = {
        **os.environ,
        "CAIRN_VM_URL": closed,
        "CAIRN_FUNCTIONS_URL": closed,
        "CAIRN_IMAGES_URL": closed,
        "CAIRN_TOKEN": "",
    }
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_the_daily_commands_run_without_importing_the_server() -> None:
    for args in (["vm", "list", "--json"], ["fn", "list", "--json"], ["images", "ls", "--json"]):
        done = run(*args)
        assert done.returncode == 3, done.stderr  # cannot reach cairn
        assert json.loads(done.stdout)["exit"] == 3
        assert "HEAVY=\n" in done.stderr + "\n", done.stderr


def test_other_commands_go_to_the_full_command_line() -> None:
    done = run("--version")
    assert done.returncode == 0 and done.stdout.startswith("cairn ")
    done = run("vm")  # a usage error is still argparse's, exit 2
    assert done.returncode == 2 and "usage: cairn vm" in done.stderr


def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    """`cairn … --json | head -1`: the reader left before cairn wrote; no traceback, exit 141
    as for any program ended by a closed pipe."""
    closed = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    env = {
        **os.environ,
        "CAIRN_VM_URL": closed,
        "CAIRN_DATA": str(tmp_path / "data"),
        "CAIRN_TOKEN": "",
    }
    for args in (["vm", "list", "--json"], ["token", "list", "--json"]):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before anything is written
        try:
            done = subprocess.run(
                [CAIRN, *args],
                stdout=write,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=tmp_path,
                timeout=60,
            )
        finally:
            os.close(write)
        assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
        assert done.returncode == 141, (args, done.stderr)
