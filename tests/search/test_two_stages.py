"""Keyword indexing runs ahead of embedding: with the embedding provider held back (an
OpenAI-compatible server whose answers wait on a gate), a backlog is searchable by its words,
an edit made while its old chunk is being embedded never brings the old chunk back, and the
progress counts add up at every step; `GET /api/status` and `cairn search status` show them."""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import os
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from actors.search import priority
from actors.search.embed.embedding import LocalProvider
from actors.search.engine import EMBED_BATCH
from actors.search.events import DocumentIndexed
from actors.search.ingest import keyword_pipeline
from actors.search.registry import state_root
from gateway.cli import search as search_cli
from tests.search.conftest import SearchHarness
from tests.search.fake_openai import FakeOpenAI

# Three chunks each: more chunks than one embedding call takes, so the order shows.
FILES = EMBED_BATCH // 3 + 20


def held_back(fake: FakeOpenAI) -> dict[str, str]:
    fake.gate = asyncio.Event()
    return {"EMBEDDING_PROVIDER": "openai", "EMBEDDING_URL": fake.url}


def adds_up(status: dict[str, Any]) -> bool:
    return status["embedded"] + status["pending"] + status["failed"] == status["chunks"]


def stored_counts(h: SearchHarness, db: str) -> tuple[int, int, int]:
    """(active chunks, active chunks with vectors, vectors of retired chunks), read from the
    database file itself."""
    path = state_root(h.env) / "databases" / db / "index.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute(
            "SELECT (SELECT count(*) FROM chunks WHERE active = 1),"
            " (SELECT count(DISTINCT v.chunk_id) FROM vectors v"
            "  JOIN chunks c ON c.id = v.chunk_id AND c.active = 1),"
            " (SELECT count(*) FROM vectors v JOIN chunks c ON c.id = v.chunk_id"
            "  AND c.active = 0)"
        ).fetchone()


async def test_a_backlog_is_keyword_searchable_before_its_embeddings(
    harness: SearchHarness, fake: FakeOpenAI
) -> None:
    harness.registry.add("notes")
    for i in range(FILES):
        paragraphs = [f"Report {i} paragraph {p}: word{i}x{p} " + "filler " * 60 for p in range(3)]
        harness.write(f"notes/doc{i}.txt", "\n\n".join(paragraphs))
    await harness.start(**held_back(fake))
    for i in range(FILES):
        assert (await harness.event("search.document_indexed", f"doc{i}.txt"))["chunks"] == 3
    await asyncio.wait_for(fake.arrived.wait(), 30)  # the embedder is busy, and held

    # Every file is found by its words while no vector exists yet.
    for i in (0, 17, FILES - 1):
        _, body = await harness.get("/api/search", db="notes", q=f"word{i}x2", target="keyword")
        assert [g["source"] for g in body["keyword"]] == [f"doc{i}.txt"]
    status, held = await harness.get("/api/status", db="notes")
    assert status == 200
    assert held["db"] == "notes" and held["state"] == "embedding"
    assert (held["queued"], held["documents"], held["chunks"]) == (0, FILES, 3 * FILES)
    assert (held["embedded"], held["pending"], held["failed"]) == (0, 3 * FILES, 0)

    assert fake.gate is not None
    fake.gate.set()
    done = await harness.settled()
    assert (done["chunks"], done["embedded"], done["pending"], done["failed"]) == (
        3 * FILES,
        3 * FILES,
        0,
        0,
    )
    assert stored_counts(harness, "notes") == (3 * FILES, 3 * FILES, 0)
    exact = "Report 3 paragraph 1: word3x1 " + "filler " * 60
    _, body = await harness.get("/api/search", db="notes", q=exact, target="semantic")
    best = body["semantic"][0]
    assert best["source"] == "doc3.txt"
    assert best["matches"][0] == {"chunk": 1, "content": exact.strip()}
    # Chunks were embedded newest first: the first request held the last files' chunks.
    first_inputs = fake.requests[0]["body"]["input"]
    assert any(f"word{FILES - 1}x" in text for text in first_inputs)
    assert not any("word0x" in text for text in first_inputs)


async def test_an_edit_during_embedding_never_serves_the_old_chunk(
    harness: SearchHarness, fake: FakeOpenAI
) -> None:
    harness.registry.add("notes")
    harness.write("notes/animal.txt", "zebra stripes savanna grazing herd")
    await harness.start(**held_back(fake))
    await harness.event("search.document_indexed", "animal.txt")
    await asyncio.wait_for(fake.arrived.wait(), 30)  # the old chunk is being embedded

    harness.write("notes/animal.txt", "giraffe necks acacia leaves herd")
    changed = await harness.event("search.document_indexed", "animal.txt")
    assert changed["retired"] == 1
    _, body = await harness.get("/api/search", db="notes", q="zebra giraffe", target="keyword")
    assert [m["content"] for g in body["keyword"] for m in g["matches"]] == [
        "giraffe necks acacia leaves herd"
    ]

    assert fake.gate is not None
    fake.gate.set()  # the old chunk's vector arrives after it was retired
    done = await harness.settled()
    assert (done["chunks"], done["embedded"], done["pending"]) == (1, 1, 0)
    assert stored_counts(harness, "notes") == (1, 1, 0)
    for q in ("zebra stripes savanna grazing herd", "herd"):
        _, body = await harness.get("/api/search", db="notes", q=q)
        contents = [m["content"] for branch in body.values() for g in branch for m in g["matches"]]
        assert contents and set(contents) == {"giraffe necks acacia leaves herd"}, q


async def test_progress_counts_add_up_and_come_at_most_once_a_second(
    harness: SearchHarness, fake: FakeOpenAI
) -> None:
    harness.registry.add("notes")
    for i in range(30):
        harness.write(f"notes/n{i}.txt", f"note {i} " + "words " * 40)
    await harness.start(EMBEDDING_PROVIDER="openai", EMBEDDING_URL=fake.url)
    seen: list[dict[str, Any]] = []
    while not seen or seen[-1]["data"]["state"] != "idle":
        event = await asyncio.wait_for(harness.events.get(), 60)
        if event["type"] == "search.progress":
            seen.append(event)
    for event in seen:
        assert adds_up(event["data"]), event["data"]
    final = seen[-1]["data"]
    assert (final["queued"], final["documents"], final["chunks"]) == (0, 30, 30)
    assert final["embedded"] == 30 and final["keyword_rate"] >= 0
    busy = [e["recorded_at"] for e in seen[:-1]]
    # recorded_at is the store's clock when it appended, a little after the actor decided.
    assert all(b - a >= 0.9 for a, b in itertools.pairwise(busy))
    status, body = await harness.get("/api/status")
    assert status == 200 and [d["db"] for d in body["databases"]] == ["notes"]
    assert adds_up(body["databases"][0]) and body["databases"][0]["state"] == "idle"
    assert await harness.get("/api/status", db="nope") == (400, {"error": '"nope" not exist'})


# The service's `"nope" not exist` (the service's words over HTTP), said as a sentence.
NOT_LOADED = (
    'cairn: no database "nope" is loaded in the search service (`cairn search list` shows the '
    "registered ones)\n"
)


def run_cli(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = search_cli.main(argv, env)
    return code, out.getvalue(), err.getvalue()


async def test_cairn_search_status(harness: SearchHarness, tmp_path: Path) -> None:
    harness.registry.add("notes")
    harness.write("notes/a.txt", "alpha beta gamma")
    await harness.start(EMBEDDING_PROVIDER="none")
    await harness.settled()
    code, out, _ = await asyncio.to_thread(run_cli, ["search", "status"], harness.env)
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == [
        "db", "state", "queued", "documents", "chunks", "embedded", "pending", "failed",
        "keyword/s", "embedding/s",
    ]  # fmt: skip
    assert row.split()[:8] == ["notes", "idle", "0", "1", "1", "0", "1", "0"]
    code, out, _ = await asyncio.to_thread(
        run_cli, ["search", "status", "notes", "--json"], harness.env
    )
    assert code == 0 and '"db": "notes"' in out and '"chunks": 1' in out
    code, _, err = await asyncio.to_thread(run_cli, ["search", "status", "nope"], harness.env)
    assert (code, err) == (1, NOT_LOADED)
    stopped = {**harness.env, "XDG_CONFIG_HOME": str(tmp_path / "elsewhere")}
    code, _, err = await asyncio.to_thread(run_cli, ["search", "status"], stopped)
    assert code == 3 and "the search service is not running" in err  # try again later


async def test_cairn_search_add_query_and_list_against_the_running_service(
    harness: SearchHarness, tmp_path: Path
) -> None:
    await harness.start(EMBEDDING_PROVIDER="none")
    code, out, _ = await asyncio.to_thread(run_cli, ["search", "add", "papers"], harness.env)
    assert code == 0
    inbox = harness.inbox / "papers"
    assert out.splitlines()[0] == f"registered papers; drop files into {inbox}"
    indexed = harness.event("search.document_indexed", "basalt.txt")
    harness.write("papers/basalt.txt", "Basalt is a volcanic rock.\n\nGranite is not.")
    await indexed  # served without a restart
    code, out, _ = await asyncio.to_thread(
        run_cli, ["search", "query", "papers", "volcanic", "--target", "keyword"], harness.env
    )
    assert code == 0
    assert out.splitlines() == [
        "keyword: 1 match",
        "  basalt.txt #0 (1): Basalt is a volcanic rock. Granite is not.",  # one word matched
    ]
    # Hybrid by default, as the console; without an embedding provider it is BM25 alone, and
    # nothing is said about meaning.
    code, out, _ = await asyncio.to_thread(
        run_cli, ["search", "query", "papers", "volcanic"], harness.env
    )
    assert (code, out.splitlines()[0]) == (0, "hybrid: 1 match")
    assert out.splitlines()[1].startswith("  basalt.txt #0 (0.40): ")  # BM25's share, 0.4
    hybrid = ["search", "query", "papers", "rocks", "--target", "hybrid", "--rank", "bm25"]
    code, out, _ = await asyncio.to_thread(run_cli, hybrid, harness.env)
    assert (code, out.splitlines()[0]) == (0, "hybrid: 1 match")
    typo = ["search", "query", "papers", "volcanci", "--target", "hybrid", "--typo"]
    code, out, _ = await asyncio.to_thread(run_cli, typo, harness.env)
    assert (code, out.splitlines()[0]) == (0, "hybrid: 1 match")
    code, out, _ = await asyncio.to_thread(run_cli, typo[:-1], harness.env)
    assert (code, out.splitlines()[0]) == (0, "hybrid: 0 matches")
    code, out, err = await asyncio.to_thread(run_cli, ["search", "query", "nope", "x"], harness.env)
    assert (code, err) == (1, NOT_LOADED)
    code, out, _ = await asyncio.to_thread(run_cli, ["search", "list"], harness.env)
    registry = harness.registry.file
    assert out.splitlines()[0] == f"registry {registry}"
    db, _, inbox_col, index_col = out.splitlines()[1].split("\t")
    assert db == "papers" and inbox_col == f"inbox {inbox}"
    assert index_col == f"index {harness.registry.database_dir('papers')}"
    assert registry.is_absolute() and inbox.is_absolute()


@pytest.mark.parametrize("name", [keyword_pipeline.WRITER, keyword_pipeline.PREPARER])
def test_the_keyword_processes_run_below_the_service_under_their_names(name: str) -> None:
    """The keyword stage's processes are niced (an operator's `ps` shows NI 5), so the event
    loop answering queries wins a shared core, and named, so `top` tells them apart; the
    thread that started them is not niced."""
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    pool = keyword_pipeline._start_process(name)
    try:
        pid = pool.submit(os.getpid).result(timeout=60)
        assert pid != os.getpid()
        assert os.getpriority(os.PRIO_PROCESS, pid) == before + priority.WRITER_NICE
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before
        assert Path(f"/proc/{pid}/comm").read_text().strip() == name
    finally:
        pool.shutdown()


def test_document_embedding_runs_below_the_keyword_writer() -> None:
    """Embedding threads run `EMBED_NICE` below the service, relative to it like the writer,
    so the order (queries, then keyword indexing, then embedding) holds however the service
    itself was niced: here a service already at nice +2."""

    def own_nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def niced_service() -> tuple[int, int]:
        priority.lower_this_thread(2)
        provider = LocalProvider(threads=1, runtime="numpy")
        # The pool's thread starts from this one, at its nice value, then lowers itself.
        return own_nice(), provider._pool.submit(own_nice).result(timeout=60)

    with ThreadPoolExecutor(1) as service:
        service_nice, embed_nice = service.submit(niced_service).result(timeout=120)
    assert embed_nice == service_nice + priority.EMBED_NICE
    assert priority.EMBED_NICE > priority.WRITER_NICE > 0


async def test_a_backlog_larger_than_a_keyword_block_is_indexed_once_and_all_recorded(
    harness: SearchHarness,
) -> None:
    # 1,700 files of 10 chunks: the writer takes the first 1,638 (a block of ids is full) and
    # hands back the rest, which the next call indexes.
    files = 1_700
    harness.registry.add("notes")
    for i in range(files):
        paragraphs = [f"file{i} part{p} " + "filler words here " * 36 for p in range(10)]
        harness.write(f"notes/f{i:04}.txt", "\n\n".join(paragraphs))
    await harness.start(EMBEDDING_PROVIDER="none")
    body = await harness.until_indexed("notes", files)
    assert (body["queued"], body["chunks"]) == (0, 10 * files)
    for i in (0, 1_637, 1_638, files - 1):
        _, found = await harness.get("/api/search", db="notes", q=f"file{i}", target="keyword")
        assert [g["source"] for g in found["keyword"]] == [f"f{i:04}.txt"]
        assert len(found["keyword"][0]["matches"]) == 10
    # Stopped at once: the events still waiting for their turn are recorded on the way out.
    stream = await harness.stopped_stream("notes")
    indexed = [r.event for r in stream if isinstance(r.event, DocumentIndexed)]
    assert sorted(e.source for e in indexed) == [f"f{i:04}.txt" for i in range(files)]
    assert {e.chunks for e in indexed} == {10}


async def test_progress_events_follow_the_database_not_the_paced_document_events(
    harness: SearchHarness,
) -> None:
    """Document events are paced (128 every 0.3 s): a backlog of 1,000 files is indexed long
    before its events are all recorded. The progress event saying so is not held back."""
    files = 1_000
    harness.registry.add("notes")
    for i in range(files):
        harness.write(f"notes/f{i:04}.txt", f"file{i} with a few words")
    await harness.start(EMBEDDING_PROVIDER="none")
    order: list[str] = []
    indexed = 0
    while indexed < files:
        event = await asyncio.wait_for(harness.events.get(), 60)
        if event["type"] == "search.document_indexed":
            indexed += 1
            order.append("document")
        elif event["type"] == "search.progress" and event["data"]["state"] == "idle":
            assert event["data"]["documents"] == files
            order.append("idle")
    assert "idle" in order and order.index("idle") < len(order) - 1, "idle came last"
