"""Rotating keys (docs/cluster.md) with an account per role: `cairn cluster auth OLD NEW`
lets both keyrings in, each key into its role's account, so hosts on the old keys serve
gateways and readers on the new ones; after a reload with the new keyring alone, the old keys
are refused and the new ones go on."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.aio.msg import Msg

from events.access import NatsAccess
from events.bus import BusRefused, flush_all
from events.consumers import ConsumerBroker
from events.credentials import Keyring
from events.jetstream import StreamSettings, ensure_stream
from events.nats_server import end_server, find_binary, free_port
from events.permissions import RUNNERS_QUEUE, Role
from tests.conftest import wait_for
from tests.security.test_forged_replies import follow_events

CAIRN = str(Path(sys.executable).parent / "cairn")


def cluster_auth(out: Path, *keyrings: Keyring) -> None:
    subprocess.run(
        [CAIRN, "cluster", "auth", *(str(k.path) for k in keyrings), "--out", str(out)],
        check=True,
        capture_output=True,
    )


async def test_old_and_new_keys_work_together_then_the_old_are_refused(tmp_path: Path) -> None:
    old = Keyring.create(tmp_path / "old")
    new = Keyring.create(tmp_path / "new")
    auth = tmp_path / "auth.conf"
    cluster_auth(auth, old, new)
    port = free_port()
    config = tmp_path / "nats.conf"
    config.write_text(
        f'listen: "127.0.0.1:{port}"\njetstream {{ store_dir: "{tmp_path / "js"}" }}\n'
        'include "auth.conf"\n'
    )
    server = await asyncio.create_subprocess_exec(
        str(find_binary()),
        "-c",
        str(config),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    url = f"nats://127.0.0.1:{port}"
    clients = []
    try:
        await wait_for(lambda: port_open(port), what="nats-server listening")
        before, after = NatsAccess(url, old), NatsAccess(url, new)
        host = await before.connect(Role.HOST)
        runner = await before.connect(Role.RUNNER)
        gateway = await after.connect(Role.GATEWAY)
        observer = await after.connect(Role.OBSERVER)
        clients += [host, runner, gateway, observer]
        await ensure_stream(host.jetstream(), StreamSettings())
        broker = await ConsumerBroker(host).start()

        async def answer(msg: Msg) -> None:
            await msg.respond(b'{"ok":1}')

        await host.subscribe("cairn.q.vm.list", cb=answer)
        await runner.subscribe("cairn.functions.run", queue=RUNNERS_QUEUE, cb=answer)
        await flush_all(host)
        await flush_all(runner)
        # A gateway on the new keys asks a host and a runner on the old ones.
        for subject in ("cairn.q.vm.list", "cairn.functions.run"):
            reply = await gateway.request(subject, b"{}", timeout=5)
            assert json.loads(reply.data) == {"ok": 1}
        # An observer on the new keys reads events through a host on the old ones.
        heard, _ = await follow_events(observer, "cairn.deliver.rotation1", timeout=5)
        await host.jetstream().publish("cairn.evt.vm.1", b'{"n":1}')
        assert (await asyncio.wait_for(heard.get(), 10)).data == b'{"n":1}'
        await broker.stop()

        # The new keyring alone, read again without a restart.
        cluster_auth(auth, new)
        server.send_signal(signal.SIGHUP)

        async def old_refused() -> bool:
            try:
                nc = await asyncio.wait_for(before.connect(Role.HOST), 10)
            except BusRefused:
                return True
            await nc.close()
            return False

        await wait_for(old_refused, what="the old keys refused after the reload")
        new_host = await after.connect(Role.HOST)
        clients.append(new_host)
        await new_host.subscribe("cairn.q.vm.status", cb=answer)
        await flush_all(new_host)
        reply = await gateway.request("cairn.q.vm.status", b"{}", timeout=5)
        assert json.loads(reply.data) == {"ok": 1}
        with pytest.raises(nats.errors.Error):
            await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    finally:
        for nc in clients:
            await nc.close()
        await end_server(server)


async def port_open(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    await writer.wait_closed()
    return True
