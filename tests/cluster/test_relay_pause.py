"""A host paused for longer than JetStream's duplicate window wakes with its relay's cursor far
behind: it must publish nothing the events stream already holds. Every subscriber reads the
events stream; before issue 30 the woken relay published everything again (245 messages for
133 events, versions out of order)."""

from __future__ import annotations

import json
import signal

import pytest

from events.jetstream import STREAM
from events.store import EventStore
from tests.cluster.conftest import Cluster, dump, journal, outcome
from tests.conftest import wait_for
from tests.vm.drivers import DRIVERS

pytestmark = pytest.mark.parametrize("pve_driver", DRIVERS, indirect=True)

# The events stream's duplicate window, made short for the test (120 s by default): the pause
# outlasts it, so JetStream no longer knows the ids of what the paused host's relay would
# publish again.
WINDOW = 1.0


async def _stored(url: str) -> list[tuple[str, int, int]]:
    """Every stored event as (stream, version, position), in position order."""
    store = await EventStore.open(url)
    try:
        out: list[tuple[str, int, int]] = []
        after = 0
        while True:
            page = await store.read_page(after, 1000)
            out += [(r.stream, r.version, r.position) for r in page.records]
            if page.last_position == after:
                return out
            after = page.last_position
    finally:
        await store.close()


async def test_a_host_paused_past_the_duplicate_window_publishes_nothing_twice(
    cluster: Cluster,
) -> None:
    nc = await cluster.nats.connect()
    try:
        js = nc.jetstream()
        config = (await js.stream_info(STREAM)).config
        config.duplicate_window = WINDOW
        await js.update_stream(config)

        owner = await cluster.owner()
        paused = next(h for h in cluster.hosts if h is not owner)
        client = next(h for h in cluster.hosts if h not in (owner, paused))
        first = await client.install(id=170)
        assert outcome(first).get("status") == "success", outcome(first)

        paused.signal(signal.SIGSTOP)
        try:
            # Events the other hosts append and publish while it sleeps.
            for vmid in (171, 172):
                done = await client.install(id=vmid)
                assert outcome(done).get("status") == "success", outcome(done)
        finally:
            paused.signal(signal.SIGCONT)
        # Its relay looks at the store after the pause (over 5 s: installs take longer) and
        # says how far it caught up.
        await wait_for(
            lambda: journal(paused, r"relay: caught up from position"),
            timeout=30,
            what="the woken relay to catch up",
        )
        caught_up = journal(paused, r"relay: caught up from position")[-1]

        stored = await _stored(paused.env["CAIRN_EVENT_STORE"])
        info = await js.stream_info(STREAM)
        published: list[tuple[str, int, int]] = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(STREAM, seq)
            data = json.loads(msg.data or b"{}")
            published.append((data["stream"], data["version"], data["position"]))
    finally:
        await nc.close()
    # Each stored event once, in the store's order: no duplicates, nothing out of turn.
    assert published == stored, f"{caught_up}\n{dump(cluster)}"
    assert "were in the events stream already" in caught_up
