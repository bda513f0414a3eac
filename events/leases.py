"""Leases in a NATS key-value bucket: which host runs a set of actors, at most one at a time.

A lease is one key of the bucket ``CAIRN_LEASES``; its value names the holder. The bucket's
TTL is the lease's: an entry not rewritten within it expires, and the key is free. So:

* **acquire** is ``create`` (it fails while another holder's entry lives);
* **renew** is ``update`` with the revision we wrote last, every ``ttl / 24`` seconds; it fails
  if anybody else wrote the key since (we lost it while we were away). A failed renewal is
  tried again every ``RETRY_EVERY`` seconds; one whose answer was lost but which landed is
  recognised by this process's token in the value, and its revision taken;
* **release** is ``delete`` with that revision, at a graceful stop, so a successor takes over
  at once instead of after the TTL.

A host that does not hold a lease **watches** its key: the bucket asks the server for a marker
when an entry expires (``limit_marker_ttl``, nats-server 2.11+), so a release or an expiry
reaches every waiting host the moment it happens and one of them takes the lease at once,
instead of at its next poll. The poll (every ``ttl / 8``) stays, for a watch that died with
its server.

The holder trusts its lease only for ``trust`` seconds (less than the TTL) after the last
renewal it *sent*; the server's clock starts later, so the holder stops believing in its lease
before the server lets anybody else take it. That is the fence a paused host meets when it
wakes up: ``Lease.fence()`` names the problem before any command runs, and the renewal then
fails and says so. Time is ``time.monotonic``, which runs on while a process is stopped.

A host restarted under the same holder name takes its own lease back at once (the process
that held it is gone: two live processes must not share a name, see ``holder_name``).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
from nats.aio.client import Client
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import BadRequestError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from events.tasks import cancel

log = logging.getLogger(__name__)

BUCKET = "CAIRN_LEASES"
# Seconds between renewals after one failed: a JetStream leader election (4-10 s when a server
# of three dies) must not use up the holder's trust between two tries.
RETRY_EVERY = 0.25


class LeaseState(enum.Enum):
    WAITING = "waiting"  # somebody else holds it, or nobody has taken it yet
    HELD = "held"
    STOPPED = "stopped"


# How long a NATS cluster may be without a leader for a replicated stream when the server
# that led it dies: a follower campaigns 4-9 s after the last heartbeat it heard
# (minElectionTimeoutDefault..maxElectionTimeoutDefault in nats-server's server/raft.go;
# heartbeats every second), a campaign waits up to 0.8 s more, and the first renewal after it
# lands within RETRY_EVERY. A lease must outlive that, or its holder gives up its actors
# because one NATS server died.
LEADERLESS_AT_WORST = 9.0 + 0.8 + RETRY_EVERY


@attrs.frozen
class LeaseSettings:
    """``ttl``: seconds a holder that stopped renewing keeps the lease (``CAIRN_LEASE_TTL``);
    ``replicas``: copies of the bucket in a NATS cluster (like the events stream's)."""

    ttl: float = 12.0
    replicas: int = 1

    # The outage a holder rides out, at worst, is trust - renew_every: the bus can fail just
    # after a renewal landed, and the next is due a period later. It must exceed
    # LEADERLESS_AT_WORST. At the former default TTL of 8 s (renewing every ttl / 8) it was
    # 6.2 s, and one kill of the lease bucket's leader in three or four took longer to elect a
    # successor (a follower drew a timeout past ~6 s): the holder stopped its actors and
    # another host took them over, interrupting nothing but moving everything. Renewing every
    # ttl / 24, a TTL of 12 s rides out 10.3 s; a dead host's actors move 12 s after its last
    # renewal (the watch sees the expiry as it happens), and a graceful stop hands them on at
    # once. The price: a holder writes its key twice a second (0.5 s) instead of every 1.9 s.

    @property
    def renew_every(self) -> float:
        return self.ttl / 24

    @property
    def poll_every(self) -> float:
        """How often a host that does not hold the lease tries it without being told (its
        watch tells it at once; this is for a watch that died with its server)."""
        return self.ttl / 8

    @property
    def trust(self) -> float:
        return self.ttl * 0.9

    @property
    def rides_out(self) -> float:
        """Seconds without an answer from the bus that the holder survives, at worst."""
        return self.trust - self.renew_every

    def bucket(self) -> KeyValueConfig:
        return KeyValueConfig(
            bucket=BUCKET,
            description="cairn: which host runs which actors (one key per lease)",
            history=1,
            ttl=self.ttl,
            storage=StorageType.FILE,
            replicas=self.replicas,
            # An expired entry leaves a marker behind for this long, which the watchers of
            # its key receive: the moment a dead holder's lease is free.
            limit_marker_ttl=max(1.0, self.ttl),
        )


# JetStream's answer to creating a stream that exists with another configuration.
STREAM_CONFIG_DIFFERS = 10058


async def open_bucket(nc: Client, settings: LeaseSettings) -> KeyValue:
    """The lease bucket, created if missing; one made by an older cairn or with another TTL is
    brought to ``settings`` (its TTL, duplicate window and expiry markers), its leases kept."""
    js = nc.jetstream()
    wanted = settings.bucket()
    try:
        return await js.create_key_value(wanted)
    except BadRequestError as exc:
        if exc.err_code != STREAM_CONFIG_DIFFERS:
            raise
    stream = f"KV_{BUCKET}"
    config = (await js.stream_info(stream)).config
    ttl = float(wanted.ttl or settings.ttl)
    updated = config.evolve(
        max_age=ttl,
        duplicate_window=min(ttl, 120.0),
        allow_msg_ttl=True,
        subject_delete_marker_ttl=wanted.limit_marker_ttl,
    )
    await js.update_stream(updated)
    log.info("lease bucket %s: brought to a TTL of %g s with expiry markers", BUCKET, ttl)
    return await js.key_value(BUCKET)


def holder_name(data_dir: Path, name: str | None = None) -> str:
    """This host's name as a lease holder: ``CAIRN_HOST_NAME`` if given, else the machine's
    name and the data directory, stable across restarts and different for two instances on
    one machine."""
    return name or f"{socket.gethostname()}:{data_dir.resolve()}"


Callback = Callable[[], Awaitable[None]]
LostCallback = Callable[[str], Awaitable[None]]


class Lease:
    """One named lease, taken and kept by a background task.

    ``on_acquired`` runs when the lease is taken (start the actors); if it raises, the lease
    is released and taken again later. ``on_lost(reason)`` runs when it is lost (stop the
    actors at once: another host may already run them). Neither runs concurrently with the
    other.
    """

    def __init__(
        self,
        nc: Client,
        name: str,
        holder: str,
        settings: LeaseSettings,
        *,
        on_acquired: Callback,
        on_lost: LostCallback,
    ) -> None:
        self.nc = nc
        self.name = name
        self.holder = holder
        self.settings = settings
        self.state = LeaseState.WAITING
        self._on_acquired = on_acquired
        self._on_lost = on_lost
        self._kv: KeyValue | None = None
        self._revision = 0
        self._sent_at = 0.0  # monotonic time of the last renewal the server accepted (sent)
        self._task: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        # Set by the watch when the key was deleted or expired: try to take it now.
        self._free = asyncio.Event()
        self._reclaimed: str | None = None
        self._reaction: asyncio.Task[None] | None = None
        self._pause_until = 0.0
        # This process's own mark in the value: a write of ours whose answer was lost (a
        # leader election) is recognised as ours, not taken for another holder's.
        self._token = secrets.token_hex(8)
        # Who holds it when we do not (for /health), as last read.
        self.other: str | None = None
        # How the key was last seen freed ("released", "expired"), and how this host came to
        # hold the lease, in words (settle messages name the cause, not a restart).
        self._freed: str | None = None
        self.taken = f"nobody held the {name!r} lease"

    async def start(self) -> Lease:
        self._task = asyncio.create_task(self._keep(), name=f"lease-{self.name}")
        self._watcher = asyncio.create_task(self._watch(), name=f"lease-{self.name}-watch")
        return self

    def fence(self) -> str | None:
        """Why this host must not act for the lease now (None: it holds it, recently
        renewed)."""
        if self.state is not LeaseState.HELD:
            return f"this host does not hold the {self.name!r} lease"
        age = time.monotonic() - self._sent_at
        if age >= self.settings.trust:
            return (
                f"this host's {self.name!r} lease was last renewed {age:.1f} s ago "
                f"(trusted for {self.settings.trust:.1f} s): another host may hold it"
            )
        return None

    def _value(self) -> bytes:
        token = {"holder": self.holder, "pid": os.getpid(), "token": self._token}
        return json.dumps(token).encode()

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await open_bucket(self.nc, self.settings)
        return self._kv

    async def _keep(self) -> None:
        while self.state is not LeaseState.STOPPED:
            waiting = self.state is LeaseState.WAITING
            pause = self.settings.poll_every if waiting else self.settings.renew_every
            try:
                if waiting:
                    self._free.clear()
                    await self._try_acquire()
                elif not await self._renew():
                    pause = min(pause, RETRY_EVERY)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the bus is down, a leader election, a time-out
                log.debug("lease %s: %s", self.name, exc)
                if self.state is LeaseState.HELD:
                    if self.fence() is not None:
                        self._lose(f"could not renew it: {exc or type(exc).__name__}")
                    # Soon again: the trust left must not be spent waiting.
                    pause = min(pause, RETRY_EVERY)
            if self.state is LeaseState.WAITING:
                # Woken early by the watch when the key is deleted or expires.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._free.wait(), pause)
            else:
                await asyncio.sleep(pause)

    async def _watch(self) -> None:
        """Follow the key: who holds it (for /health), and the moment it is free. A watch
        that hears nothing for a TTL (renewals come every ``renew_every`` while anybody holds
        it, a marker when it expires) is made again: its server may have died."""
        while self.state is not LeaseState.STOPPED:
            watcher: KeyValue.KeyWatcher | None = None
            try:
                kv = await self._bucket()
                watcher = await kv.watch(self.name)
                while self.state is not LeaseState.STOPPED:
                    entry = await watcher.updates(timeout=self.settings.ttl)
                    if entry is not None:
                        self._seen(entry)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a time-out, the bus away: make the watch again
                log.debug("lease %s: watch: %s", self.name, exc or type(exc).__name__)
                await asyncio.sleep(RETRY_EVERY)
            finally:
                if watcher is not None:
                    with contextlib.suppress(Exception):
                        await watcher.stop()

    def _seen(self, entry: KeyValue.Entry) -> None:
        if entry.operation in (KV_DEL, KV_PURGE) or not entry.value:
            if self.state is LeaseState.WAITING:
                log.debug("lease %s: free (%s)", self.name, entry.operation or "expired")
                self._freed = "released" if entry.operation == KV_DEL else "expired"
            self._free.set()
            return
        holder = _field(entry.value, "holder")
        if self.state is LeaseState.WAITING and holder is not None and holder != self.holder:
            self.other, self._freed = holder, None

    def _taken_words(self, how: str | None) -> str:
        """How this host came to hold the lease, for messages."""
        who = self.other or "the host that held it"
        lease = f"the {self.name!r} lease"
        if how == "released":
            return f"{who} stopped and handed {lease} on"
        if how == "expired":
            return (
                f"{who} stopped renewing {lease} for {self.settings.ttl:g} s "
                "(it died, stalled or lost the bus)"
            )
        if self.other is not None:
            return f"{who} no longer held {lease}"
        return f"nobody held {lease}"

    async def _try_acquire(self) -> None:
        if time.monotonic() < self._pause_until:
            return
        kv = await self._bucket()
        sent = time.monotonic()
        self._reclaimed = None
        try:
            revision: int | None = await kv.create(self.name, self._value())
        except KeyWrongLastSequenceError:
            revision = await self._reclaim(kv)
        if revision is None:
            return
        self._revision, self._sent_at = revision, sent
        self.taken = self._reclaimed or self._taken_words(self._freed)
        self.state, self.other, self._freed = LeaseState.HELD, None, None
        log.info("lease %s: taken by %s", self.name, self.holder)
        self._react(self._acquired())

    def _react(self, reaction: Awaitable[None]) -> None:
        """Run a callback beside the renewals (starting actors may take longer than a
        renewal period), one after the other."""
        previous = self._reaction

        async def run() -> None:
            if previous is not None:
                with contextlib.suppress(BaseException):
                    await previous
            await reaction

        self._reaction = asyncio.create_task(run(), name=f"lease-{self.name}-reaction")

    async def _acquired(self) -> None:
        if self.state is not LeaseState.HELD:
            return  # lost before its actors started
        try:
            await self._on_acquired()
        except Exception:
            log.exception("lease %s: starting its actors failed; releasing it", self.name)
            self._lose("its actors did not start")
            await self._release()
            # Let another host try before this one does again.
            self._pause_until = time.monotonic() + self.settings.ttl

    async def _reclaim(self, kv: KeyValue) -> int | None:
        """Take the lease back from a previous process of this very host; None: another
        host holds it."""
        try:
            entry = await kv.get(self.name)
        except KeyNotFoundError:
            return None  # expired in between: the next round creates it
        assert entry.revision is not None
        if not entry.value:
            # The marker an expiry left (nats-py's create does not recognise one as a
            # deletion): the key is free. Of several hosts trying, one writes first.
            try:
                revision: int = await kv.update(self.name, self._value(), last=entry.revision)
            except KeyWrongLastSequenceError:
                return None
            self._reclaimed = self._taken_words("expired")
            return revision
        holder = _field(entry.value, "holder")
        if holder != self.holder:
            if holder != self.other:
                log.info("lease %s: held by %s", self.name, holder)
            self.other = holder
            return None
        revision = await kv.update(self.name, self._value(), last=entry.revision)
        self._reclaimed = "this host's previous process ended"
        log.info("lease %s: taken back from this host's previous process", self.name)
        return revision

    async def _renew(self) -> bool:
        """Renew; False when it must be tried again at once (an earlier renewal of ours
        landed although its answer was lost, so the revision we expected moved on)."""
        kv = await self._bucket()
        sent = time.monotonic()
        try:
            self._revision = await kv.update(self.name, self._value(), last=self._revision)
        except KeyWrongLastSequenceError:
            try:
                entry = await kv.get(self.name)
            except KeyNotFoundError:
                entry = None
            if entry is None or _field(entry.value, "token") != self._token:
                self._lose("another host took it (our renewal was refused)")
                return True
            assert entry.revision is not None
            self._revision = entry.revision
            return False
        if sent - self._sent_at >= self.settings.ttl:
            # Accepted although we were away past the TTL: nobody wrote the key meanwhile
            # (our revision is still the last), so nobody else acted for it.
            log.warning("lease %s: renewed late, after %.1f s", self.name, sent - self._sent_at)
        self._sent_at = sent
        return True

    def _lose(self, reason: str) -> None:
        if self.state is not LeaseState.HELD:
            return
        self.state = LeaseState.WAITING
        log.warning("lease %s: lost: %s; stopping its actors on this host", self.name, reason)
        self._react(self._lost(reason))

    async def _lost(self, reason: str) -> None:
        try:
            await self._on_lost(reason)
        except Exception:
            log.exception("lease %s: stopping its actors failed", self.name)

    async def _release(self) -> None:
        with contextlib.suppress(Exception):
            kv = await self._bucket()
            await kv.delete(self.name, last=self._revision)

    async def stop(self) -> None:
        """Stop renewing; give the lease up if held. ``on_lost`` is not called for this: the
        caller stops its actors first, then the lease."""
        held = self.state is LeaseState.HELD
        self.state = LeaseState.STOPPED
        for task in (self._task, self._watcher, self._reaction):
            await cancel(task)
        if held and self.nc.is_connected:
            await self._release()
            log.info("lease %s: released by %s", self.name, self.holder)

    async def settled(self) -> None:
        """Wait for the callbacks started so far (tests, and a stop that follows a start)."""
        while self._reaction is not None and not self._reaction.done():
            await asyncio.wait({self._reaction})


def _field(value: bytes | None, name: str) -> str | None:
    try:
        found = json.loads(value or b"{}").get(name)
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None
