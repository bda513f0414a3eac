"""A copy of a command (a cluster gateway sends one again while unanswered, events/resend.py)
is answered as the first one was and never run twice: the install it names runs once."""

from __future__ import annotations

import asyncio

from actors.vm.host import SUBJECT_DO, SUBJECT_INSTALL
from actors.vm.lifecycle import Command
from actors.vm.messages import do_payload, install_payload
from actors.vm.shacrypt import sha512_crypt
from events.bus import command
from events.nats_server import EmbeddedNats
from events.permissions import Role
from tests.vm import drivers
from tests.vm.conftest import Service, read_sse
from tests.vm.helpers import guests

driver = drivers.driver
start_service = drivers.start_service

TASK_INSTALL = "c0" * 16
TASK_STOP = "5a" * 16


async def test_copies_of_a_command_run_it_once(service: Service, nats_server: EmbeddedNats) -> None:
    gateway = await nats_server.connect(Role.GATEWAY)
    try:
        body = {"os": "debian", "version": "12", "id": 130}
        payload = install_payload(TASK_INSTALL, body, sha512_crypt("a-long-password"), "test")
        # Two copies at once (the first still being answered), then a late third.
        first, second = await asyncio.gather(
            command(gateway, SUBJECT_INSTALL, payload, 60),
            command(gateway, SUBJECT_INSTALL, payload, 60),
        )
        assert first == second and first["vmid"] == 130 and first["task"] == TASK_INSTALL
        async with service.session.get(f"{service.api}/vm/130/task") as resp:
            whole = await read_sse(resp)
        assert whole.closed and whole.last["status"] == "success", whole.last
        third = await command(gateway, SUBJECT_INSTALL, payload, 60)
        assert third == first
        assert guests(service.sim) == {130}  # one VM: the install ran once
        starts = [r for r in whole.records if r["message"].startswith("[*] start VM installation")]
        assert len(starts) == 1

        stop = do_payload(TASK_STOP, 130, Command.STOP, {}, "test")
        answers = await asyncio.gather(*(command(gateway, SUBJECT_DO, stop, 60) for _ in range(3)))
        assert answers[0] == answers[1] == answers[2]
        stops = [c for c in service.sim.commands() if "stop" in c.split() and "130" in c.split()]
        assert len(stops) <= 1, stops  # the CLI driver's qm stop, once (the API's is no command)
    finally:
        await gateway.close()
