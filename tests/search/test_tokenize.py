"""Golden tests of the keyword tokeniser (words, lowercased, deduplicated)."""

import pytest

from actors.search.index._marks import MARK_RANGES, compute_mark_ranges
from actors.search.index.tokenize import document_postings, document_tokens, query_tokens


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("Hello, World! hello", ["hello", "world"]),
        ("full_width e-mail x.y", ["full", "width", "e", "mail", "x", "y"]),
        ("\uff21\uff22\uff23 \uff44\uff45\uff46", ["abc", "def"]),  # full-width Latin
        ("हिन्दी café naïve", ["हिन्दी", "café", "naïve"]),
        ("東京タワー", ["東京", "京タ", "タワ", "ワー"]),
        ("猫", ["猫"]),
        ("iPhone手机", ["iphone", "手机"]),
        ("회의는 오후", ["회의", "의는", "오후"]),
        ("ﾃｽﾄ", ["テス", "スト"]),
        ("  ...!!  ", []),
    ],
)
def test_query_tokens(text: str, tokens: list[str]) -> None:
    assert query_tokens(text) == tokens


def test_documents_also_index_single_cjk_characters() -> None:
    assert document_tokens("猫が好き") == ["猫が", "が好", "好き", "猫", "が", "好", "き"]
    assert set(query_tokens("猫")) <= set(document_tokens("猫が好き"))


def test_ascii_fast_path_agrees_with_the_regex_path() -> None:
    text = "Don't stop: 3.14 is pi_value (approx) — ok"
    # The em dash makes the text non-ASCII and takes the regex path.
    assert (
        query_tokens(text)
        == query_tokens(text.replace("—", "-"))
        == [
            "don",
            "t",
            "stop",
            "3",
            "14",
            "is",
            "pi",
            "value",
            "approx",
            "ok",
        ]
    )


def test_stored_mark_ranges_match_this_python() -> None:
    assert compute_mark_ranges() == MARK_RANGES


def test_many_texts_at_once_give_each_text_its_own_tokens() -> None:
    texts = [
        "Hello, World! hello again_and AGAIN",
        "",
        "Straße café 東京タワー",
        "nul\x00inside text",
        "   ",
        "x_y 42 ü",
        "plain ASCII, the common case",
    ]
    owners, tokens, vocabulary = document_postings(texts)
    assert vocabulary == sorted(set(vocabulary))
    for i, text in enumerate(texts):
        mine = {
            vocabulary[t] for owner, t in zip(owners.tolist(), tokens, strict=True) if owner == i
        }
        assert mine == set(document_tokens(text)), text
    assert document_postings([]).vocabulary == document_postings(["", " ,"]).vocabulary == []
