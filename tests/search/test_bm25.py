"""BM25 over the keyword index (statistics kept by the writes), stemming and stop words, the
fusion of `target=hybrid`, and the snippets of `highlight=1`."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from actors.search.index import fusion, stemming
from actors.search.index.snippets import Terms, snippet
from actors.search.index.store import Database, DocumentState, Remove, Replace

STATE = DocumentState(1, 1, "x")


def db_with(tmp_path: Path, files: dict[str, list[str]]) -> Database:
    db = Database(tmp_path / "db.sqlite")
    db.write([Replace(source, STATE, chunks) for source, chunks in files.items()])
    return db


def found(db: Database, query: str, limit: int = 10) -> list[tuple[str, int]]:
    return [(row.source, row.chunk) for row, _ in db.bm25_search(query, limit)]


def totals(db: Database) -> tuple[int, int]:
    with db.snapshot() as conn:
        chunks, length = conn.execute("SELECT chunks, length FROM kw_stats").fetchone()
    return int(chunks), int(length)


def test_query_stems_drop_stop_words_unless_nothing_else_is_left() -> None:
    assert stemming.query_stems(["who", "owns", "the", "servers"], "english") == ["own", "server"]
    assert stemming.query_stems(["to", "be", "or", "not", "to"], "english") == [
        "to",
        "be",
        "or",
        "not",
    ]
    # Another language: stemmed in it, no stop words; an unknown one: words as they are.
    assert stemming.query_stems(["le", "chevaux"], "french") == ["le", "cheval"]
    assert stemming.query_stems(["backups"], "klingon") == ["backups"]
    assert stemming.query_stems([], "english") == []


def test_scores_are_bm25_over_stems(tmp_path: Path) -> None:
    db = db_with(
        tmp_path,
        {
            "a.txt": ["backup backups disk"],  # two words of one stem: tf 2
            "b.txt": ["backup tape disk"],
            "c.txt": ["nothing to see"],
        },
    )
    scored = {row.source: score for row, score in db.bm25_search("backups", 10)}
    # N = 3, df = 2, every chunk 3 words long (the average): idf x tf (k1 + 1) / (tf + k1).
    idf = math.log1p((3 - 2 + 0.5) / (2 + 0.5))
    assert scored == pytest.approx({"a.txt": idf * 2 * 2.2 / 3.2, "b.txt": idf})
    # A rarer word weighs more; the shorter chunk wins among equal matches.
    db.write([Replace("d.txt", STATE, ["tape " + "filler " * 30])])
    assert found(db, "tape disk")[0] == ("b.txt", 0)
    assert found(db, "tape")[:2] == [("b.txt", 0), ("d.txt", 0)]


def test_ties_follow_the_place_in_the_file_then_the_row(tmp_path: Path) -> None:
    same = "the quarterly firewall review"
    # z.txt is written first (lower rows) but its matches come later in its file.
    db = db_with(tmp_path, {"z.txt": ["intro words here", same, same], "a.txt": [same, same]})
    assert found(db, "firewall review") == [
        ("a.txt", 0),
        ("z.txt", 1),
        ("a.txt", 1),
        ("z.txt", 2),
    ]
    assert found(db, "firewall review", limit=2) == [("a.txt", 0), ("z.txt", 1)]


def test_statistics_follow_replaced_and_removed_files(tmp_path: Path) -> None:
    db = db_with(tmp_path, {"a.txt": ["one two three", "four five"], "b.txt": ["six"]})
    assert totals(db) == (3, 6)
    db.write([Replace("a.txt", STATE, ["seven eight"])])
    assert totals(db) == (2, 3)
    db.write([Remove("b.txt")])
    assert totals(db) == (1, 2)
    assert found(db, "three") == [] and found(db, "eight") == [("a.txt", 0)]


def test_an_old_index_is_rebuilt_with_its_statistics(tmp_path: Path) -> None:
    db = db_with(tmp_path, {"a.txt": ["backups of the disks"], "b.txt": ["disk"]})
    before = db.bm25_search("backup disk", 10)
    with db.transaction() as conn:  # as a version-3 database left them
        conn.execute("DELETE FROM kw_vocab")
        conn.execute("DELETE FROM kw_length")
        conn.execute("UPDATE meta SET value = '1.3' WHERE key = 'keyword_index'")
    db.close()
    db = Database(tmp_path / "db.sqlite")
    assert db.bm25_search("backup disk", 10) == before
    assert totals(db) == (2, 5)


def test_a_rolled_back_write_leaves_no_word_unstemmed(tmp_path: Path) -> None:
    db = db_with(tmp_path, {"a.txt": ["alpha"]})
    with pytest.raises(sqlite3.IntegrityError), db.transaction() as conn:
        db.keywords.add(conn, [(100, "zebras")])
        conn.execute("INSERT INTO meta (key, value) VALUES (NULL, NULL)")
    db.write([Replace("b.txt", STATE, ["zebras graze"])])
    assert found(db, "zebra") == [("b.txt", 0)]


def test_the_language_can_change(tmp_path: Path) -> None:
    db = db_with(tmp_path, {"a.txt": ["un cheval blanc"]})
    assert found(db, "chevaux") == []  # English stems leave "chevaux" alone
    db.set_language("french")
    assert found(db, "chevaux") == [("a.txt", 0)]
    db.write([Replace("b.txt", STATE, ["des chevaux noirs"])])
    assert {s for s, _ in found(db, "cheval")} == {"a.txt", "b.txt"}
    db.close()
    assert Database(tmp_path / "db.sqlite").language == "french"


def test_fusion() -> None:
    assert fusion.rrf([["a", "b", "c"], ["b", "c"]]) == ["b", "c", "a"]
    # Scores scaled within each list: a clear keyword winner beats a narrow semantic one.
    keyword = [("k", 12.0), ("both", 6.0), ("low", 1.0)]
    semantic = [("both", 0.60), ("s", 0.59), ("low", 0.40)]
    assert fusion.convex(keyword, semantic, alpha=0.5)[:2] == ["both", "k"]
    assert fusion.convex(keyword, semantic, alpha=1.0)[:2] == ["both", "s"]
    assert fusion.convex([], [("only", 0.5)]) == ["only"]


@pytest.mark.parametrize(
    ("text", "query", "expected"),
    [
        ("The backup ran; backups are kept.", "backup", ["backup", "backups"]),
        ("Who owns the server?", "who owns the server", ["owns", "server"]),
        ("Le café, un CAFÉ, un cafe\u0301.", "café", ["café", "CAFÉ", "cafe\u0301"]),
        ("東京タワーに行きました。東京の夜景", "東京", ["東京", "東京"]),
        ("東京タワーに行きました", "東京タワー", ["東京タワー"]),  # overlapping bigrams merged
        ("猫が好き", "猫", ["猫"]),
        ("snake_case_backup and \U0001d518nicode backup", "backup", ["backup", "backup"]),
        ("nothing matches here", "zebra", []),
    ],
)
def test_highlights_are_character_offsets(text: str, query: str, expected: list[str]) -> None:
    found = snippet(text, Terms.of(query, "english"))
    assert found.text == text
    assert [found.text[a:b] for a, b in found.highlights] == expected


def test_a_long_chunk_gives_a_window_around_the_most_terms() -> None:
    filler = "lorem ipsum dolor sit amet " * 12
    text = filler + "the firewall rules and the router configs " + filler + "router"
    found = snippet(text, Terms.of("firewall router", "english"))
    assert len(found.text) <= 240 and found.text in text
    assert not found.text.startswith(" ") and text[text.index(found.text) - 1] == " "
    assert [found.text[a:b] for a, b in found.highlights] == ["firewall", "router"]


def test_scores_survive_merges_and_retired_chunks(tmp_path: Path) -> None:
    """Written in many small transactions (pieces merged), files replaced and removed: the
    same scores as the final files written at once."""
    words = ["backup", "disk", "tape", "server", "rack", "the", "node", "cooling"]

    def text(n: int) -> str:
        return " ".join(words[(n * k) % len(words)] for k in range(1, 4 + n % 7))

    final: dict[str, list[str]] = {}
    many = Database(tmp_path / "many.sqlite")
    for n in range(40):
        source = f"f{n % 13}.txt"
        if n % 9 == 8:
            many.write([Remove(source)])
            final.pop(source, None)
        else:
            chunks = [text(n), text(n + 1) + " backup backup"]
            many.write([Replace(source, STATE, chunks)])
            final[source] = chunks
    once = db_with(tmp_path, final)
    for query in ("backup", "disk tape", "the cooling node", "backups servers"):
        expected = {(r.source, r.chunk): s for r, s in once.bm25_search(query, 100)}
        got = {(r.source, r.chunk): s for r, s in many.bm25_search(query, 100)}
        assert got == pytest.approx(expected), query


def test_query_words_said_twice_weigh_twice_and_accents_keep_their_counts(
    tmp_path: Path,
) -> None:
    db = db_with(
        tmp_path,
        {"a.txt": ["café crème café"], "b.txt": ["café noir thé"], "c.txt": ["eau plate"]},
    )
    once = {row.source: s for row, s in db.bm25_search("café", 10)}
    twice = {row.source: s for row, s in db.bm25_search("café CAFÉ", 10)}
    assert twice == pytest.approx({source: 2 * s for source, s in once.items()})
    assert once["a.txt"] > once["b.txt"]  # the same length, café twice


@pytest.mark.parametrize(
    ("env", "db", "expected"),
    [
        ({}, "notes", "english"),
        ({"SEARCH_LANGUAGE": "French"}, "notes", "french"),
        ({"SEARCH_LANGUAGES": "docs=german, notes = dutch"}, "notes", "dutch"),
        ({"SEARCH_LANGUAGES": "docs=german", "SEARCH_LANGUAGE": "italian"}, "notes", "italian"),
        ({"SEARCH_LANGUAGES": "notes=, =x,,garbage"}, "notes", "english"),
        ({"SEARCH_LANGUAGE": "klingon"}, "notes", "klingon"),  # kept: it stems nothing
    ],
)
def test_a_database_language_comes_from_the_environment(
    env: dict[str, str], db: str, expected: str
) -> None:
    assert stemming.language_for(env, db) == expected


def test_one_edit_reaches_every_kind_of_single_typo() -> None:
    near = stemming.one_edit("backups")
    assert {"backpus", "bakups", "backupss", "backuqs", "xbackups"} <= near  # swap, -, +, ~
    assert "backups" not in near and "bakcpus" not in near  # itself; two edits
    # Accented letters are reachable from an accented word.
    assert "cafe" in stemming.one_edit("café") and "cafés" in stemming.one_edit("café")
    # At most: deletions, swaps, replacements and insertions (a-z) of a 5-letter word.
    assert len(stemming.one_edit("abcde")) <= 5 + 4 + 5 * 26 + 6 * 26
