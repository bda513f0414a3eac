"""What every service is built on: data dir, configuration, NATS, the event store, the outbox
relay and the actor host, opened and closed in one place (``open_runtime``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
from nats.aio.client import Client
from sqlalchemy.engine import make_url

from actors.config import ConfigError, env_bool, env_float, env_int, env_str
from actors.config import data_dir as resolve_data_dir
from actors.journal import Journal
from actors.runtime import ActorHost
from events.access import NatsAccess
from events.consumers import ConsumerBroker
from events.credentials import Keyring, KeyringError
from events.integrity import Verdict, damaged_file, quick_check
from events.jetstream import DUPLICATE_WINDOW, StreamSettings
from events.leases import LeaseSettings, holder_name
from events.nats_server import EmbeddedNats
from events.permissions import Role
from events.relay import OutboxRelay
from events.signing import EventSigner
from events.store import EventStore, RetryPolicy, default_store_url

log = logging.getLogger(__name__)

# The roles a cairn process plays, each on a connection of its own (events/permissions.py).
PROCESS_ROLES = (Role.HOST, Role.GATEWAY, Role.RUNNER)


class StoreUnreadable(Exception):
    """The event store's own records (its format stamp, the relay's position) sit in damaged
    pages of its SQLite file: no service can record anything, so cairn does not start."""


@attrs.frozen
class ClusterMode:
    """``CAIRN_CLUSTER=1``: this host's name as a lease holder (``CAIRN_HOST_NAME``) and the
    leases' settings; the services run their single-owner parts under leases
    (``actors/leased.py``)."""

    holder: str
    leases: LeaseSettings


@attrs.define
class Runtime:
    data_dir: Path
    env: Mapping[str, str]
    # The host role's connection: the actors, the relay, leases, the code store.
    nc: Client
    store: EventStore
    actors: ActorHost
    relay: OutboxRelay
    embedded_nats: EmbeddedNats | None = None
    # Command-line switches a service may honour (e.g. "sim" from `cairn serve vm --sim`).
    flags: frozenset[str] = frozenset()
    # Where each service listens, (host, port), known before its app is built.
    listen: dict[str, tuple[str, int]] = attrs.field(factory=dict)
    # Each service's health report (gateway/http/health.py), gathered by /status. Shared by the
    # copies a service makes of its runtime.
    health: dict[str, Callable[[], dict[str, Any]]] = attrs.field(factory=dict)
    # Not None in cluster mode (``cluster_mode``).
    cluster: ClusterMode | None = None
    # How this process reaches NATS, and its other roles' connections (events/permissions.py):
    # the gateway's (HTTP translated into commands, events followed) and the runner's.
    bus: NatsAccess = attrs.field(kw_only=True)
    gateway_nc: Client = attrs.field(kw_only=True)
    runner_nc: Client = attrs.field(kw_only=True)
    # Checks that an event was published by a cairn host (None: NATS_KEYS=none).
    signer: EventSigner | None = None
    # The start-up check of the event store's SQLite file (events/integrity.py): None when it
    # is whole, or not a SQLite file; else the sentence naming the damage and the way out.
    store_damage: str | None = None

    @property
    def nats_url(self) -> str:
        """The servers, as given (may hold a password: show :attr:`shown_nats_url`)."""
        return self.bus.url

    @property
    def shown_nats_url(self) -> str:
        """The servers without any user or password: what logs and ``/status`` show."""
        return self.bus.shown_url

    @property
    def connections(self) -> dict[str, Client]:
        return {"host": self.nc, "gateway": self.gateway_nc, "runner": self.runner_nc}


@contextlib.asynccontextmanager
async def open_runtime(
    env: Mapping[str, str],
    data_dir: Path | None = None,
    flags: frozenset[str] = frozenset(),
    *,
    journal: Journal | None = None,
) -> AsyncIterator[Runtime]:
    """Start (or join) NATS, open the store, start the relay and the actor host; undo it all
    in reverse order on exit, also when start-up fails half-way. ``journal``: the operator's
    journal, built from the services' lines by the composition root (gateway/server.py), fed
    every append of this process."""
    root = data_dir or resolve_data_dir(env)
    async with contextlib.AsyncExitStack() as stack:
        embedded = None
        access = external_nats(env)
        if access is None:
            embedded = EmbeddedNats(root / "nats")
            url = await embedded.start()
            stack.push_async_callback(embedded.stop)
            log.debug("embedded nats-server on %s (store %s)", url, root / "nats")
            access = NatsAccess(url, embedded.keyring)
        connected = {}
        for role in PROCESS_ROLES:
            connected[role] = await access.connect(role)
            stack.push_async_callback(connected[role].close)
        nc = connected[Role.HOST]
        signer = access.signer()
        retry = RetryPolicy(budget=env_float(env, "CAIRN_STORE_RETRY", 10.0, min=0))
        url = env_str(env, "CAIRN_EVENT_STORE") or default_store_url(root)
        damage = await check_store_file(url, env_float(env, "CAIRN_STORE_CHECK", 10.0, min=0))
        try:
            store = await EventStore.open(url, retry)
            stack.push_async_callback(store.close)
            if journal is not None:
                journal.attach(store)
            relay = OutboxRelay(store, nc, stream=stream_settings(env), signer=signer)
            await relay.start()
        except Exception as exc:
            refuse_if_damaged(url, damage, exc)
            raise
        stack.push_async_callback(relay.stop)
        # Readers (gateways, observers) get their consumers of the events stream from a host.
        broker = await ConsumerBroker(nc).start()
        stack.push_async_callback(broker.stop)
        host = ActorHost(store)
        stack.push_async_callback(host.stop_all)
        yield Runtime(
            root, env, nc, store, host, relay, embedded, flags,
            cluster=cluster_mode(env, root), bus=access, gateway_nc=connected[Role.GATEWAY],
            runner_nc=connected[Role.RUNNER], signer=signer, store_damage=damage,
        )  # fmt: skip


async def check_store_file(url: str, timeout: float) -> str | None:
    """The event store's SQLite file checked before it is opened (events/integrity.py): None
    when whole (or not a SQLite file, or ``timeout`` 0); else the damage, logged once. cairn
    starts anyway: a service whose data sits in the damaged pages is down, the others run."""
    database = make_url(url).database
    if make_url(url).get_backend_name() != "sqlite" or not database or timeout <= 0:
        return None
    if database == ":memory:":
        return None
    verdict = await asyncio.to_thread(quick_check, Path(database), timeout=timeout)
    if verdict.unchecked is not None:
        log.warning("event store file %s: %s", database, verdict.unchecked)
    if verdict.ok:
        return None
    message = verdict.message()
    log.error("%s; services that read the damaged pages stay down, the others start", message)
    return message


def refuse_if_damaged(url: str, damage: str | None, exc: BaseException) -> None:
    """Raise StoreUnreadable, naming the damage and the way out, when opening the store failed
    on a damaged page (a service's own events in such a page only stop that service; these
    records every service needs)."""
    words = damaged_file(exc)
    if words is None:
        return
    if damage is None:  # the check was skipped, or timed out before it reached the page
        damage = Verdict(Path(make_url(url).database or "events.sqlite3"), damage=words).message()
    raise StoreUnreadable(
        "cannot start: the event store's own records (its format, where its relay stands) are "
        f"in the damaged pages ({words}), so no service could record anything: {damage}"
    ) from None


def external_nats(env: Mapping[str, str]) -> NatsAccess | None:
    """How to reach the NATS of ``NATS_URL``, or None (start the embedded server).

    ``NATS_KEYS`` names the keyring (a directory made by ``cairn cluster init``, or the
    embedded server's ``<data>/nats/keys`` for a second process on this machine) and is
    required with ``NATS_URL``: ``NATS_KEYS=none`` connects without credentials, to a server
    the operator left open on purpose. ``NATS_CA``: the CA file that signed the servers'
    TLS certificates."""
    url = env_str(env, "NATS_URL")
    if url is None:
        return None
    keys = env_str(env, "NATS_KEYS")
    if keys is None:
        raise ConfigError(
            "NATS_KEYS",
            "is required with NATS_URL: the directory of cairn's NATS keys (`cairn cluster "
            "init` makes one; a cairn on this machine has <CAIRN_DATA>/nats/keys); "
            "NATS_KEYS=none connects without credentials",
        )
    keyring = None
    if keys.lower() != "none":
        keyring = Keyring(Path(keys))
        try:
            missing = [role.value for role in PROCESS_ROLES if not keyring.has(role)]
            keyring.events_key()
        except KeyringError as exc:
            raise ConfigError("NATS_KEYS", str(exc)) from None
        if missing:
            raise ConfigError(
                "NATS_KEYS", f"{keys} has no key for {', '.join(missing)} (<role>.nk files)"
            )
    ca = env_str(env, "NATS_CA")
    if ca is not None and not Path(ca).is_file():
        raise ConfigError("NATS_CA", "must name a readable CA certificate file", ca)
    return NatsAccess(url, keyring, Path(ca) if ca is not None else None)


def stream_settings(env: Mapping[str, str]) -> StreamSettings:
    """The events stream's settings: ``CAIRN_EVENTS_REPLICAS`` (default 1; 3 on a three-server
    cluster), ``CAIRN_EVENTS_MAX_AGE`` (seconds an event stays in the stream) and
    ``CAIRN_EVENTS_MAX_BYTES`` (its size cap)."""
    replicas = env_int(env, "CAIRN_EVENTS_REPLICAS", 1, min=1, max=5)
    assert replicas is not None
    default = StreamSettings()
    max_age = env_float(env, "CAIRN_EVENTS_MAX_AGE", default.max_age, min=DUPLICATE_WINDOW)
    max_bytes = env_int(env, "CAIRN_EVENTS_MAX_BYTES", default.max_bytes, min=1 << 20)
    assert max_bytes is not None
    return StreamSettings(replicas=replicas, max_age=max_age, max_bytes=max_bytes)


def lease_settings(env: Mapping[str, str]) -> LeaseSettings:
    """Cluster mode's leases: ``CAIRN_LEASE_TTL`` seconds (default 15) a dead holder keeps one,
    replicated like the events stream."""
    ttl = env_float(env, "CAIRN_LEASE_TTL", LeaseSettings().ttl, min=1.0)
    return LeaseSettings(ttl=ttl, replicas=stream_settings(env).replicas)


def cluster_mode(env: Mapping[str, str], data_dir: Path) -> ClusterMode | None:
    """Cluster mode's settings when ``CAIRN_CLUSTER`` is on, else None (one host)."""
    if not env_bool(env, "CAIRN_CLUSTER"):
        return None
    holder = holder_name(data_dir, env_str(env, "CAIRN_HOST_NAME"))
    return ClusterMode(holder, lease_settings(env))
