"""The embedded NATS is supervised: a nats-server that dies or hangs is started again on the
same port and store; meanwhile every service that needs it answers 503 at once and /health
says why; a command delivered after its caller gave up is dropped, not run; and nats-server
never outlives cairn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import uuid
from pathlib import Path

from nats.aio.client import Client
from pvesim.cluster import SimCluster

from actors.vm.messages import install_payload
from actors.vm.shacrypt import sha512_crypt
from events.bus import DEADLINE_HEADER
from events.nats_server import find_binary
from events.permissions import Role
from tests.conftest import wait_for
from tests.faults.conftest import Cairn, StartCairn, children_named, stray_processes
from tests.images.imagedata import encoded
from tests.ports import free_port

BUS_DOWN = "the message bus (NATS) is unavailable"
PNG = encoded("PNG", (8, 8))


def nats_child(cairn: Cairn) -> int:
    pids = children_named(cairn.proc.pid, "nats-server")
    assert len(pids) == 1, pids
    return pids[0]


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan waits for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def healthy(cairn: Cairn) -> bool:
    return (await cairn.health())[0] == 200


async def test_a_dead_or_hung_nats_server_is_restarted_and_meanwhile_services_answer_503(
    start_cairn: StartCairn,
) -> None:
    cairn = await start_cairn("up")
    port = cairn.nats_port()
    assert (await cairn.upload_function("hello", "def main(x):\n    return 1\n"))[0] == 200

    # Killed: started again on the same port with the same store, and said so.
    os.kill(nats_child(cairn), signal.SIGKILL)
    await cairn.wait_log(rf"nats-server restarted on nats://127\.0\.0\.1:{port} with store ")
    await wait_for(lambda: healthy(cairn), what="health to come back after the restart")
    assert (await cairn.upload_image("t/after-kill.png", PNG))[0] == 201

    # Hung (stopped, its port still open): the client notices within seconds, and until the
    # supervisor has replaced the server every request that needs the bus gets 503 at once.
    hung = nats_child(cairn)
    os.kill(hung, signal.SIGSTOP)
    try:
        # Each of the process's connections (one per role) notices on its own ping; once all
        # have, /health names the server without naming a role.
        everyone_lost = [f"nats: not connected to nats://127.0.0.1:{port}; reconnecting"]

        async def all_lost() -> bool:
            status, text = await cairn.health()
            return status == 503 and json.loads(text)["problems"] == everyone_lost

        await wait_for(all_lost, timeout=15, what="/health to report every connection lost")
        async with cairn.session.get(cairn.url("status") + "/status") as resp:
            assert resp.status == 503
            services = (await resp.json())["services"]
        assert {s["status"] for s in services.values()} == {"down"}
        async with asyncio.timeout(5):  # each would have hung for its full time-out
            install = await cairn.request(
                "POST", cairn.api + "/vm/install", json={"os": "debian", "version": "12"}
            )
            listing = await cairn.request("GET", cairn.api + "/vm/list")
            upload = await cairn.upload_function("hello", "def main(x):\n    return 2\n")
            run = await cairn.run_function("hello")
            image = await cairn.upload_image("t/during.png", PNG)
            delete = await cairn.request("DELETE", cairn.url("images") + "/del/t/after-kill.png")
        for status, text in (install, listing, upload, run, image, delete):
            assert status == 503 and BUS_DOWN in text, (status, text)
        # Reads that need no bus go on.
        async with cairn.session.get(cairn.url("images") + "/c/img/t/after-kill.png") as resp:
            assert resp.status == 200 and await resp.read() == PNG
        await cairn.wait_log(rf"nats-server \(pid {hung}\) has not answered for \d+ s; killing it")
    finally:
        with contextlib.suppress(ProcessLookupError):  # gone already, or let it die now
            os.kill(hung, signal.SIGCONT)
    await cairn.wait_log(r"restart 2\)")
    await wait_for(lambda: healthy(cairn), timeout=15, what="health after the hung server")
    assert (await cairn.upload_image("t/after-hang.png", PNG))[0] == 201
    async with cairn.session.get(cairn.url("status") + "/status") as resp:
        bus = (await resp.json())["bus"]
    assert bus["connected"] and bus["restarts"] == 2 and bus["url"].endswith(f":{port}")
    assert await cairn.stop() == 0


async def test_a_command_delivered_after_its_deadline_is_dropped_not_run(
    start_cairn: StartCairn, sim: SimCluster
) -> None:
    cairn = await start_cairn("serve", "vm")
    nc: Client = await cairn.bus_client(Role.GATEWAY)
    try:
        # A gateway's install, held up in transit until after its caller stopped waiting.
        body = {"os": "debian", "version": "12", "id": 160}
        payload = install_payload(uuid.uuid4().hex, body, sha512_crypt("late"))
        late = {DEADLINE_HEADER: "1000000000.000"}  # 2001: long gone
        await nc.publish("cairn.cmd.vm.install", json.dumps(payload).encode(), headers=late)
        await nc.flush()
    finally:
        await nc.close()
    await cairn.wait_log(r"dropped an expired command on cairn\.cmd\.vm\.install: its caller")
    assert sim.vm(160) is None
    assert all(vm["vmid"] != 160 for vm in (await cairn.vm_list())["list"])
    assert (await cairn.install(id=160)).records[-1]["status"] == "success"  # the id is free


async def test_nats_server_dies_with_cairn_and_a_stale_one_is_ended_at_start(
    start_cairn: StartCairn, tmp_path: Path
) -> None:
    store = tmp_path / "data" / "nats"
    store.mkdir(parents=True)
    # What a crash left behind before the death signal existed: a server on cairn's store.
    stale = await asyncio.create_subprocess_exec(
        str(find_binary()),
        "-js",
        "-sd",
        str(store),
        "-a",
        "127.0.0.1",
        "-p",
        str(free_port()),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        cairn = await start_cairn("serve", "images")
        assert f"ending a stale nats-server (pid {stale.pid})" in cairn.log()
        await asyncio.wait_for(stale.wait(), 10)
        child = nats_child(cairn)

        cairn.proc.kill()  # kill -9: no clean-up code runs in cairn
        await cairn.proc.wait()
        await wait_for(
            lambda: not stray_processes(str(tmp_path)), what="nats-server to die with cairn"
        )
        await wait_for(lambda: not running(child), what=f"nats-server {child} to be gone")
        again = await start_cairn("serve", "images")  # the same store starts cleanly
        assert "ending a stale nats-server" not in again.log()
        assert await again.stop() == 0
    finally:
        if stale.returncode is None:
            stale.kill()
            await stale.wait()
