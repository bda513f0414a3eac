"""A hung NATS during installs and requests: the embedded nats-server is stopped (SIGSTOP) for
30 s while three installs run and clients keep asking, then continued (SIGCONT). Requests that
need the bus answer 503 within their deadlines; the installs already running go on (their
records are stored, and their streams follow the store) and end with success; an install asked
for during the hang is refused and never runs later; the supervisor notices a server that is
alive but not answering, replaces it, and everything works again without a restart of cairn."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

import aiohttp
from pvesim.cluster import SimCluster

from tests.conftest import wait_for
from tests.faults.conftest import Cairn, StartCairn, children_named
from tests.vm.conftest import read_sse

HANG = 30.0
BUS_DOWN = "the message bus (NATS) is unavailable"
WAITING = "VM initialization > waiting for ready"


async def until_step(resp: aiohttp.ClientResponse, step: str) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    while not any(r["step"] == step for r in seen):
        got = await read_sse(resp, stop_after=1)
        assert got.records, f"the stream ended before {step!r}: {seen[-2:]}"
        seen += got.records
    return seen


async def healthy(cairn: Cairn) -> bool:
    return (await cairn.health())[0] == 200


async def not_healthy(cairn: Cairn) -> bool:
    return (await cairn.health())[0] == 503


async def timed(cairn: Cairn, method: str, url: str, **kw: Any) -> tuple[int, str, float]:
    began = time.monotonic()
    status, text = await cairn.request(method, url, **kw)
    return status, text, time.monotonic() - began


async def test_a_hung_nats_server_for_30_s_during_installs_and_requests(
    start_cairn: StartCairn, sim: SimCluster
) -> None:
    # Guests take a while to boot: the installs are all at "waiting for ready" when the
    # server hangs, and finish during or after the hang.
    sim.set_delay_scale(0.5)
    cairn = await start_cairn("up", VM_SSH_WAIT="120")
    streams = []
    for vmid in (191, 192, 193):
        body = {"os": "debian", "version": "12", "id": vmid}
        resp = await cairn.session.post(cairn.api + "/vm/install", json=body)
        streams.append(resp)
    for resp in streams:
        await until_step(resp, WAITING)
    hung = children_named(cairn.proc.pid, "nats-server")
    assert len(hung) == 1, hung
    os.kill(hung[0], signal.SIGSTOP)
    began = time.monotonic()
    try:
        await wait_for(lambda: not_healthy(cairn), timeout=15, what="/health to report NATS")
        # Asked during the hang: each answers 503 within its deadline (the queries' 5 s,
        # a command's bus check at once), none waits out a two-minute command time-out.
        install = await timed(
            cairn,
            "POST",
            cairn.api + "/vm/install",
            json={"os": "debian", "version": "12", "id": 199},
        )
        listing = await timed(cairn, "GET", cairn.api + "/vm/list")
        status = await timed(cairn, "GET", cairn.api + "/vm/191/status")
        run = await timed(
            cairn,
            "POST",
            cairn.url("functions") + "/run-now",
            json={"language": "python", "code": "return 1"},
        )
        for answer, text, took in (install, listing, status, run):
            assert answer == 503 and BUS_DOWN in text, (answer, text)
            assert took < 6, f"{text!r} took {took:.1f} s"
        await cairn.wait_log(r"nats-server \(pid \d+\) has not answered for \d+ s; killing it")
        left = HANG - (time.monotonic() - began)
        if left > 0:
            await asyncio.sleep(left)  # the fault's length, not a wait for anything
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(hung[0], signal.SIGCONT)
    await wait_for(lambda: healthy(cairn), timeout=30, what="health after the hang")

    # The installs that were running went on and end with their outcome.
    for vmid, resp in zip((191, 192, 193), streams, strict=True):
        rest = await read_sse(resp)
        resp.release()
        assert rest.closed and rest.records[-1]["status"] == "success", rest.records[-2:]
        assert sim.guest_up(vmid)
    # The install refused during the hang never ran, not even later.
    assert sim.vm(199) is None
    assert all(vm["vmid"] != 199 for vm in (await cairn.vm_list())["list"])
    # No restart of cairn was needed.
    sim.set_delay_scale(0)
    assert (await cairn.install(id=199)).records[-1]["status"] == "success"
    assert await cairn.stop() == 0
