"""The local embedding provider: all-MiniLM-L6-v2 in numpy against sentence-transformers' output.

`minilm_golden.json` holds the reference implementation's embeddings (sentence-transformers on
torch, run once outside the repo); the numpy forward pass must reproduce them. The model loads
once per process (`_shared_minilm`), so these tests and the HTTP ones share it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from actors.config import ConfigError
from actors.search.embed import minilm, minilm_openvino, minilm_weights
from actors.search.embed.embedding import (
    DIMENSIONS,
    E5Provider,
    LocalProvider,
    OpenAIProvider,
    make_provider,
)
from tests.search.references import GOLDEN

CUT_OFF = 0.3  # the semantic branch's cut-off


@pytest.fixture(scope="module")
def provider() -> LocalProvider:
    return LocalProvider(runtime="numpy")


@pytest.fixture(scope="module")
def model() -> minilm.MiniLM:
    return LocalProvider(runtime="numpy").model


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


async def test_documents_match_the_reference_implementation(provider: LocalProvider) -> None:
    texts = [item["text"] for item in GOLDEN["items"]]
    vectors = await provider.embed_documents(texts)
    assert vectors.shape == (len(texts), DIMENSIONS) and vectors.dtype == np.float32
    for item, vector in zip(GOLDEN["items"], vectors, strict=True):
        reference = np.asarray(item["embedding"], dtype=np.float32)
        assert cosine(vector[: minilm.DIMENSION], reference) >= 0.999, item["text"][:40]
        assert abs(np.linalg.norm(vector) - 1) < 1e-5
    # Padding to 512 adds only zeros, so every cosine is unchanged.
    assert not vectors[:, minilm.DIMENSION :].any()


async def test_a_query_embeds_like_the_same_document(provider: LocalProvider) -> None:
    item = GOLDEN["items"][1]
    query = await provider.embed_query(item["text"])
    assert query.shape == (DIMENSIONS,)
    assert cosine(query[: minilm.DIMENSION], np.asarray(item["embedding"])) >= 0.999


def test_long_text_is_truncated_to_256_tokens(model: minilm.MiniLM) -> None:
    long_text = GOLDEN["items"][-1]["text"]
    assert model.token_counts([long_text, "a cat"]) == [minilm.MAX_TOKENS, 4]
    # The reference truncates too: anything past token 256 must not change the vector.
    longer = model.encode([long_text + " Totally different words about volcanoes." * 20])
    assert cosine(longer[0], model.encode([long_text])[0]) > 0.99999


def test_padding_in_a_batch_does_not_change_a_vector(model: minilm.MiniLM) -> None:
    short = "A kitten resting on a rug"
    texts = [GOLDEN["items"][-1]["text"], short, "Invoices must be paid.", "x"]
    alone = model.encode([short])[0]
    for workers in (1, 2):
        together = model.encode(texts, workers=workers)
        assert np.allclose(together[1], alone, atol=1e-5), workers
        assert np.allclose(together[2], model.encode([texts[2]])[0], atol=1e-5)


def test_empty_input(model: minilm.MiniLM) -> None:
    assert model.encode([]).shape == (0, minilm.DIMENSION)
    # An empty string is still [CLS] [SEP] and gets a unit vector.
    assert abs(np.linalg.norm(model.encode([""])[0]) - 1) < 1e-5


@pytest.mark.parametrize(
    ("query", "paraphrase", "unrelated"),
    [
        (
            "a kitten resting on a rug",
            "The cat sat on the mat and purred.",
            "Invoices must be paid within thirty days of receipt.",
        ),
        (
            "when do I have to pay a bill",
            "Invoices must be paid within thirty days of receipt.",
            "The cat sat on the mat and purred.",
        ),
        (
            "the server went down because storage ran out",
            "Our server crashed because the disk was full.",
            "Coffee prices have increased this year.",
        ),
        (
            "how do plants turn sunlight into energy",
            "Photosynthesis converts light into chemical energy in leaves.",
            "The train to Berlin was delayed by an hour.",
        ),
    ],
)
async def test_paraphrases_pass_the_cut_off_and_unrelated_text_does_not(
    provider: LocalProvider, query: str, paraphrase: str, unrelated: str
) -> None:
    q = await provider.embed_query(query)
    docs = await provider.embed_documents([paraphrase, unrelated])
    assert cosine(q, docs[0]) >= CUT_OFF + 0.1
    assert cosine(q, docs[1]) < CUT_OFF - 0.1


def test_batches_group_similar_lengths_within_the_limits() -> None:
    lengths = [10, 256, 12, 11, 200, 9]
    batches = minilm.plan_batches(lengths)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    # Similar lengths together, and no pass past the padded-token budget (1,024: 6 x 256 is
    # over it, 5 x 200 is not).
    assert [[lengths[i] for i in b] for b in batches] == [[9, 10, 11, 12, 200], [256]]
    assert len(minilm.plan_batches([10, 12, 11, 9], workers=2)) == 2  # a batch per worker
    many = minilm.plan_batches([256] * 40)
    budget = minilm._TOKEN_BUDGET
    assert all(len(b) * 256 <= budget for b in many) and sum(map(len, many)) == 40
    assert minilm.plan_batches([]) == []


def test_make_provider_choices() -> None:
    default = make_provider({})
    expected = "openvino" if minilm_openvino.bf16_capable() else "onnx-int8"
    assert isinstance(default, LocalProvider) and default.model.runtime == expected
    assert isinstance(make_provider({"EMBEDDING_PROVIDER": " Local "}), LocalProvider)
    numpy_path = make_provider({"EMBEDDING_RUNTIME": "numpy"})
    assert isinstance(numpy_path, LocalProvider) and numpy_path.model.runtime == "numpy"
    with pytest.raises(
        ConfigError,
        match=r"EMBEDDING_RUNTIME: must be onnx, onnx-int8, openvino or numpy \(got 'cuda'\)",
    ):
        make_provider({"EMBEDDING_RUNTIME": "cuda"})
    assert isinstance(make_provider({"EMBEDDING_PROVIDER": "e5"}), E5Provider)
    assert isinstance(make_provider({"EMBEDDING_PROVIDER": "openai"}), OpenAIProvider)
    assert make_provider({"EMBEDDING_PROVIDER": "none"}) is None
    with pytest.raises(
        ConfigError, match=r"EMBEDDING_PROVIDER: must be local, e5, openai or none \(got 'torch'\)"
    ):
        make_provider({"EMBEDDING_PROVIDER": "torch"})
    # Vectors of different models never share an index.
    assert len({default.fingerprint, E5Provider.fingerprint}) == 2


def test_a_missing_model_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match=r"config\.json is missing"):
        minilm.MiniLM.load(tmp_path)
    monkeypatch.setattr(minilm_weights, "PACKAGE", "no_such_model_package")
    with pytest.raises(FileNotFoundError, match="ops/setup installs it"):
        minilm.model_dir()
