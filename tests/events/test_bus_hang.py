"""A command sent while the server hangs (alive, not reading) answers at once that the bus is
unavailable, instead of waiting out its long deadline on a connection the client still
believes open (events/bus.py, ``BUS_CHECK_S``)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from events.bus import BUS_CHECK_S, BusUnavailable, CommandTimeout, request_json, serve_json
from events.nats_server import EmbeddedNats
from events.permissions import Role

SUBJECT = "cairn.cmd.test.echo"  # a gateway may send commands, a host answers them


async def test_a_command_to_a_hung_server_is_refused_within_the_bus_check(
    tmp_path: Path,
) -> None:
    async with EmbeddedNats(tmp_path / "nats") as nats:
        host = await nats.connect(Role.HOST)
        nc = await nats.connect(Role.GATEWAY)
        try:

            async def echo(payload: object) -> object:
                return payload

            await serve_json(host, SUBJECT, echo)
            # Answering: the check costs one round trip and the command goes through.
            assert await request_json(nc, SUBJECT, {"n": 1}, timeout=120) == {"n": 1}
            assert nats.pid is not None
            os.kill(nats.pid, signal.SIGSTOP)
            try:
                assert nc.is_connected  # the client cannot tell yet
                began = time.monotonic()
                with pytest.raises(BusUnavailable):
                    await request_json(nc, SUBJECT, {"n": 2}, timeout=120)
                assert time.monotonic() - began < BUS_CHECK_S + 1
                # A short request (a query) is not checked first: its own deadline bounds it.
                with pytest.raises(CommandTimeout):
                    await request_json(nc, SUBJECT, {"n": 3}, timeout=0.5)
            finally:
                os.kill(nats.pid, signal.SIGCONT)
        finally:
            await nc.close()
            await host.close()
