"""The search service over HTTP: every error, limits, targets, grouping, live indexing."""

from __future__ import annotations

import os

import pytest

from tests.conftest import wait_for
from tests.search.conftest import SearchHarness

NOTES = {
    "cats.md": "# Cats\n\nThe cat sat on the mat and purred.\n\nCats sleep most of the day.",
    "money.txt": "Invoices must be paid within thirty days of receipt.",
    "tokyo.txt": "東京タワーに行きました。とても高かったです。",
}


async def start_with_notes(h: SearchHarness, **env: str) -> None:
    await h.start_indexed("notes", NOTES, **env)


async def test_health_list_and_a_database_registered_while_running(
    harness: SearchHarness,
) -> None:
    await start_with_notes(harness)
    assert await harness.get("/api/search", db="later", q="x") == (
        400,
        {"error": '"later" not exist'},
    )
    harness.registry.add("later")  # registered while running: loaded at once
    assert await harness.get("/api/health") == (200, "OK")

    async def later_loaded() -> bool:
        return "later" in (await harness.get("/api/list"))[1]["loaded"]

    await wait_for(later_loaded, what="later loaded")
    status, body = await harness.get("/api/list")
    assert status == 200
    assert body["loaded"] == ["later", "notes"]
    assert [e["db"] for e in body["registered"]] == ["notes", "later"]
    assert all(e["createAt"].endswith("Z") for e in body["registered"])
    assert await harness.get("/api/search", db="later", q="x") == (
        200,
        {"keyword": [], "semantic": []},
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"q": "cat"}, "db is required"),
        ({"db": "", "q": "cat"}, "db is required"),
        ({"db": "nope", "q": "cat"}, '"nope" not exist'),
        ({"db": "../notes", "q": "cat"}, '"../notes" not exist'),
        ({"db": "notes"}, "invalid argument: q is required"),
        (
            {"db": "notes", "q": "cat", "target": "all"},
            'invalid argument: unknown target "all"; '
            "use keyword, semantic, hybrid or both (the default)",
        ),
        (
            {"db": "notes", "q": "cat", "rank": "tfidf"},
            'invalid argument: unknown rank "tfidf"; use bm25, or omit it for the spec\'s ranking',
        ),
        (
            {"db": "notes", "q": "cat", "highlight": "yes"},
            'invalid argument: highlight must be 1 or 0, not "yes"',
        ),
    ],
)
async def test_errors(harness: SearchHarness, params: dict[str, str], message: str) -> None:
    await start_with_notes(harness)
    assert await harness.get("/api/search", **params) == (400, {"error": message})


async def test_targets_grouping_and_ranking(harness: SearchHarness) -> None:
    await start_with_notes(harness)
    status, body = await harness.get("/api/search", db="notes", q="cats cat mat", target="keyword")
    assert status == 200
    assert list(body) == ["keyword"]
    assert body["keyword"] == [
        {
            "source": "cats.md",
            "matches": [
                {"chunk": 0, "content": NOTES["cats.md"]},
            ],
        }
    ]
    status, body = await harness.get("/api/search", db="notes", q="zzzz qqqq")
    assert status == 200 and body == {"keyword": [], "semantic": []}
    both = await harness.get("/api/search", db="notes", q="cats cat mat", target="both")
    assert both == await harness.get("/api/search", db="notes", q="cats cat mat")
    assert list(both[1]) == ["keyword", "semantic"]
    status, body = await harness.get("/api/keyword", db="notes", q="invoices", target="semantic")
    assert list(body) == ["keyword"] and body["keyword"][0]["source"] == "money.txt"
    status, body = await harness.get("/api/semantic", db="notes", q="a kitten on a rug", target="x")
    assert list(body) == ["semantic"] and body["semantic"][0]["source"] == "cats.md"


async def test_semantic_paraphrase_and_cut_off(harness: SearchHarness) -> None:
    await start_with_notes(harness)
    _, body = await harness.get(
        "/api/search", db="notes", q="a kitten resting on a rug", target="semantic"
    )
    assert body["semantic"][0]["source"] == "cats.md"
    assert "money.txt" not in [g["source"] for g in body["semantic"]]  # below cosine 0.3
    _, body = await harness.get(
        "/api/search", db="notes", q="quantum chromodynamics lattice", target="semantic"
    )
    assert body == {"semantic": []}


async def test_cjk_keyword_queries(harness: SearchHarness) -> None:
    await start_with_notes(harness)
    for q in ("東京タワー", "東京", "高"):
        _, body = await harness.get("/api/search", db="notes", q=q, target="keyword")
        assert [g["source"] for g in body["keyword"]] == ["tokyo.txt"], q


async def test_limit_fallbacks(harness: SearchHarness) -> None:
    harness.registry.add("many")
    harness.write(
        "many/a.txt", "\n\n".join(f"common word paragraph {i} " + "x " * 600 for i in range(15))
    )
    await harness.start(EMBEDDING_PROVIDER="none")
    await harness.event("search.document_indexed", "a.txt")
    for limit, expected in [
        ("3", 3),
        ("100", 15),
        ("0", 10),
        ("-1", 10),
        ("abc", 10),
        ("101", 10),
        (None, 10),
    ]:
        params = {"db": "many", "q": "common", "target": "keyword"}
        if limit is not None:
            params["limit"] = limit
        _, body = await harness.get("/api/search", **params)
        assert sum(len(g["matches"]) for g in body["keyword"]) == expected, limit
    # With no provider the semantic branch fails and takes the whole request with it.
    status, body = await harness.get("/api/search", db="many", q="common")
    assert status == 500 and "no embedding provider" in body["error"] and set(body) == {"error"}


async def test_files_added_changed_deleted_while_running_and_while_stopped(
    harness: SearchHarness,
) -> None:
    await start_with_notes(harness)
    harness.write("notes/new.txt", "Zebras graze on the savanna.")
    indexed = await harness.event("search.document_indexed", "new.txt")
    assert indexed["chunks"] == 1 and indexed["retired"] == 0
    _, body = await harness.get("/api/search", db="notes", q="zebras", target="keyword")
    assert body["keyword"][0]["source"] == "new.txt"
    harness.write("notes/new.txt", "Giraffes eat leaves.")
    changed = await harness.event("search.document_indexed", "new.txt")
    assert changed["retired"] == 1
    _, body = await harness.get("/api/search", db="notes", q="zebras giraffes", target="keyword")
    assert [m["content"] for g in body["keyword"] for m in g["matches"]] == ["Giraffes eat leaves."]
    (harness.inbox / "notes/new.txt").unlink()
    await harness.event("search.document_removed", "new.txt")
    _, body = await harness.get("/api/search", db="notes", q="giraffes leaves eat")
    assert body == {"keyword": [], "semantic": []}

    await harness.stop()
    harness.write("notes/offline.txt", "Penguins live in Antarctica.")
    (harness.inbox / "notes/money.txt").unlink()
    path = harness.inbox / "notes/cats.md"
    path.write_text("Dogs bark at night.")
    os.utime(path, ns=(1, 1))
    await harness.start()
    got = {
        (await harness.event(t, s))["source"]
        for t, s in [
            ("search.document_indexed", "offline.txt"),
            ("search.document_removed", "money.txt"),
            ("search.document_indexed", "cats.md"),
        ]
    }
    assert got == {"offline.txt", "money.txt", "cats.md"}
    _, body = await harness.get(
        "/api/search", db="notes", q="penguins dogs invoices cats", target="keyword"
    )
    assert sorted(g["source"] for g in body["keyword"]) == ["cats.md", "offline.txt"]


async def test_unsupported_files_are_dismissed(harness: SearchHarness) -> None:
    await start_with_notes(harness)
    harness.write("notes/image.png", b"\x89PNG....")
    event = await harness.event("search.document_dismissed", "image.png")
    assert "unsupported" in event["reason"]


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "evil.example"},
        {"Host": "evil.example:8080"},
        {"Host": "127.0.0.1.evil.example"},
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
    ],
)
async def test_dns_rebinding_is_refused(harness: SearchHarness, headers: dict[str, str]) -> None:
    await start_with_notes(harness)
    assert harness.session is not None
    async with harness.session.get(harness.base + "/api/list", headers=headers) as resp:
        assert resp.status == 403


async def test_mcp_is_not_mounted_without_remote(harness: SearchHarness) -> None:
    await start_with_notes(harness)
    status, _ = await harness.get("/mcp")
    assert status == 404
