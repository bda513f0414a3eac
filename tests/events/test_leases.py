"""Leases in NATS KV against a real nats-server: one holder at a time, hand-over at a stop,
take-over after the TTL when the holder goes silent, and the silent holder's fence."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client

from events.leases import BUCKET, LEADERLESS_AT_WORST, Lease, LeaseSettings, LeaseState
from tests.conftest import wait_for

FAST = LeaseSettings(ttl=1.0)


class UnpolledSettings(LeaseSettings):
    """A waiting host that never polls: only its watch of the key can tell it the lease is
    free."""

    @property
    def poll_every(self) -> float:
        return 600.0


class Host:
    """One would-be holder, recording what its callbacks saw."""

    def __init__(self, nc: Client, name: str, settings: LeaseSettings = FAST) -> None:
        self.seen: list[str] = []
        self.lease = Lease(nc, "vm", name, settings, on_acquired=self._acquired, on_lost=self._lost)

    async def _acquired(self) -> None:
        self.seen.append("acquired")

    async def _lost(self, reason: str) -> None:
        self.seen.append(f"lost: {reason}")

    @property
    def held(self) -> bool:
        return self.lease.state is LeaseState.HELD


@pytest.fixture
async def hosts(nc: Client) -> AsyncIterator[list[Host]]:
    made = [Host(nc, "a"), Host(nc, "b")]
    yield made
    for host in made:
        await host.lease.stop()


async def test_one_holder_at_a_time_and_handover_at_stop(hosts: list[Host]) -> None:
    a, b = hosts
    await a.lease.start()
    await wait_for(lambda: a.held, timeout=5, what="a holds the lease")
    await b.lease.start()
    await wait_for(lambda: b.lease.other == "a", timeout=5, what="b sees a as the holder")
    assert not b.held and b.lease.fence() is not None
    assert a.lease.fence() is None and a.seen == ["acquired"]
    # Several renewal periods later, still a's.
    for _ in range(3):
        await asyncio.sleep(FAST.renew_every)
        assert a.held and not b.held
    await a.lease.stop()  # a graceful stop releases it: b takes it at its next try
    await wait_for(lambda: b.held, timeout=FAST.ttl, what="b takes over before the TTL")
    assert b.seen == ["acquired"]


async def test_silent_holder_is_fenced_then_loses_the_lease(hosts: list[Host]) -> None:
    a, b = hosts
    await a.lease.start()
    await wait_for(lambda: a.held, timeout=5, what="a holds the lease")
    assert a.lease._task is not None
    a.lease._task.cancel()  # a goes silent (a pause): no renewals, no release
    await wait_for(lambda: a.lease.fence() is not None, timeout=2, what="a's fence closes")
    assert "lease was last renewed" in (a.lease.fence() or "")
    await b.lease.start()
    await wait_for(lambda: b.held, timeout=5, what="b takes the expired lease")
    assert a.lease.state is LeaseState.HELD  # a has not noticed yet: its fence holds it back
    # a wakes up: its renewal is refused, and it stops.
    a.lease._task = asyncio.create_task(a.lease._keep())
    await wait_for(lambda: not a.held, timeout=2, what="a learns it lost the lease")
    await a.lease.settled()
    assert a.seen == ["acquired", "lost: another host took it (our renewal was refused)"]
    assert b.held and b.lease.fence() is None


async def test_a_restarted_host_takes_its_own_lease_back_at_once(nc: Client) -> None:
    slow = LeaseSettings(ttl=30.0)
    first = Host(nc, "a", slow)
    await first.lease.start()
    await wait_for(lambda: first.held, timeout=5, what="first process holds the lease")
    assert first.lease._task is not None
    first.lease._task.cancel()  # killed: it never releases
    again = Host(nc, "a", slow)
    other = Host(nc, "b", slow)
    try:
        await other.lease.start()
        await again.lease.start()
        await wait_for(lambda: again.held, timeout=5, what="the same host takes it back")
        assert not other.held and other.lease.other == "a"
    finally:
        await again.lease.stop()
        await other.lease.stop()


async def test_a_failed_start_gives_the_lease_up(nc: Client) -> None:
    events: list[str] = []

    async def broken() -> None:
        raise RuntimeError("no cluster")

    async def lost(reason: str) -> None:
        events.append(reason)

    lease = Lease(nc, "vm", "a", FAST, on_acquired=broken, on_lost=lost)
    b = Host(nc, "b")
    try:
        await lease.start()
        await wait_for(lambda: bool(events), timeout=5, what="a's start fails")
        assert events == ["its actors did not start"]
        await b.lease.start()
        await wait_for(lambda: b.held, timeout=5, what="b takes the lease a gave up")
    finally:
        await lease.stop()
        await b.lease.stop()


async def test_a_renewal_whose_answer_was_lost_is_recognised_as_ours(hosts: list[Host]) -> None:
    """A leader election can swallow the answer to a renewal that landed: the next renewal
    then expects an old revision. The holder finds its own token there and carries on."""
    a, _ = hosts
    await a.lease.start()
    await wait_for(lambda: a.held, timeout=5, what="a holds the lease")
    kv = await a.lease._bucket()
    landed = await kv.update("vm", a.lease._value(), last=a.lease._revision)
    await wait_for(
        lambda: a.lease._revision > landed, timeout=5, what="a renews past its lost answer"
    )
    assert a.held and a.seen == ["acquired"]


def test_the_default_lease_outlives_a_nats_leader_election() -> None:
    """One NATS server of three dying leaves the lease bucket without a leader for up to
    LEADERLESS_AT_WORST; a holder must not give its actors up meanwhile, and it must stop
    trusting its lease before the server may let another host take it."""
    default = LeaseSettings()
    assert default.rides_out > LEADERLESS_AT_WORST
    assert default.trust < default.ttl
    # At the former default of 8 s a holder gave up after 6.2 s of election.
    assert LeaseSettings(ttl=8.0).rides_out < LEADERLESS_AT_WORST


async def a_holds_b_waits(a: Host, b: Host) -> None:
    await a.lease.start()
    await wait_for(lambda: a.held, timeout=5, what="a holds the lease")
    await b.lease.start()
    await wait_for(lambda: b.lease.other == "a", timeout=5, what="b sees a as the holder")


async def test_a_waiting_host_takes_an_expired_lease_the_moment_it_expires(nc: Client) -> None:
    """The watch hears the expiry (the server's marker): the waiting host takes the lease then,
    not at a poll, and not before the silent holder's trust ran out."""
    settings = UnpolledSettings(ttl=2.0)
    a, b = Host(nc, "a", settings), Host(nc, "b", settings)
    try:
        await a_holds_b_waits(a, b)
        assert a.lease._task is not None
        a.lease._task.cancel()  # a goes silent: its last renewal was just sent
        silent_at = a.lease._sent_at
        await wait_for(lambda: b.held, timeout=settings.ttl + 3, what="b takes the lease")
        took = time.monotonic() - silent_at
        # Never before the TTL (the server's clock starts at the renewal's arrival) ...
        assert took >= settings.ttl, took
        assert a.lease.fence() is not None  # ... so a had stopped trusting it first
        # ... and at once after it, although b never polls.
        assert took < settings.ttl + 1.0, took
        assert b.lease.taken == (
            "a stopped renewing the 'vm' lease for 2 s (it died, stalled or lost the bus)"
        )
    finally:
        await a.lease.stop()
        await b.lease.stop()


async def test_a_released_lease_is_taken_at_once_by_a_watching_host(nc: Client) -> None:
    settings = UnpolledSettings(ttl=30.0)
    a, b = Host(nc, "a", settings), Host(nc, "b", settings)
    try:
        await a_holds_b_waits(a, b)
        await a.lease.stop()
        released = time.monotonic()
        await wait_for(lambda: b.held, timeout=5, what="b takes the released lease")
        assert time.monotonic() - released < 1.0
        assert b.lease.taken == "a stopped and handed the 'vm' lease on"
    finally:
        await b.lease.stop()


async def test_a_bucket_made_with_another_ttl_is_brought_to_the_settings(nc: Client) -> None:
    """A bucket an older cairn made (another TTL, no expiry markers) is updated, not refused:
    changing CAIRN_LEASE_TTL, or upgrading, must not stop cairn from starting."""
    js = nc.jetstream()
    await js.create_key_value(bucket=BUCKET, ttl=15.0, history=1)
    host = Host(nc, "a", LeaseSettings(ttl=2.0))
    try:
        await host.lease.start()
        await wait_for(lambda: host.held, timeout=5, what="a holds the lease")
        config = (await js.stream_info(f"KV_{BUCKET}")).config
        assert config.max_age == 2.0
        assert config.subject_delete_marker_ttl == 2.0
    finally:
        await host.lease.stop()
