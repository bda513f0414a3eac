from actors.search.chunker import BUDGET, chunk_text, cost


def test_paragraphs_are_packed_and_split_at_blank_lines() -> None:
    assert chunk_text("a b c\n\n\nd e f\n  \n g", budget=7) == ["a b c", "d e f", "g"]
    assert chunk_text("a b\n\nc d", budget=100) == ["a b\n\nc d"]


def test_long_paragraphs_split_at_sentences_then_spaces_then_characters() -> None:
    assert chunk_text("Short one. Another sentence here! And a third?", budget=20) == [
        "Short one.",
        "Another sentence",
        "here! And a third?",
    ]
    assert chunk_text("x" * 25, budget=10) == ["x" * 10, "x" * 10, "x" * 5]


def test_cjk_counts_more_per_character() -> None:
    assert cost("東京") == 6
    chunks = chunk_text("東京タワーに行きました。とても高かったです。", budget=30)
    assert all(cost(c) <= 30 for c in chunks)
    assert "".join(chunks) == "東京タワーに行きました。とても高かったです。"


def test_every_chunk_fits_the_budget_and_nothing_is_lost() -> None:
    text = "\n\n".join(f"Paragraph {i}. " + "word " * (i * 37 % 400) for i in range(50))
    chunks = chunk_text(text)
    assert all(cost(c) <= BUDGET for c in chunks)
    assert " ".join(chunks).split() == text.split()


def test_blank_text_has_no_chunks() -> None:
    assert chunk_text("  \n\n \t ") == []
