"""The embedded nats-server: starts on a free port with JetStream, fails clearly, stops."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from actors.platform import open_runtime
from events.nats_server import (
    EmbeddedNats,
    NatsServerError,
    end_stale_servers,
    find_binary,
    free_ports,
    servers_on,
)
from tests.conftest import wait_for


async def test_starts_with_jetstream_and_stops(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    nc = await server.connect()
    try:
        info = await nc.jetstream().account_info()
        assert info is not None
    finally:
        await nc.close()
        await server.stop()
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", server.port or 0)) != 0


async def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        with pytest.raises(NatsServerError, match=f"port 127.0.0.1:{port} is taken"):
            await EmbeddedNats(tmp_path / "nats", port=port).start()


def test_a_missing_binary_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NatsServerError, match=r"nats-server binary not found.*NATS_URL"):
        find_binary()


async def test_nats_url_means_no_embedded_server(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    env = nats_server.client_env()
    async with open_runtime(env, tmp_path / "data") as runtime:
        assert runtime.embedded_nats is None
        assert runtime.nats_url == nats_server.url
        assert not (tmp_path / "data" / "nats").exists()


async def test_without_nats_url_the_runtime_embeds_one_under_cairn_data(tmp_path: Path) -> None:
    async with open_runtime({}, tmp_path / "data") as runtime:
        assert runtime.embedded_nats is not None
        assert (tmp_path / "data" / "nats").is_dir()
        assert runtime.nc.is_connected
    assert runtime.embedded_nats.port is not None
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", runtime.embedded_nats.port)) != 0


async def test_a_server_that_dies_is_started_again_on_its_port_and_store(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    url = await server.start()
    nc = await server.connect()
    try:
        first = server.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await wait_for(lambda: server.restarts == 1, what="the restart")
        assert server.url == url and server.pid != first
        await wait_for(lambda: nc.is_connected, what="the client to reconnect")
        assert await nc.jetstream().account_info() is not None
    finally:
        await nc.close()
        await server.stop()
    assert server.restarts == 1  # a stop is not a death: nothing was restarted after it


async def test_servers_left_on_a_store_directory_are_found_and_ended(tmp_path: Path) -> None:
    store = (tmp_path / "nats").resolve()
    store.mkdir()
    other = (tmp_path / "other").resolve()
    other.mkdir()
    argv = [str(find_binary()), "-a", "127.0.0.1", "-js", "-sd"]
    port, other_port = free_ports(2)  # different: the first server may not have bound yet
    mine = await asyncio.create_subprocess_exec(*argv, str(store), "-p", str(port))
    theirs = await asyncio.create_subprocess_exec(*argv, str(other), "-p", str(other_port))
    try:
        await wait_for(lambda: servers_on(store) == [mine.pid], what="the stale server")
        assert await end_stale_servers(store) == []
        assert await asyncio.wait_for(mine.wait(), 10) is not None
        assert theirs.returncode is None and servers_on(other) == [theirs.pid]
    finally:
        for proc in (mine, theirs):
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
