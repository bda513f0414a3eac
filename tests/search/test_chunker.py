import random

from actors.search.ingest.chunker import BUDGET, chunk_text, cost


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


def test_a_long_paragraph_without_sentence_ends_is_cut_at_the_last_space_that_fits() -> None:
    # The fast path for such text (rfind) against the definition: greedy, word by word.
    rng = random.Random(4)
    for _ in range(300):
        words = ["".join(rng.choices("abcde", k=rng.randint(1, 30))) for _ in range(200)]
        budget = rng.randint(30, 200)
        text = "".join(word + rng.choice([" ", "  ", "\t", "\n", " \x0b "]) for word in words)
        expected: list[str] = []
        for word in words:
            if expected and len(expected[-1]) + 1 + len(word) <= budget:
                expected[-1] += " " + word
            else:
                expected.append(word)
        assert chunk_text(text, budget) == expected
