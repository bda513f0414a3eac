"""The keyword index against a brute-force reference, across blocks, pieces and merges."""

import random
from pathlib import Path

import pytest

from actors.search.index import keyword
from actors.search.index.store import Database, DocumentState, Remove, Replace
from actors.search.index.tokenize import document_tokens, query_tokens

STATE = DocumentState(size=1, mtime_ns=1, sha256="x")
WORDS = [f"w{i}" for i in range(60)] + ["猫", "東京", "café"]


def reference(db: Database, query: str, limit: int) -> list[int]:
    with db.snapshot() as conn:
        rows = conn.execute("SELECT id, content FROM chunks WHERE active = 1").fetchall()
    tokens = query_tokens(query)
    scored = []
    for chunk_id, content in rows:
        have = set(document_tokens(content))
        hits = sum(t in have for t in tokens)
        if hits:
            scored.append((-hits, chunk_id))
    return [chunk_id for _, chunk_id in sorted(scored)[:limit]]


def random_queries(rng: random.Random) -> list[str]:
    return [" ".join(rng.sample(WORDS, rng.randint(1, 6))) for _ in range(30)]


def assert_ranked_as_reference(db: Database, queries: list[str], limit: int) -> None:
    for q in queries:
        assert [r.id for r in db.keyword_search(q, limit)] == reference(db, q, limit), q


def random_chunks(rng: random.Random) -> list[str]:
    """One to five chunks of one to twelve of `WORDS`."""
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 12))) for _ in range(rng.randint(1, 5))]


def randomized(tmp_path: Path, seed: int) -> tuple[random.Random, Database, list[str]]:
    """A random source from ``seed``, an empty database, and queries to rank in it."""
    rng = random.Random(seed)
    return rng, Database(tmp_path / "db.sqlite"), random_queries(rng)


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Small blocks make a few hundred chunks cross many block boundaries.
    monkeypatch.setattr(keyword, "BLOCK", 16)


def test_ranking_matches_brute_force_through_adds_replaces_and_removes(
    tmp_path: Path, small_blocks: None
) -> None:
    rng, db, queries = randomized(tmp_path, 5)
    for round_ in range(6):
        for doc in range(12):
            if rng.random() < 0.3 and round_:
                db.remove_document(f"d{doc}")
                continue
            db.replace_document(f"d{doc}", STATE, random_chunks(rng))
        assert_ranked_as_reference(db, queries, 7)
    # Reopened, the index answers the same (it is all in the file).
    db.close()
    db = Database(tmp_path / "db.sqlite")
    assert_ranked_as_reference(db, queries, 100)


def postings(db: Database) -> list[tuple[str, int]]:
    """Every (token, chunk id) the index holds, as many times as it holds it."""
    with db.snapshot() as conn:
        rows = conn.execute("SELECT start, token, ids FROM kw_piece").fetchall()
    return sorted(
        (token, start + int(offset))
        for start, token, blob in rows
        for offset in keyword._unpack(blob)
    )


def test_batches_that_change_and_remove_many_files_at_once_leave_the_exact_postings(
    tmp_path: Path, small_blocks: None
) -> None:
    rng, db, queries = randomized(tmp_path, 11)
    for _ in range(8):
        batch: list[Replace | Remove] = []
        for doc in rng.sample(range(40), 25):
            if rng.random() < 0.2:
                batch.append(Remove(f"d{doc}"))
                continue
            batch.append(Replace(f"d{doc}", STATE, random_chunks(rng)))
        db.write(batch)
        with db.snapshot() as conn:
            active = conn.execute("SELECT id, content FROM chunks WHERE active = 1").fetchall()
        # Exactly the postings of the active chunks: none of a retired one, none twice.
        assert postings(db) == sorted(
            (token, chunk_id) for chunk_id, text in active for token in document_tokens(text)
        )
        assert_ranked_as_reference(db, queries, 7)


def test_ranking_is_by_matched_tokens_then_row_id(tmp_path: Path) -> None:
    db = Database(tmp_path / "db.sqlite")
    db.replace_document("a.txt", STATE, ["alpha", "alpha beta", "beta gamma", "alpha beta gamma"])
    found = db.keyword_search("Gamma ALPHA beta beta", 10)
    assert [(r.source, r.chunk) for r in found] == [
        ("a.txt", 3),
        ("a.txt", 1),
        ("a.txt", 2),
        ("a.txt", 0),
    ]
    assert [r.chunk for r in db.keyword_search("alpha beta gamma", 2)] == [3, 1]
    assert db.keyword_search("nothing here", 10) == []
    assert db.keyword_search("   ", 10) == []


def test_removed_and_replaced_chunks_are_never_returned(tmp_path: Path) -> None:
    db = Database(tmp_path / "db.sqlite")
    db.replace_document("a.txt", STATE, ["old words"])
    db.replace_document("a.txt", STATE, ["new words"])
    assert [r.content for r in db.keyword_search("old new words", 10)] == ["new words"]
    db.remove_document("a.txt")
    assert db.keyword_search("old new words", 10) == []
    assert db.stats() == (0, 0)


def test_a_source_changed_twice_in_one_batch_keeps_only_its_last_change(tmp_path: Path) -> None:
    db = Database(tmp_path / "db.sqlite")
    db.write(
        [
            Replace("a.txt", STATE, ["first words"]),
            Replace("b.txt", STATE, ["other words"]),
            Replace("a.txt", STATE, ["second words"]),
            Replace("c.txt", STATE, ["gone words"]),
            Remove("c.txt"),
        ]
    )
    found = db.keyword_search("first second other gone words", 10)
    assert sorted((r.source, r.content) for r in found) == [
        ("a.txt", "second words"),
        ("b.txt", "other words"),
    ]
    assert db.stats() == (2, 2)
    assert db.progress().pending == 2


def test_an_index_of_an_older_layout_is_rebuilt_when_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Written as version 2 did: blocks of 4,096 ids, so pieces start at 4096.
    monkeypatch.setattr(keyword, "BLOCK", 4096)
    monkeypatch.setattr(keyword, "FORMAT_VERSION", 2)
    db = Database(tmp_path / "db.sqlite")
    rng = random.Random(9)
    db.write(
        [
            Replace(f"d{i}", STATE, [" ".join(rng.choices(WORDS, k=5)) for _ in range(50)])
            for i in range(100)
        ]
    )
    db.close()
    monkeypatch.undo()
    db = Database(tmp_path / "db.sqlite")
    assert db.get_meta("keyword_index") == f"1.{keyword.FORMAT_VERSION}"
    with db.snapshot() as conn:
        starts = {row[0] for row in conn.execute("SELECT DISTINCT start FROM kw_piece")}
    assert starts == {0}
    for q in ["w1 w2", "猫 w3 café", "w59"]:
        assert [r.id for r in db.keyword_search(q, 20)] == reference(db, q, 20)
    # Edits after the rebuild find the rebuilt pieces.
    db.remove_document("d3")
    assert [r.id for r in db.keyword_search("w1 w2", 5000)] == reference(db, "w1 w2", 5000)
