"""The events stream on a JetStream store with less room than its cap: cairn starts, with a
smaller cap it says, instead of failing to create the stream (seen with CAIRN_DATA on a 24 MB
disk: "insufficient storage resources available")."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import nats
import pytest

from events.jetstream import MAX_MSG_SIZE, STREAM, StreamSettings, ensure_stream
from events.nats_server import find_binary, server_argv
from tests.conftest import wait_for
from tests.ports import free_port


async def test_a_store_smaller_than_the_cap_gets_a_smaller_stream(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "small.conf"
    config.write_text("jetstream { max_file_store: 64MB }\n")
    port = free_port()
    argv = server_argv(find_binary(), tmp_path / "js", "127.0.0.1", port, config)
    server = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        nc = None

        async def connected() -> bool:
            nonlocal nc
            try:
                nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
            except Exception:
                return False
            return True

        await wait_for(connected, timeout=10, what="nats-server to accept connections")
        assert nc is not None
        js = nc.jetstream()
        with caplog.at_level(logging.WARNING, logger="events.jetstream"):
            await ensure_stream(js, StreamSettings())  # asks for 1 GiB
            await ensure_stream(js, StreamSettings())  # a restart: the update fits the same way
        info = await js.stream_info(STREAM)
        cap = info.config.max_bytes
        assert cap is not None and MAX_MSG_SIZE <= cap <= 64 << 20
        assert "the events stream is capped at" in caplog.text
        assert "not CAIRN_EVENTS_MAX_BYTES=1024 MiB" in caplog.text
        # Where the store has room, the cap is the setting, and nothing is said.
        caplog.clear()
        await js.delete_stream(STREAM)
        with caplog.at_level(logging.WARNING, logger="events.jetstream"):
            await ensure_stream(js, StreamSettings(max_bytes=8 << 20))
        assert (await js.stream_info(STREAM)).config.max_bytes == 8 << 20
        assert "capped" not in caplog.text
        await nc.close()
    finally:
        server.terminate()
        await server.wait()
