"""The spec's keyword answers are a contract: byte for byte what they were before BM25, hybrid
and snippets came in (opt-in beside them).

`spec_ranking_golden.json` holds the raw bodies the service answered before those changes
(recorded with this file's corpus and queries by the code of commit c93265f; regenerate only
on purpose, with `CAIRN_WRITE_GOLDEN=1`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.search.conftest import SearchHarness

GOLDEN = Path(__file__).with_name("spec_ranking_golden.json")

# Many ties of matched-word counts, files whose names do not follow their content, several
# chunks per file, accents, CJK and stop words.
PARAGRAPH = (
    "The backup of the database server runs every night at two, and the backups are kept "
    "for thirty days on the second disk of the storage node in the rack."
)
FILES = {
    "a-notes.txt": "Who owns the database server? The team that runs the storage owns it.",
    "b-backup.md": "# Backups\n\n" + "\n\n".join([PARAGRAPH] * 8),
    "c-billing.txt": (
        "Invoices must be paid within thirty days of receipt. The bill is sent monthly."
    ),
    "d-cafe.txt": "Le café de la gare ouvre à six heures. Un café crème coûte deux euros.",
    "e-tokyo.txt": "東京タワーに行きました。とても高かったです。東京の夜景はきれいでした。",
    "f-the.txt": "the the the and of to in a is that it for on with as was",
    "g-server.txt": "Server rooms need cooling; the server fans are loud. Database servers too.",
    "h-run.txt": "She runs, he ran, they are running: a run a day keeps the doctor away.",
}
QUERIES = [
    ("who owns the database server", None),
    ("backup backups database", None),
    ("the", "3"),
    ("thirty days", None),
    ("café", None),
    ("東京", None),
    ("running server", "100"),
    ("zzzz", None),
    ("database server backups storage thirty", "2"),
]


async def test_spec_keyword_answers_are_byte_for_byte_unchanged(harness: SearchHarness) -> None:
    harness.registry.add("notes")
    for name, text in FILES.items():
        harness.write(f"notes/{name}", text)
    await harness.start(EMBEDDING_PROVIDER="none")
    await harness.until_indexed("notes", len(FILES))
    assert harness.session is not None
    answers: dict[str, str] = {}
    for route in ("/api/search", "/api/keyword"):
        for q, limit in QUERIES:
            params = {"db": "notes", "q": q}
            if route == "/api/search":
                params["target"] = "keyword"
            if limit is not None:
                params["limit"] = limit
            async with harness.session.get(harness.base + route, params=params) as resp:
                assert resp.status == 200
                answers[f"{route} {q} {limit}"] = (await resp.read()).decode()
    if os.environ.get("CAIRN_WRITE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(answers, ensure_ascii=False, indent=1) + "\n")
    assert answers == json.loads(GOLDEN.read_text())
