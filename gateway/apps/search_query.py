"""The search service's query side, shared by HTTP (gateway/apps/search.py) and MCP
(gateway/apps/search_mcp.py): the loaded databases, the two branches and the rules for
``db``, ``q``, ``target`` and ``limit``."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from actors.search.engine import Engine
from actors.search.index.snippets import Terms, snippet
from actors.search.index.store import ChunkRow
from actors.search.index.tokenize import document_tokens, query_tokens
from actors.search.index.vectors import CUTOFF
from actors.search.registry import Registry
from events.codec import to_dict

DEFAULT_LIMIT = 10
MAX_LIMIT = 100
TARGETS = ("keyword", "semantic")
# `target=both` names the default (both branches) outright.
BOTH = "both"
# Opt-in, so a plain request keeps its shape: one fused list (BM25 and semantic) under the
# key `hybrid`.
HYBRID = "hybrid"
# `rank=bm25` ranks the keyword branch by BM25; without it, the spec's ranking (a contract).
RANKS = ("bm25",)


class BadRequest(Exception):
    pass


class Unavailable(Exception):
    """The database is loaded but cannot be used now (503): its stream is quarantined."""


def parse_limit(raw: str | None) -> int:
    """1-100; missing, non-numeric, non-positive or above 100 falls back to 10, so a sloppy
    client still gets an answer of a sensible size."""
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
    """The opt-in parameters: none of them set is a plain request, answered in its plain shape."""

    rank: str | None = None
    highlight: bool = False
    typo: bool = False  # one typo per word of 5+ letters forgiven: BM25 only
    # Each match's score, and how near the semantic branch came (`scores=1`): why a search by
    # meaning found what it found, or nothing.
    scores: bool = False


def group_by_source(
    rows: list[ChunkRow], terms: Terms | None = None, scores: dict[int, float] | None = None
) -> list[dict[str, Any]]:
    """Groups in rank order of their best match; matches in rank order within a group. With
    `terms` (`highlight=1`) each match also has `snippet` and `highlights`; with `scores`
    (`scores=1`, by row id) its `score`."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        match: dict[str, Any] = {"chunk": row.chunk, "content": row.content}
        if scores is not None:
            match["score"] = round(scores[row.id], 4)
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
        runners: dict[str, Callable[[str, int], Awaitable[list[tuple[ChunkRow, float]]]]] = {
            "keyword": (
                functools.partial(engine.bm25_scored, typo=options.typo)
                if options.rank == "bm25"
                else functools.partial(_spec_keyword_scored, engine, counted=options.scores)
            ),
            "semantic": engine.semantic_scored,
            HYBRID: functools.partial(engine.hybrid_scored, typo=options.typo),
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
        body: dict[str, Any] = {}
        for name, scored in zip(branches, results, strict=True):
            rows = [row for row, _ in scored]
            scores = {row.id: score for row, score in scored} if options.scores else None
            body[name] = group_by_source(rows, terms, scores)
        if options.scores and (
            "semantic" in branches or (HYBRID in branches and engine.provider is not None)
        ):
            closest = await engine.closest(q)
            body["semantic_cutoff"] = CUTOFF
            body["semantic_closest"] = None if closest is None else round(closest, 4)
        return body


async def _spec_keyword_scored(
    engine: Engine, query: str, limit: int, *, counted: bool
) -> list[tuple[ChunkRow, float]]:
    """The keyword branch (its default ranking), each chunk with its score in that ranking
    when `counted`: how many of the query's words it holds (0 otherwise: not worth the
    tokenizing)."""
    rows = await engine.keyword(query, limit)
    if not counted:
        return [(row, 0.0) for row in rows]
    words = set(query_tokens(query))
    return [(row, float(len(words & set(document_tokens(row.content))))) for row in rows]
