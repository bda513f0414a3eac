"""The search service's query side, shared by HTTP (gateway/search.py) and MCP
(gateway/search_mcp.py): the loaded databases, the two branches and the spec's rules for
``db``, ``q``, ``target`` and ``limit``."""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

import attrs

from actors.search.engine import Engine
from actors.search.registry import Registry
from actors.search.snippets import Terms, snippet
from actors.search.store import ChunkRow
from events.codec import to_dict

DEFAULT_LIMIT = 10
MAX_LIMIT = 100
TARGETS = ("keyword", "semantic")
# `target=both` names the default (both branches) outright.
BOTH = "both"
# Opt-in, beyond the spec: one fused list (BM25 and semantic) under the key `hybrid`.
HYBRID = "hybrid"
# `rank=bm25` ranks the keyword branch by BM25; without it, the spec's ranking (a contract).
RANKS = ("bm25",)


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


def parse_flag(name: str, raw: str | None) -> bool:
    """`1`/`true` on, `0`/`false`/missing off; anything else is a 400 naming the parameter."""
    if raw is None or raw.lower() in ("0", "false", ""):
        return False
    if raw.lower() in ("1", "true"):
        return True
    raise BadRequest(f"invalid argument: {name} must be 1 or 0, not {quoted(raw)}")


@attrs.frozen
class Options:
    """The opt-in parameters: none of them set is the spec's request."""

    rank: str | None = None
    highlight: bool = False
    typo: bool = False  # one typo per word of 5+ letters forgiven: BM25 only


def group_by_source(rows: list[ChunkRow], terms: Terms | None = None) -> list[dict[str, Any]]:
    """Groups in rank order of their best match; matches in rank order within a group. With
    `terms` (`highlight=1`) each match also has `snippet` and `highlights`."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        match: dict[str, Any] = {"chunk": row.chunk, "content": row.content}
        if terms is not None:
            found = snippet(row.content, terms)
            match["snippet"] = found.text
            match["highlights"] = [list(span) for span in found.highlights]
        groups.setdefault(row.source, []).append(match)
    return [{"source": source, "matches": matches} for source, matches in groups.items()]


PLAIN = Options()


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
        self,
        db: str | None,
        q: str | None,
        target: str | None,
        limit: int,
        options: Options = PLAIN,
    ) -> dict[str, Any]:
        engine = self.engine(db)
        if not q:
            raise BadRequest("invalid argument: q is required")
        if target == BOTH:
            target = None
        if target is not None and target not in (*TARGETS, HYBRID):
            raise BadRequest(
                f"invalid argument: unknown target {quoted(target)}; "
                "use keyword, semantic, hybrid or both (the default)"
            )
        if options.rank is not None and options.rank not in RANKS:
            raise BadRequest(
                f"invalid argument: unknown rank {quoted(options.rank)}; "
                "use bm25, or omit it for the spec's ranking"
            )
        branches = [target] if target else list(TARGETS)
        if options.typo and options.rank != "bm25" and target != HYBRID:
            raise BadRequest("invalid argument: typo=1 needs rank=bm25 or target=hybrid")
        runners = {
            "keyword": (
                functools.partial(engine.bm25, typo=options.typo)
                if options.rank == "bm25"
                else engine.keyword
            ),
            "semantic": engine.semantic,
            HYBRID: functools.partial(engine.hybrid, typo=options.typo),
        }
        tasks = [asyncio.ensure_future(runners[name](q, limit)) for name in branches]
        try:
            results = await asyncio.gather(*tasks)
        except BaseException:
            # No partial result: the other branch is abandoned.
            for task in tasks:
                task.cancel()
            raise
        terms = Terms.of(q, engine.db.language) if options.highlight else None
        return {
            name: group_by_source(rows, terms) for name, rows in zip(branches, results, strict=True)
        }
