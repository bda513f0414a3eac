"""PostgreSQL, the one store the three hosts share, goes away while installs run (issue 30):
every host's /health names the store, not only the lease holder's; every install stream a
client holds ends with the install's outcome or a record telling the client to re-attach,
never a bare close while the task goes on; once the store is back every host heals without a
restart."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.cluster.conftest import Cluster, Host, dump
from tests.conftest import wait_for
from tests.postgres import PostgresServer
from tests.vm.conftest import Sse, read_sse
from tests.vm.drivers import DRIVERS

pytestmark = pytest.mark.parametrize("pve_driver", DRIVERS, indirect=True)


async def _health(host: Host) -> dict[str, Any]:
    async with host.session.get(host.vm_url + "/health") as resp:
        body: dict[str, Any] = await resp.json()
        return body


async def _held_install(host: Host, vmid: int, seen: dict[int, list[dict[str, Any]]]) -> Sse:
    """An install stream held to its end; its records go into ``seen[vmid]`` as they come."""
    body = {"os": "debian", "version": "12", "id": vmid}
    records = seen.setdefault(vmid, [])
    ids: list[str] = []
    async with host.session.post(host.api + "/vm/install", json=body) as resp:
        assert resp.status == 200, await resp.text()
        while True:
            part = await read_sse(resp, stop_after=1)
            records += part.records
            ids += part.ids
            if not part.records or part.closed:
                return Sse(200, resp.headers, records, ids, part.closed)


def _ends_well(sse: Sse) -> bool:
    """Its outcome, or a record saying how to get it."""
    if not (sse.closed and sse.records):
        return False
    last = sse.last
    return last["status"] in ("success", "error") or "re-attach" in last["message"]


async def test_a_store_outage_during_installs(cluster: Cluster, postgres: PostgresServer) -> None:
    hosts = cluster.hosts
    vmids = [180 + i for i in range(4)]
    seen: dict[int, list[dict[str, Any]]] = {}
    streams = [
        asyncio.create_task(_held_install(hosts[i % len(hosts)], vmid, seen))
        for i, vmid in enumerate(vmids)
    ]
    await wait_for(
        lambda: all(seen.get(v) for v in vmids), timeout=60, what="every install under way"
    )
    await asyncio.to_thread(postgres.stop)
    try:
        # Every host says so, whether it runs the VM actors or not.
        async def all_name_the_store() -> bool:
            bodies = [await _health(h) for h in hosts]
            return all(
                b["status"] == "down" and any(p.startswith("event store: ") for p in b["problems"])
                for b in bodies
            )

        await wait_for(all_name_the_store, timeout=30, what="every host's /health to name it")
        # Down for longer than the hosts' write retries (CAIRN_STORE_RETRY, 10 s) and their
        # streams' patience (5 s): until every held stream has said what it waits for.
        await wait_for(
            lambda: all(any(r["step"] == "waiting" for r in seen[v]) for v in vmids),
            timeout=60,
            what="every held stream to say it waits for the store",
        )
    finally:
        await asyncio.to_thread(postgres.start)
    ended = await asyncio.wait_for(asyncio.gather(*streams), 180)
    bad = [
        (v, s.records[-2:], s.closed)
        for v, s in zip(vmids, ended, strict=True)
        if not _ends_well(s)
    ]
    assert not bad, f"{bad}\n{dump(cluster)}"
    # Nothing restarted: no record may say so (the store refused writes, and that is the cause).
    restarted = [r for s in ended for r in s.records if "by a restart" in r["message"]]
    assert not restarted, restarted
    # Re-attached through any host, every install has its outcome, the one its stream gave.
    for vmid, sse in zip(vmids, ended, strict=True):
        whole = await hosts[vmid % len(hosts)].task(vmid)
        assert whole.closed and whole.last["status"] in ("success", "error"), whole.records[-3:]
        if sse.last["status"] in ("success", "error"):
            assert whole.last == sse.last

    # Healed without a restart: every host answers ok again.
    async def all_ok() -> bool:
        bodies = [await _health(h) for h in hosts]
        return all(b["status"] == "ok" for b in bodies)

    await wait_for(all_ok, timeout=30, what="every host's /health to be ok again")
