"""The opt-in search modes over HTTP: `rank=bm25`, `target=hybrid`, `highlight=1`, `typo=1`."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from tests.search.conftest import SearchHarness
from tests.search.test_two_stages import run_cli

PARAGRAPH = (
    "Our routers are configured by hand and the firewall rules are reviewed every quarter by "
    "the network team, who keep the change log in the wiki."
)
FILES = {
    # For "who reads the database server" the spec's ranking puts a-notes first (three words
    # matched, as b-owner, and the lower row); BM25 must not let stop words decide.
    "a-notes.txt": "Who reads the notes? The team that writes the notes reads the notes.",
    "b-owner.txt": "The storage team owns the database server and answers its pages.",
    "c-billing.txt": "Invoices must be paid within thirty days of receipt.",
    "d-backup.md": "# Backups\n\nThe nightly backup copies every volume to the second site.",
    "e-long.md": "# Network\n\n" + "\n\n".join([PARAGRAPH] * 12),
    "f-cafe.txt": "Le café de la gare ouvre à six heures, le Café du Port à sept.",
    "g-tokyo.txt": "東京タワーに行きました。とても高かったです。",
}


async def started(h: SearchHarness, **env: str) -> None:
    await h.start_indexed("notes", FILES, **env)


def sources(groups: list[dict[str, Any]]) -> list[str]:
    return [group["source"] for group in groups]


async def search(h: SearchHarness, **params: str) -> dict[str, Any]:
    status, body = await h.get("/api/search", db="notes", **params)
    assert status == 200, body
    return dict(body)


async def test_bm25_ignores_stop_words_stems_and_keeps_the_spec_ranking_by_default(
    harness: SearchHarness,
) -> None:
    await started(harness)
    q = "who reads the database server"
    spec = await search(harness, q=q, target="keyword")
    assert sources(spec["keyword"])[:2] == ["a-notes.txt", "b-owner.txt"]
    assert "d-backup.md" in sources(spec["keyword"])  # by "the" alone
    bm25 = await search(harness, q=q, target="keyword", rank="bm25")
    assert sources(bm25["keyword"]) == ["b-owner.txt", "a-notes.txt"]  # no stop word counts
    # Stemming: "backups" finds "backup", "owning" finds "owns".
    body = await search(harness, q="backups", target="keyword", rank="bm25")
    assert sources(body["keyword"]) == ["d-backup.md"]
    body = await search(harness, q="owning", target="keyword", rank="bm25")
    assert sources(body["keyword"]) == ["b-owner.txt"]
    assert (await search(harness, q="owning", target="keyword"))["keyword"] == []
    # The deprecated route takes `rank` too.
    status, body = await harness.get("/api/keyword", db="notes", q="backups", rank="bm25")
    assert status == 200 and sources(body["keyword"]) == ["d-backup.md"]


async def test_bm25_stop_word_only_query(harness: SearchHarness) -> None:
    await started(harness)
    # Nothing but stop words: searched as they are, not an empty answer.
    body = await search(harness, q="who the", target="keyword", rank="bm25")
    assert sources(body["keyword"])[0] == "a-notes.txt"


async def test_hybrid_is_one_fused_list_grouped_by_source(harness: SearchHarness) -> None:
    await started(harness)
    # Found by meaning only: no word of the query is in the invoice sentence.
    body = await search(harness, q="when do I have to pay a bill", target="hybrid")
    assert list(body) == ["hybrid"]
    assert sources(body["hybrid"])[0] == "c-billing.txt"
    # Found by words and by meaning: first; every group has the plain answer's shape.
    body = await search(harness, q="nightly backups of volumes", target="hybrid", limit="5")
    assert sources(body["hybrid"])[0] == "d-backup.md"
    assert len({*sources(body["hybrid"])}) == len(body["hybrid"])  # one group per source
    assert sum(len(g["matches"]) for g in body["hybrid"]) <= 5
    for group in body["hybrid"]:
        assert set(group) == {"source", "matches"}
        assert all(set(m) == {"chunk", "content"} for m in group["matches"])


async def test_a_query_longer_than_the_model_window(harness: SearchHarness) -> None:
    await started(harness)
    long = " ".join(["firewall rules reviewed by the network team"] * 150)  # ~1,000 tokens
    body = await search(harness, q=long, target="hybrid", highlight="1")
    assert sources(body["hybrid"])[0] == "e-long.md"


async def test_highlights_are_character_offsets_into_the_snippet(harness: SearchHarness) -> None:
    await started(harness)
    body = await search(harness, q="cafe CAFÉ", target="hybrid", highlight="1")
    match = next(g for g in body["hybrid"] if g["source"] == "f-cafe.txt")["matches"][0]
    assert match["snippet"] == FILES["f-cafe.txt"]
    assert [match["snippet"][a:b] for a, b in match["highlights"]] == ["café", "Café"]
    body = await search(harness, q="東京", target="keyword", rank="bm25", highlight="1")
    match = body["keyword"][0]["matches"][0]
    assert [match["snippet"][a:b] for a, b in match["highlights"]] == ["東京"]
    # A long chunk: a window around the words, cut at word boundaries, with them in it.
    body = await search(harness, q="wiki", target="keyword", rank="bm25", highlight="1")
    match = body["keyword"][0]["matches"][0]
    assert len(match["snippet"]) <= 240 < len(match["content"])
    assert match["snippet"] in match["content"]
    highlighted = [match["snippet"][a:b] for a, b in match["highlights"]]
    assert highlighted and set(highlighted) == {"wiki"}
    # Without highlight=1 the matches keep their two plain fields.
    body = await search(harness, q="wiki", target="keyword", rank="bm25")
    assert set(body["keyword"][0]["matches"][0]) == {"chunk", "content"}


async def test_queries_that_stem_to_nothing_or_to_hundreds_of_words(
    harness: SearchHarness,
) -> None:
    await started(harness)
    for q in ("!!! ... ???", "_ _ _", "\u200b\u200b"):
        body = await search(harness, q=q, target="keyword", rank="bm25", highlight="1")
        assert body == {"keyword": []}, q
    # 900 distinct words (near the 8 KiB request line), one of them in a file: found.
    many = " ".join(f"zq{i}x" for i in range(900)) + " invoices"
    body = await search(harness, q=many, target="hybrid", highlight="1")
    assert sources(body["hybrid"])[0] == "c-billing.txt"
    match = body["hybrid"][0]["matches"][0]
    assert [match["snippet"][a:b] for a, b in match["highlights"]] == ["Invoices"]


async def test_typo_tolerance_is_opt_in_and_forgives_one_edit_in_long_words(
    harness: SearchHarness,
) -> None:
    await started(harness, EMBEDDING_PROVIDER="none")
    # Two letters swapped: nothing without typo=1, the backups with it.
    assert (await search(harness, q="backpus", target="keyword", rank="bm25"))["keyword"] == []
    assert (await search(harness, q="backpus", target="keyword"))["keyword"] == []
    typo = await search(harness, q="backpus", target="keyword", rank="bm25", typo="1")
    assert sources(typo["keyword"]) == ["d-backup.md"]
    # A letter missing, one too many, one wrong; in hybrid too (BM25 alone here: no model).
    for q in ("invoces", "invoicess", "invoiced", "firewal rules"):
        body = await search(harness, q=q, target="hybrid", typo="1")
        assert sources(body["hybrid"])[0] in {"c-billing.txt", "e-long.md"}, q
    # Two edits are too many; a word shorter than five letters is never stretched.
    assert (await search(harness, q="bakcpus", target="keyword", rank="bm25", typo="1"))[
        "keyword"
    ] == []
    assert (await search(harness, q="tema", target="keyword", rank="bm25", typo="1"))[
        "keyword"
    ] == []
    # The default ranking has no typo tolerance: asking for it is an error, not a silent no.
    status, body = await harness.get(
        "/api/search", db="notes", q="backpus", target="keyword", typo="1"
    )
    assert (status, body) == (
        400,
        {"error": "invalid argument: typo=1 needs rank=bm25 or target=hybrid"},
    )
    status, body = await harness.get(
        "/api/search", db="notes", q="backpus", target="hybrid", typo="yes"
    )
    assert (status, body) == (400, {"error": 'invalid argument: typo must be 1 or 0, not "yes"'})


async def test_scores_say_how_each_match_ranked_and_how_near_meaning_came(
    harness: SearchHarness,
) -> None:
    await started(harness)
    # Without `scores` the answer keeps its shape (the plain fields only).
    plain = await search(harness, q="backup", target="both")
    assert set(plain) == {"keyword", "semantic"}
    assert all(set(m) == {"chunk", "content"} for g in plain["keyword"] for m in g["matches"])

    body = await search(harness, q="when do I have to pay a bill", target="both", scores="1")
    assert body["semantic_cutoff"] == 0.3
    first = body["semantic"][0]
    assert first["source"] == "c-billing.txt"
    cosine = first["matches"][0]["score"]
    assert 0.3 <= cosine <= 1 and body["semantic_closest"] == cosine  # the best is the nearest
    # The spec's keyword ranking: how many of the query's words a chunk holds.
    assert all(
        m["score"] >= 1 and m["score"] == int(m["score"])
        for g in body["keyword"]
        for m in g["matches"]
    )
    bm25 = await search(harness, q="backups", target="keyword", rank="bm25", scores="1")
    assert bm25["keyword"][0]["matches"][0]["score"] > 0 and "semantic_cutoff" not in bm25
    hybrid = await search(harness, q="nightly volume copies", target="hybrid", scores="1")
    fused = [m["score"] for g in hybrid["hybrid"] for m in g["matches"]]
    assert fused == sorted(fused, reverse=True) and 0 < fused[0] <= 1

    # Nothing passes the cut-off: the answer says how near the nearest chunk came.
    far = await search(harness, q="zebra giraffe savanna", target="semantic", scores="1")
    assert far["semantic"] == []
    assert far["semantic_closest"] is not None and far["semantic_closest"] < 0.3

    status, error = await harness.get("/api/search", db="notes", q="x", scores="yes")
    assert (status, error) == (400, {"error": 'invalid argument: scores must be 1 or 0, not "yes"'})


async def test_the_command_line_says_when_meaning_found_nothing_and_offers_keywords(
    harness: SearchHarness,
) -> None:
    await started(harness)
    env = harness.env
    far = ["search", "query", "notes", "zebra giraffe savanna"]
    code, out, _ = await asyncio.to_thread(run_cli, [*far, "--target", "semantic"], env)
    lines = out.splitlines()
    assert code == 0 and lines[0] == "semantic: 0 matches"
    assert re.fullmatch(
        r"\(nothing by meaning passed the 0\.3 similarity cut-off \(the nearest chunk scored "
        r"0\.[0-2]\d\); keyword matches instead:\)",
        lines[1],
    ), lines
    assert lines[2] == "keyword: 0 matches"
    # Hybrid (the default): the keyword matches are what is left, and it says so.
    code, out, _ = await asyncio.to_thread(run_cli, [*far[:3], "zebra giraffe backups"], env)
    lines = out.splitlines()
    assert lines[0] == "hybrid: 1 match" and lines[1].startswith("  d-backup.md #")
    assert lines[-1].startswith("(nothing by meaning passed the 0.3 similarity cut-off")
    assert lines[-1].endswith("; these are keyword matches)")
    # Found by meaning: each match with its score, nothing more said.
    code, out, _ = await asyncio.to_thread(run_cli, [*far[:3], "when do I have to pay a bill"], env)
    lines = out.splitlines()
    assert re.fullmatch(r"  c-billing\.txt #0 \(0\.\d\d\): Invoices must be paid.*", lines[1])
    assert not lines[-1].startswith("(")
