"""Start-up fails loudly: `cairn up` pointed at a closed NATS server with keys it does not know
ends, naming the server and the refusal, instead of sitting "starting" in silence; and a
signal ends a start-up that waits for a NATS server that never answers."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actors.platform import open_runtime
from events.access import NatsAccess
from events.bus import BusRefused
from events.credentials import Keyring
from events.nats_server import EmbeddedNats
from events.permissions import Role
from tests.gateway.test_cli_up import up_env
from tests.processes import cairn_run, cairn_start

CAIRN = str(Path(sys.executable).parent / "cairn")
# What the process may take to start Python and import cairn on a loaded machine: not the
# refusal's own time, which the in-process test bounds.
START_UP = 60.0
STOP_GRACE = 2.0


@pytest.fixture
async def closed(tmp_path: Path) -> AsyncIterator[EmbeddedNats]:
    async with EmbeddedNats(tmp_path / "nats") as server:
        yield server


def wrong_keys_env(tmp_path: Path, server: EmbeddedNats) -> dict[str, str]:
    stranger = Keyring.create(tmp_path / "stranger")  # a whole keyring, none of it known
    return {**up_env(tmp_path), "NATS_URL": server.url, "NATS_KEYS": str(stranger.path)}


async def test_cairn_up_with_a_wrong_key_exits_naming_the_refusal(
    closed: EmbeddedNats, tmp_path: Path
) -> None:
    env = wrong_keys_env(tmp_path, closed)
    code, out, err = await cairn_run("up", env=env, cwd=tmp_path, timeout=START_UP)
    text = out + err
    assert code == 1, text
    assert (
        f"cairn: NATS server {closed.url} refused the connection: Authorization Violation" in text
    ), text
    assert "Traceback" not in text
    # The seeds are named by their directory, never printed.
    assert Keyring(Path(env["NATS_KEYS"])).seed(Role.HOST) not in text


async def test_the_refusal_ends_start_up_within_seconds(
    closed: EmbeddedNats, tmp_path: Path
) -> None:
    """What `cairn up` runs, in this process: the first refusal ends it (nats-py alone would
    try again for ever)."""
    env = wrong_keys_env(tmp_path, closed)
    began = time.monotonic()
    with pytest.raises(BusRefused, match="Authorization Violation"):
        async with asyncio.timeout(10):
            async with open_runtime(env, tmp_path / "data"):
                pass
    assert time.monotonic() - began < 10


async def test_a_key_refused_once_is_not_tried_again(closed: EmbeddedNats, tmp_path: Path) -> None:
    stranger = Keyring.create(tmp_path / "stranger", [Role.GATEWAY])
    with pytest.raises(BusRefused, match=f"NATS server {closed.url} refused"):
        await asyncio.wait_for(NatsAccess(closed.url, stranger).connect(Role.GATEWAY), 10)


async def test_sigterm_ends_a_start_up_waiting_for_a_silent_server(tmp_path: Path) -> None:
    """A NATS address that accepts connections and never says a word: cairn waits for it,
    and SIGTERM ends the wait within the stop grace and two seconds."""
    connected = asyncio.Event()
    held: list[asyncio.StreamWriter] = []

    async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        connected.set()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    keys = Keyring.create(tmp_path / "keys")
    env = {
        **up_env(tmp_path),
        "NATS_URL": f"nats://127.0.0.1:{port}",
        "NATS_KEYS": str(keys.path),
        "CAIRN_STOP_GRACE": str(STOP_GRACE),
    }
    proc = await cairn_start("up", env=env, cwd=tmp_path)
    try:
        await asyncio.wait_for(connected.wait(), START_UP)
        os.kill(proc.pid, signal.SIGTERM)
        began = time.monotonic()
        out, _ = await asyncio.wait_for(proc.communicate(), STOP_GRACE + 2 + 5)
        took = time.monotonic() - began
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        server.close()
        for writer in held:
            writer.close()
    text = out.decode(errors="replace")
    assert proc.returncode == 1, text
    assert "cairn: stopped while starting" in text
    assert took < STOP_GRACE + 2, (took, text)
