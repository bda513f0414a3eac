"""The search service: keyword, semantic or both over registered databases.

Read-only over HTTP. Databases are loaded at start-up from the durable registry; each gets an
indexer actor and an inbox watcher. Beside the query routes, `GET /api/status[?db=NAME]`
reports the indexing progress of each loaded database (the `search.progress` event's fields).
Requests whose Host or Origin is not a loopback name get 403 (DNS rebinding). `/mcp` is mounted
only with SEARCH_REMOTE=1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from actors.platform import Runtime
from actors.search.embed.embedding import Provider, make_provider
from actors.search.embed.query_cache import QueryCache
from actors.search.engine import Engine
from actors.search.index.stemming import language_for
from actors.search.indexer import Reconciled, SearchIndexer, SourcesChanged, watch
from actors.search.ingest import watching
from actors.search.registry import (
    Registry,
    RegistryError,
    adopt_legacy,
    bind_inbox,
    config_dir,
    inbox_root,
    model_cache,
    state_root,
)
from events.files import write_atomically
from events.integrity import quick_check
from gateway.apps.search_query import (
    BadRequest,
    Options,
    SearchService,
    Unavailable,
    parse_flag,
    parse_limit,
)
from gateway.http.health import add_health
from gateway.http.loopback import is_loopback_host, is_loopback_origin
from gateway.openapi import add_openapi
from gateway.services import ServiceDef

log = logging.getLogger(__name__)


@web.middleware
async def rebinding_guard(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    host = request.headers.get("Host", "")
    origin = request.headers.get("Origin")
    if not is_loopback_host(host) or (origin is not None and not is_loopback_origin(origin)):
        return web.json_response({"error": "forbidden: host or origin is not loopback"}, status=403)
    return await handler(request)


SEARCH = web.AppKey("search", SearchService)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _unescaped(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


async def _answer(
    what: str, work: Awaitable[Any], dumps: Callable[[Any], str] = json.dumps
) -> web.Response:
    """`work`'s result as JSON, or its failure as the API's JSON error: a bad request 400, an
    index not ready 503, anything else 500 (and logged)."""
    try:
        body = await work
    except BadRequest as exc:
        return _error(400, str(exc))
    except Unavailable as exc:
        return _error(503, str(exc))
    except Exception as exc:
        log.exception("%s failed", what)
        return _error(500, str(exc) or type(exc).__name__)
    return web.json_response(body, dumps=dumps)


def _search_handler(fixed: str | None) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def search(request: web.Request) -> Any:
        query = request.rel_url.query
        target = fixed if fixed is not None else query.get("target")
        options = Options(
            rank=query.get("rank"),
            highlight=parse_flag("highlight", query.get("highlight")),
            typo=parse_flag("typo", query.get("typo")),
            scores=parse_flag("scores", query.get("scores")),
        )
        return await request.app[SEARCH].search(
            query.get("db"), query.get("q"), target, parse_limit(query.get("limit")), options
        )

    async def handler(request: web.Request) -> web.Response:
        # Hits quote the documents: their text as it is, not escaped.
        return await _answer("search", search(request), _unescaped)

    return handler


async def health(_: web.Request) -> web.Response:
    return web.Response(text="OK")


async def status(request: web.Request) -> web.Response:
    return await _answer("status", request.app[SEARCH].status(request.rel_url.query.get("db")))


async def list_databases(request: web.Request) -> web.Response:
    try:
        return web.json_response(request.app[SEARCH].listing())
    except Exception as exc:
        return _error(500, str(exc))


def build_app(service: SearchService, *, remote: bool = False) -> web.Application:
    app = web.Application(middlewares=[rebinding_guard])
    app[SEARCH] = service
    app.router.add_get("/api/health", health)
    app.router.add_get("/api/list", list_databases)
    app.router.add_get("/api/status", status)
    app.router.add_get("/api/search", _search_handler(None))
    app.router.add_get("/api/keyword", _search_handler("keyword"))
    app.router.add_get("/api/semantic", _search_handler("semantic"))
    if remote:
        from gateway.apps.search_mcp import mount_mcp

        mount_mcp(app, service)
    return app


class Databases:
    """The loaded databases: each one's engine, indexer actor and inbox watcher.

    Every registered database is loaded at start, and one registered later (``cairn search
    add``) as soon as the registry file changes: the registry is the durable list, the
    service follows it without a restart. A removal takes effect at the next start (an index
    in use is not pulled from under running queries). A database whose indexer stream is
    quarantined, or whose index was built from another inbox (``bind_inbox``: another
    checkout's), goes into ``quarantined`` (db -> the problem) and answers 503."""

    def __init__(
        self,
        runtime: Runtime,
        registry: Registry,
        provider: Provider | None,
        cache: QueryCache | None,
    ) -> None:
        self.runtime = runtime
        self.registry = registry
        self.provider = provider
        self.cache = cache
        self.engines: dict[str, Engine] = {}
        self.quarantined: dict[str, str] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.stop = asyncio.Event()
        self._failed: set[str] = set()  # could not be opened: not tried again until restart
        self._lock = asyncio.Lock()

    async def load_registered(self) -> list[str]:
        """Open every registered database not open yet; the names newly loaded."""
        async with self._lock:
            try:
                entries = await asyncio.to_thread(self.registry.entries)
            except RegistryError as exc:
                log.error("search: %s", exc)
                return []
            loaded = []
            for entry in entries:
                if entry.db in self.engines or entry.db in self._failed:
                    continue
                if await self._open(entry.db):
                    loaded.append(entry.db)
            return loaded

    async def _open(self, db: str) -> bool:
        env = self.runtime.env
        inbox = inbox_root(env) / db
        try:
            await asyncio.to_thread(bind_inbox, self.registry.database_dir(db), inbox)
        except (RegistryError, OSError) as exc:
            log.error("search: database %s not loaded: %s", db, exc)
            self._failed.add(db)
            self.quarantined[db] = str(exc)
            return False
        # A damaged index file (events/integrity.py) is this database's problem alone.
        index = self.registry.database_dir(db) / "index.sqlite"
        verdict = await asyncio.to_thread(quick_check, index)
        if not verdict.ok:
            why = (
                f"the SQLite file {index} is damaged ({verdict.damage}); an index is rebuilt "
                f"from its inbox: with cairn stopped, remove {index.parent} and start cairn"
            )
            log.error("search: database %s not loaded: %s", db, why)
            self._failed.add(db)
            self.quarantined[db] = why
            return False
        try:
            engine = await asyncio.to_thread(
                Engine,
                db,
                self.registry.database_dir(db),
                inbox,
                self.provider,
                self.cache,
                language_for(env, db),
            )
            await asyncio.to_thread(engine.open_vectors)
        except Exception:
            log.exception("search: database %s could not be opened; not loaded", db)
            self._failed.add(db)
            return False
        self.engines[db] = engine
        handle = await self.runtime.actors.spawn(SearchIndexer, db, engine=engine)
        if handle.unavailable is not None:
            self.quarantined[db] = handle.unavailable.message
            return True
        self.tasks.append(asyncio.create_task(watch(inbox, handle, self.stop, engine)))
        todo = await asyncio.to_thread(engine.reconcile)
        await handle.ask(Reconciled(len(todo)))
        if todo:
            await handle.tell(SourcesChanged(tuple(todo)))
        return True

    async def follow_registry(self) -> None:
        """Load what ``cairn search add`` registers while the service runs."""
        root = self.registry.file.parent
        async for changes in watching.changes(root, self.stop, recursive=False):
            if any(Path(path).name == self.registry.file.name for _, path in changes):
                for db in await self.load_registered():
                    log.info("search: database %s registered; loaded", db)


def endpoint_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def write_endpoint(env: Mapping[str, str], base_url: str) -> None:
    path = config_dir(env) / "endpoint"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, base_url + "\n")


def remove_endpoint(env: Mapping[str, str], base_url: str) -> None:
    """Forget the endpoint at a clean stop, unless another instance has written its own since,
    so local clients (`cairn search mcp`) can tell a stopped service from an unreachable one."""
    path = config_dir(env) / "endpoint"
    with contextlib.suppress(OSError):
        if path.read_text().strip() == base_url:
            path.unlink()


async def build(runtime: Runtime) -> web.Application:
    env = runtime.env
    root = state_root(env)
    registry = Registry(root)
    moved_from = await asyncio.to_thread(adopt_legacy, env)
    if moved_from is not None:
        log.warning("search: moved the registry and indexes of %s to %s", moved_from, root)
    # Loading the local model takes a second or more: not on the event loop.
    cache_dir = model_cache(env)
    try:
        provider = await asyncio.to_thread(make_provider, env, cache_dir)
    except OSError as exc:
        if exc.filename is not None:
            raise
        # A write into the model cache (a full disk) names no file: name the folder.
        raise OSError(exc.errno, exc.strerror, str(cache_dir)) from exc
    cache_size = int(env.get("SEARCH_QUERY_CACHE_SIZE") or 10_000)
    root.mkdir(parents=True, exist_ok=True)
    cache = QueryCache(root / "query_cache.sqlite", cache_size)
    databases = Databases(runtime, registry, provider, cache)
    await databases.load_registered()
    engines, quarantined, tasks, stop = (
        databases.engines,
        databases.quarantined,
        databases.tasks,
        databases.stop,
    )
    tasks.append(asyncio.create_task(databases.follow_registry()))
    service = SearchService(registry, engines, quarantined)
    app = build_app(service, remote=env.get("SEARCH_REMOTE") == "1")
    add_health(
        app,
        "search",
        runtime,
        warnings=lambda: [f"database {db}: {why}" for db, why in quarantined.items()],
        details=lambda: {"databases": sorted(engines), "embedding": provider is not None},
    )
    add_openapi(app, "search", env, prefix="/api")
    listen = runtime.listen.get("search")
    base_url = endpoint_url(*listen) if listen is not None else None
    if base_url is not None:
        write_endpoint(env, base_url)

    async def save_loop() -> None:
        # The usearch file is a cache of the vectors in SQLite; saving it once they settle
        # spares a rebuild at the next start (and closing saves it too).
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=5)
            for engine in list(engines.values()):  # a database may be loaded meanwhile
                await asyncio.to_thread(engine.save_vectors_if_settled)

    tasks.append(asyncio.create_task(save_loop()))

    async def cleanup(_: web.Application) -> None:
        if base_url is not None:
            remove_endpoint(env, base_url)
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for db in engines:
            await runtime.actors.stop(SearchIndexer, db)
        for engine in engines.values():
            await asyncio.to_thread(engine.close)
        cache.close()
        if provider is not None:
            await provider.close()

    app.on_cleanup.append(cleanup)
    return app


SERVICE = ServiceDef(
    name="search",
    port_env="SEARCH_PORT",
    # A fixed default so bookmarks and agents keep the address across restarts; a free port
    # when another program holds it (clients read the `endpoint` file either way).
    default_port=8400,
    build=build,
    summary="keyword and semantic search over the inbox databases",
    loopback_only=True,
    json_errors=True,
    free_port_fallback=True,
)
