"""Function code for a cluster: every host's registry finds every version's code.

In cluster mode the registry runs on whichever host holds the ``functions`` lease, so the code
of a version uploaded through one host must be readable on another. ``SharedCode`` keeps it in
the JetStream object store ``CAIRN_CODE`` (replicated like the events stream), keyed by its
SHA-256 as on disk, and this host's ``CodeStore`` as a cache: an upload is written to both
before its version is recorded; a read that misses the cache fetches the object once.

An object is written once (the same code uploaded again finds it there) and deleted only by the
registry, when no version uses it any more, which leaves JetStream's delete marker. Only hosts
may write or delete in the bucket (events/permissions.py). Should an object vanish all the same
(its messages deleted or purged, a store lost), the registry says which code is missing, and
every host puts back, at start and then every ``HEAL_INTERVAL`` seconds, each object its own
cache holds that the bucket has no trace of (:meth:`SharedCode.heal`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from nats.aio.client import Client
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.errors import NotFoundError, ObjectDeletedError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from actors.functions.codestore import CodeStore, digest

BUCKET = "CAIRN_CODE"
HEAL_INTERVAL = 60.0

log = logging.getLogger(__name__)


class SharedCode:
    def __init__(self, nc: Client, cache: CodeStore, replicas: int = 1) -> None:
        self.nc = nc
        self.cache = cache
        self.replicas = replicas
        self._bucket: ObjectStore | None = None

    async def _objects(self) -> ObjectStore:
        if self._bucket is None:
            config = ObjectStoreConfig(
                bucket=BUCKET,
                description="cairn: function code by SHA-256",
                storage=StorageType.FILE,
                replicas=self.replicas,
            )
            self._bucket = await self.nc.jetstream().create_object_store(BUCKET, config=config)
        return self._bucket

    async def put(self, code: str) -> str:
        """Store ``code`` in the bucket and the cache; raises OSError (a disk) or a NATS error
        (the bus) when it cannot, and then no version may name it."""
        sha = await asyncio.to_thread(self.cache.put, code)
        objects = await self._objects()
        if not await _held(objects, sha):  # written once
            await objects.put(sha, code.encode("utf-8"))
        return sha

    async def heal(self) -> list[str]:
        """Put back every object this host's cache holds that the bucket has no trace of
        (neither the object nor the registry's delete marker); returns their SHA-256s."""
        objects = await self._objects()
        try:
            known = {info.name for info in await objects.list(ignore_deletes=False)}
        except NotFoundError:  # an empty bucket
            known = set()
        healed = []
        for sha in await asyncio.to_thread(self.cache.shas):
            if sha in known:
                continue
            code = await asyncio.to_thread(self.cache.get, sha)
            if digest(code) != sha:
                continue  # a damaged copy heals nothing
            await objects.put(sha, code.encode("utf-8"))
            healed.append(sha)
            log.warning("code %s was missing from %s; put back from this host's copy", sha, BUCKET)
        return healed

    async def heal_forever(self, interval: float = HEAL_INTERVAL) -> None:
        while True:
            try:
                await self.heal()
            except Exception as exc:  # the bus is down, or JetStream: the next round tries again
                log.debug("healing %s: %s", BUCKET, exc)
            await asyncio.sleep(interval)

    async def get(self, sha256: str) -> str:
        try:
            return await asyncio.to_thread(self.cache.get, sha256)
        except FileNotFoundError:
            pass
        objects = await self._objects()
        try:
            found = await objects.get(sha256)
        except (ObjectNotFoundError, ObjectDeletedError, NotFoundError):
            raise FileNotFoundError(f"code {sha256} is in no host's store") from None
        code = (found.data or b"").decode("utf-8")
        if digest(code) != sha256:
            raise ValueError(f"code {sha256} read from {BUCKET} does not match its digest")
        await asyncio.to_thread(self.cache.put, code)
        return code

    async def remove(self, sha256: str) -> None:
        await asyncio.to_thread(self.cache.remove, sha256)
        objects = await self._objects()
        with contextlib.suppress(ObjectNotFoundError, ObjectDeletedError, NotFoundError):
            await objects.delete(sha256)


async def _held(objects: ObjectStore, sha256: str) -> bool:
    try:
        info = await objects.get_info(sha256)
    except (ObjectNotFoundError, ObjectDeletedError, NotFoundError):
        return False
    return not info.deleted
