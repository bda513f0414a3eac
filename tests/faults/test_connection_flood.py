"""Connection floods: under a 1024 open-file limit, 1,000 slow connections (request headers
started, never finished) spread over all five listeners. Every service keeps answering at
once (200, or 503 from a service at its connection cap), the slow connections are closed after
the header time-out, everything answers 200 again, and the log stays small."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource

import pytest

from gateway.http.listener import MAX_LINGERING, RESERVED_FDS
from tests.conftest import Peak, wait_for
from tests.faults.conftest import SERVICES, Cairn, StartCairn

SLOW = 1000
PROBES = {
    "status": "/health",
    "vm": "/api/health",
    "functions": "/run-now",
    "images": "/check/state",
    "search": "/api/health",
}


@pytest.fixture(autouse=True)
def enough_descriptors_for_the_client() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < SLOW + 512:
        pytest.skip(f"the test itself needs {SLOW + 512} open files; the hard limit is {hard}")
    if soft < SLOW + 512:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def probe(cairn: Cairn, service: str) -> tuple[int, str]:
    url = cairn.url(service) + PROBES[service]
    if service == "functions":
        body = {"language": "python", "code": "def main(x):\n    return 1\n"}
        return await cairn.request("POST", url, json=body)
    return await cairn.request("GET", url)


def open_descriptors(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


async def slow_client(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # never finished
    return reader, writer


async def test_a_thousand_slow_connections_do_not_take_the_services_down(
    start_cairn: StartCairn,
) -> None:
    cairn = await start_cairn(
        "up", wrapper=("prlimit", "--nofile=1024:1024", "--"), CAIRN_HEADER_TIMEOUT="3"
    )
    assert "open-file limit raised" not in cairn.log()  # the hard limit is 1024 too
    ports = [cairn.ports[name] for name in SERVICES]
    with Peak(lambda: open_descriptors(cairn.proc.pid)) as watch:
        clients = await asyncio.gather(*(slow_client(ports[i % len(ports)]) for i in range(SLOW)))
    # A service holds at most its cap's connections and MAX_LINGERING refused ones: the flood
    # never reaches the descriptors kept for the store, NATS, sandboxes (RESERVED_FDS).
    cap = (1024 - RESERVED_FDS) // (3 * len(SERVICES))
    # Per service also its listener's second handle; 16 for the services' own work meanwhile.
    allowed = watch.before + len(SERVICES) * (cap + MAX_LINGERING + 1) + 16
    assert watch.most <= allowed, (watch.before, watch.most)
    try:
        async with asyncio.timeout(10):  # promptly: not a hang, not a refused connection
            answers = await asyncio.gather(*(probe(cairn, name) for name in SERVICES))
        for name, (status, text) in zip(SERVICES, answers, strict=True):
            assert status == 200 or (status, text) == (
                503,
                "too many connections to this service; try again shortly\n",
            ), (name, status, text)
        assert any(status == 503 for status, _ in answers)  # the caps were reached

        # The header time-out closes every slow connection (the refused ones already are).
        async def closed(reader: asyncio.StreamReader) -> bool:
            with contextlib.suppress(ConnectionError):
                await reader.read()
            return True

        async with asyncio.timeout(30):
            await asyncio.gather(*(closed(reader) for reader, _ in clients))
    finally:
        for _, writer in clients:
            writer.close()

    async def all_answer() -> bool:
        answers = await asyncio.gather(*(probe(cairn, name) for name in SERVICES))
        return all(status == 200 for status, _ in answers)

    await wait_for(all_answer, timeout=15, what="every service to answer 200 again")
    log = cairn.log()
    assert "Too many open files" not in log
    assert len(log) < 200_000, f"the log grew to {len(log)} bytes"
    assert "connections open, the cap (CAIRN_MAX_CONNECTIONS): answering 503" in log
    assert await cairn.stop() == 0
