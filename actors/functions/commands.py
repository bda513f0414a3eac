"""The registry's command side on NATS: upload (store the code, then let the actor decide the
version) and resolve (which version a run uses, with its code). The gateway never calls the
actor directly; a refusal is a ``CommandFailed`` (``Rejected`` from the actor), which
``serve_json`` sends back as ``{"error": {"status", "message"}}``."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from nats.aio.client import Client
from nats.aio.subscription import Subscription

from actors.audit import BadBy, parse_by
from actors.functions import protocol
from actors.functions.codestore import Code
from actors.functions.registry import (
    SINGLETON,
    Delete,
    Deleted,
    FunctionRegistry,
    ListFunctions,
    Resolve,
    StoredVersion,
    StoreVersion,
)
from actors.functions.requests import (
    FAILED_TO_RUN,
    INVALID_PAYLOAD,
    SAVE_FAILED,
    BadRequest,
    parse_upload_fields,
)
from actors.functions.settings import DEFAULT_CODE_MAX_SIZE
from actors.runtime import ActorHandle, ActorHost
from events.bus import CommandFailed, flush_all, serve_json
from events.errors import DamagedEvent, StoreWriteFailed, disk_full, reason

log = logging.getLogger(__name__)


async def serve_registry(
    nc: Client, actors: ActorHost, code: Code, code_max_size: int = DEFAULT_CODE_MAX_SIZE
) -> tuple[ActorHandle, list[Subscription]]:
    handle = await actors.spawn(FunctionRegistry, SINGLETON)

    async def on_upload(payload: Any) -> Any:
        # The gateway checked these already; the registry does not trust its callers, and
        # checks them by the same rules (the same messages).
        try:
            upload = parse_upload_fields(payload, code_max_size)
            by = parse_by(payload.get("by"))  # who asked, for the audit trail
        except BadRequest as exc:
            raise CommandFailed(exc.status, exc.message) from None
        except BadBy as exc:
            raise CommandFailed(400, exc.message) from None
        path, language, source = upload.path, str(upload.language), upload.code
        try:
            sha = await code.put(source)
            stored = await handle.ask(
                StoreVersion(path, language, sha, len(source.encode("utf-8")), by)
            )
        except DamagedEvent:
            raise  # the registry is quarantined: 503 naming the damaged row
        except (OSError, StoreWriteFailed) as exc:
            # A storage write failed: the API's 500 and message (what clients test for),
            # followed by why when it is something the operator must act on (a full disk, a
            # store refusing writes).
            why = exc.message if isinstance(exc, StoreWriteFailed) else reason(exc)
            log.error("storing a version of %r failed: %s", path, why)
            told = isinstance(exc, StoreWriteFailed) or disk_full(exc)
            raise CommandFailed(500, f"{SAVE_FAILED}: {why}" if told else SAVE_FAILED) from None
        except Exception:
            log.exception("storing a version of %r failed", path)
            raise CommandFailed(500, SAVE_FAILED) from None
        return {"path": stored.path, "language": stored.language, "version": stored.version}

    async def on_resolve(payload: Any) -> Any:
        try:
            path, version = payload["path"], payload.get("version")
        except (KeyError, TypeError, AttributeError):
            raise CommandFailed(400, INVALID_PAYLOAD) from None
        if not isinstance(path, str) or not (version is None or type(version) is int):
            raise CommandFailed(400, INVALID_PAYLOAD)
        stored = await handle.ask(Resolve(path, version))  # Rejected: 404 and friends
        try:
            source = await code.get(stored.sha256)
        except Exception:  # not on disk, not in the cluster's bucket, or unreadable
            log.exception("code %s of %r is missing", stored.sha256, path)
            missing = f"{FAILED_TO_RUN}the code of version {stored.version} is missing"
            raise CommandFailed(500, missing) from None
        return {
            "path": stored.path,
            "version": stored.version,
            "language": stored.language,
            "code": source,
        }

    async def on_list(_: Any) -> Any:
        listing: dict[str, list[StoredVersion]] = await handle.ask(ListFunctions())
        return {path: [_version(v) for v in versions] for path, versions in listing.items()}

    async def on_delete(payload: Any) -> Any:
        path = payload.get("path") if isinstance(payload, dict) else None
        if not isinstance(path, str) or not path:
            raise CommandFailed(400, INVALID_PAYLOAD)
        try:
            by = parse_by(payload.get("by"))
        except BadBy as exc:
            raise CommandFailed(400, exc.message) from None
        deleted: Deleted = await handle.ask(Delete(path, by))  # Rejected 404 when unknown
        for sha in deleted.unused_code:
            try:
                await code.remove(sha)
            except Exception as exc:  # the versions are gone either way; the file is only bytes
                log.warning("code %s of deleted %r stays on disk: %s", sha, path, reason(exc))
        return {"path": path, "deleted": len(deleted.versions)}

    queue = protocol.REGISTRY_QUEUE
    subs = [
        await serve_json(nc, protocol.UPLOAD_SUBJECT, on_upload, queue=queue),
        await serve_json(nc, protocol.RESOLVE_SUBJECT, on_resolve, queue=queue),
        await serve_json(nc, protocol.LIST_SUBJECT, on_list, queue=queue),
        await serve_json(nc, protocol.DELETE_SUBJECT, on_delete, queue=queue),
    ]
    # A gateway's command sent at once (another connection) finds them.
    with contextlib.suppress(Exception):  # the bus is away: they reach it when back
        await flush_all(nc)
    return handle, subs


def _version(stored: StoredVersion) -> dict[str, Any]:
    return {
        "version": stored.version,
        "language": stored.language,
        "size": stored.size,
        "sha256": stored.sha256,
    }
