"""One `cairn up` for the command-line tests, started once for this folder as a user starts it
(a separate process, the simulated cluster, the vm, functions and images services on ports of
their own), and ways to run `cairn vm|fn|images` against it: in this process (fast, for most
tests) or as the real `cairn` program (its exit code and its output as they arrive)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from pvesim.state import Store

from gateway.cli import common as cli_common
from gateway.cli import functions as cli_fn
from gateway.cli import images as cli_images
from gateway.cli import vm as cli_vm
from tests.processes import own_ports_env

CAIRN = str(Path(sys.executable).parent / "cairn")
GROUPS = {"vm": cli_vm, "fn": cli_fn, "images": cli_images}


@attrs.frozen
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        import json

        return json.loads(self.out)


@attrs.frozen
class Cairn:
    env: dict[str, str]
    data: Path

    def url(self, service: str) -> str:
        port = self.env[{"vm": "VM_PORT", "fn": "FUNCTIONS_PORT", "images": "IMAGES_PORT"}[service]]
        return f"http://127.0.0.1:{port}"

    def run(self, *argv: str, env: Mapping[str, str] | None = None) -> Result:
        """`cairn ARGV` in this process (the same parser and handlers as the program)."""
        out, err = io.StringIO(), io.StringIO()
        module = GROUPS[argv[0]]
        code = cli_common.main(module.register, argv, {**self.env, **(env or {})}, out, err)
        return Result(code, out.getvalue(), err.getvalue())

    def program(self, *argv: str, env: Mapping[str, str] | None = None) -> Result:
        """`cairn ARGV` as its own process."""
        done = subprocess.run(
            [CAIRN, *argv],
            env={**self.env, **(env or {})},
            cwd=self.data.parent,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    @contextlib.contextmanager
    def sim_delays(self, scale: float) -> Iterator[None]:
        """The simulated cluster's delays at ``scale`` (1: a real node's) while the block runs,
        then as before: for a test that must act while an install still runs, however late a
        loaded machine lets it act."""
        store = Store(self.data / "pvesim")
        before = store.delay_scale()
        store.update_settings(delay_scale=scale)
        try:
            yield
        finally:
            store.update_settings(delay_scale=before)

    def start(self, *argv: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
        """`cairn ARGV` as its own process, still running, with Ctrl-C (SIGINT) acting as at a
        terminal: a test run in the background (`ops/test &`, nohup) passes SIGINT on ignored,
        and Python then never raises KeyboardInterrupt."""
        return subprocess.Popen(
            ["env", "--default-signal=INT", CAIRN, *argv],
            env={**self.env, **(env or {})},
            cwd=self.data.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def cairn_env(root: Path, extra: Sequence[str] = ()) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NATS_URL", "MAIN_NODE", "CAIRN_TOKEN", "CAIRN_TOKEN_FILE")
        and not k.startswith(("CAIRN_VM_", "CAIRN_FUNCTIONS_", "CAIRN_IMAGES_"))
    }
    env.update(own_ports_env(root), CAIRN_SERVICES="vm,functions,images", PYTHONUNBUFFERED="1")
    return env


# Ports are checked free when picked, and taken a moment later by `cairn up`: another test
# session on the machine (two engineers' runs) may bind one in between. Such a start is tried
# again on other ports; any other failure to start is the test's failure.
PORT_TAKEN = "address already in use"
STARTS = 3


@pytest.fixture(scope="package")
def cairn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cairn]:
    root = tmp_path_factory.mktemp("cli")
    for attempt in range(1, STARTS + 1):
        env = cairn_env(root)
        log = (root / "cairn.log").open("w+")
        proc = subprocess.Popen(
            [CAIRN, "up"],
            env=env,
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            if _wait_ready(proc, root / "cairn.log", retry=attempt < STARTS):
                yield Cairn(env, root / "data")
                return
        finally:
            _stop(proc)
            log.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_ready(proc: subprocess.Popen[bytes], log: Path, *, retry: bool) -> bool:
    """True once `cairn up` is ready; False when it stopped on a port taken since it was
    picked (and ``retry`` allows another start)."""
    import time

    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        text = log.read_text()
        if "cairn: ready" in text:
            return True
        if proc.poll() is not None:
            if retry and PORT_TAKEN in text:
                return False
            raise AssertionError("cairn up exited before it was ready:\n" + text)
        time.sleep(0.2)  # polling a log file for a line: no event to wait on
    raise AssertionError("cairn up was not ready in 150 s:\n" + log.read_text())
