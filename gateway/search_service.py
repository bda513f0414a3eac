"""The search service's query side, shared by HTTP (gateway/search.py) and MCP
(gateway/search_mcp.py): the loaded databases, the two branches and the spec's rules for
``db``, ``q``, ``target`` and ``limit``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from actors.search.engine import Engine
from actors.search.registry import Registry
from actors.search.store import ChunkRow
from events.codec import to_dict

DEFAULT_LIMIT = 10
MAX_LIMIT = 100
TARGETS = ("keyword", "semantic")
# `target=both` names the default (both branches) outright.
BOTH = "both"


class BadRequest(Exception):
    pass


class Unavailable(Exception):
    """The database is loaded but cannot be used now (503): its stream is quarantined."""


def parse_limit(raw: str | None) -> int:
    """1-100; missing, non-numeric, non-positive or above 100 falls back to 10 (spec)."""
    try:
        value = int(raw) if raw is not None else DEFAULT_LIMIT
    except ValueError:
        return DEFAULT_LIMIT
    return value if 1 <= value <= MAX_LIMIT else DEFAULT_LIMIT


def quoted(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def group_by_source(rows: list[ChunkRow]) -> list[dict[str, Any]]:
    """Groups in rank order of their best match; matches in rank order within a group."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row.source, []).append({"chunk": row.chunk, "content": row.content})
    return [{"source": source, "matches": matches} for source, matches in groups.items()]


class SearchService:
    """Loaded databases and the two search branches; shared by HTTP and MCP."""

    def __init__(
        self,
        registry: Registry,
        engines: dict[str, Engine],
        quarantined: dict[str, str] | None = None,
    ) -> None:
        self.registry = registry
        self.engines = engines
        self.quarantined = quarantined or {}

    def listing(self) -> dict[str, Any]:
        return {
            "loaded": sorted(self.engines),
            "registered": [e.to_json() for e in self.registry.entries()],
        }

    async def status(self, db: str | None) -> dict[str, Any]:
        """Progress of one database (`db`) or of every loaded one (`{"databases": [...]}`)."""
        if db is not None:
            return to_dict(await asyncio.to_thread(self.engine(db).status))
        statuses = [
            await asyncio.to_thread(engine.status)
            for name, engine in sorted(self.engines.items())
            if name not in self.quarantined  # its indexer is not running: nothing to report
        ]
        return {"databases": [to_dict(s) for s in statuses]}

    def engine(self, db: str | None) -> Engine:
        if not db:
            raise BadRequest("db is required")
        if db in self.quarantined:
            raise Unavailable(f"database {quoted(db)} is unavailable: {self.quarantined[db]}")
        engine = self.engines.get(db)
        if engine is None:
            raise BadRequest(f"{quoted(db)} not exist")
        return engine

    async def search(
        self, db: str | None, q: str | None, target: str | None, limit: int
    ) -> dict[str, Any]:
        engine = self.engine(db)
        if not q:
            raise BadRequest("invalid argument: q is required")
        if target == BOTH:
            target = None
        if target is not None and target not in TARGETS:
            raise BadRequest(
                f"invalid argument: unknown target {quoted(target)}; "
                "use keyword, semantic or both (the default)"
            )
        branches = [target] if target else list(TARGETS)
        runners = {"keyword": engine.keyword, "semantic": engine.semantic}
        tasks = [asyncio.ensure_future(runners[name](q, limit)) for name in branches]
        try:
            results = await asyncio.gather(*tasks)
        except BaseException:
            # No partial result: the other branch is abandoned.
            for task in tasks:
                task.cancel()
            raise
        return {name: group_by_source(rows) for name, rows in zip(branches, results, strict=True)}
