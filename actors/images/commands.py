"""The image store's command side on NATS: request/reply subjects served by the actor host.

The gateway never calls the actor directly (DESIGN §1); it asks over NATS, so gateways on other
hosts reach the one store actor the same way. A refusal (``Rejected``) travels back through
``serve_json`` as ``{"error": {"status", "message"}}``; the gateway's ``command`` raises it again.
"""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client
from nats.aio.subscription import Subscription

from actors.images.layout import StoreLayout
from actors.images.store import SINGLETON, DeleteFile, ImageStoreActor, Reconcile, StoreFile
from actors.runtime import ActorHandle, ActorHost, Rejected
from events.bus import serve_json

STORE_SUBJECT = "cairn.cmd.images.store"
DELETE_SUBJECT = "cairn.cmd.images.delete"
EVENTS_SUBJECT = "cairn.evt.images.*"


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
            )
        except (KeyError, TypeError, ValueError):
            raise Rejected(400, "malformed command") from None
        return await handle.ask(command)

    async def on_delete(payload: Any) -> Any:
        try:
            command = DeleteFile(str(payload["path"]))
        except (KeyError, TypeError):
            raise Rejected(400, "malformed command") from None
        return await handle.ask(command)

    subs = [
        await serve_json(nc, STORE_SUBJECT, on_store, queue="images-store"),
        await serve_json(nc, DELETE_SUBJECT, on_delete, queue="images-store"),
    ]
    return handle, subs
