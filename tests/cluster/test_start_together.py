"""Three hosts started together on a fresh PostgreSQL store: each host's /health looks at the
shared store with a small write of its own, and on a fresh database their first looks wrote
the same new row at once. The losers said `down` (`duplicate key value violates unique
constraint "cursors_pkey"`) and kept saying it until asked again: a load balancer took healthy
hosts out at every cluster start."""

from __future__ import annotations

import asyncio

from gateway.http.health import STORE_CHECK_EVERY
from tests.cluster.conftest import Cluster, Host, dump


async def test_hosts_started_together_never_say_down_for_each_others_store_check(
    cluster: Cluster,
) -> None:
    # The hosts were started together and asked for their health as they became ready (the
    # fixture waits for each service's lease holder): their first looks at the store ran at
    # once. Every answer from then on, over more than one look's period, is looked at.
    seen: list[str] = []

    async def look(host: Host, url: str) -> None:
        async with host.session.get(url + "/health") as resp:
            body = await resp.json()
        for problem in body["problems"]:
            if "duplicate key" in problem or "cursors_pkey" in problem:
                seen.append(f"{host.name} {url}: {problem}")

    loop = asyncio.get_running_loop()
    until = loop.time() + 3 * STORE_CHECK_EVERY
    while loop.time() < until:
        await asyncio.gather(
            *(
                look(host, url)
                for host in cluster.hosts
                for url in (host.vm_url, host.functions_url, host.images_url)
            )
        )
        await asyncio.sleep(0.1)  # a load balancer's pace, not a wait for anything
    assert seen == [], "\n".join(seen) + dump(cluster)
