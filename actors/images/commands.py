"""The image store's command side on NATS: request/reply subjects served by the actor host.

The gateway never calls the actor directly; it asks over NATS, so gateways on other hosts reach
the one store actor the same way as the gateway beside it. A refusal (``Rejected``) travels back
through ``serve_json`` as ``{"error": {"status", "message"}}``; the gateway's ``command`` raises
it again.
"""

from __future__ import annotations

import contextlib
from typing import Any

from nats.aio.client import Client
from nats.aio.subscription import Subscription

from actors.audit import BadBy, parse_by
from actors.images.layout import StoreLayout
from actors.images.store import SINGLETON, DeleteFile, ImageStoreActor, Reconcile, StoreFile
from actors.leased import Leased, Stop
from actors.platform import ClusterMode
from actors.runtime import ActorHandle, ActorHost, Rejected
from events.bus import flush_all, serve_json, unsubscribe_all
from events.leases import Lease

STORE_SUBJECT = "cairn.cmd.images.store"
DELETE_SUBJECT = "cairn.cmd.images.delete"
EVENTS_SUBJECT = "cairn.evt.images.*"
LEASE = "images"


async def serve_commands(
    nc: Client, actors: ActorHost, layout: StoreLayout
) -> tuple[ActorHandle, list[Subscription]]:
    """Spawn the store actor and answer its two command subjects. The actor first compares
    the catalogue with the files (in a thread): a stop between a file's move into place and
    its event's append, or files put into the store by hand while cairn was down, are
    recorded, so other hosts purge their caches of them."""
    handle = await actors.spawn(ImageStoreActor, SINGLETON, layout=layout)
    await handle.tell(Reconcile())

    async def on_store(payload: Any) -> Any:
        try:
            command = StoreFile(
                str(payload["path"]),
                str(payload["tmp_name"]),
                str(payload["type"]),
                int(payload["size"]),
                _by(payload),
            )
        except (KeyError, TypeError, ValueError):
            raise Rejected(400, "malformed command") from None
        return await handle.ask(command)

    async def on_delete(payload: Any) -> Any:
        try:
            command = DeleteFile(str(payload["path"]), _by(payload))
        except (KeyError, TypeError):
            raise Rejected(400, "malformed command") from None
        return await handle.ask(command)

    subs = [
        await serve_json(nc, STORE_SUBJECT, on_store, queue="images-store"),
        await serve_json(nc, DELETE_SUBJECT, on_delete, queue="images-store"),
    ]
    # A gateway's command sent at once (another connection) finds them.
    with contextlib.suppress(Exception):  # the bus is away: they reach it when back
        await flush_all(nc)
    return handle, subs


def _by(payload: Any) -> str | None:
    """Who asked (the audit trail), checked as any field of the command."""
    try:
        return parse_by(payload.get("by"))
    except BadBy as exc:
        raise Rejected(400, exc.message) from None
    except AttributeError:  # not an object
        raise TypeError("a command is an object") from None


async def serve_store(nc: Client, actors: ActorHost, layout: StoreLayout) -> Stop:
    """:func:`serve_commands`, and the way to stop it: its subjects, then its actor (cluster
    mode stops it when this host loses the ``images`` lease, ``actors/leased.py``)."""
    _, subs = await serve_commands(nc, actors, layout)

    async def stop() -> None:
        await unsubscribe_all(subs)
        await actors.stop(ImageStoreActor, SINGLETON)

    return stop


def leased_store(
    nc: Client, actors: ActorHost, layout: StoreLayout, cluster: ClusterMode
) -> Leased:
    """The store actor as cluster mode runs it: on the holder of the ``images`` lease, the
    image tree shared by every host (docs/images.md)."""

    async def start(lease: Lease) -> Stop:
        actors.fence((ImageStoreActor.aggregate,), lease.fence)
        return await serve_store(nc, actors, layout)

    return Leased(nc, LEASE, cluster.holder, cluster.leases, start)
