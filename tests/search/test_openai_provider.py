"""The OpenAI-compatible embedding provider against a small server that speaks that protocol.

The server embeds by hashing words into 512 buckets, so shared words mean cosine similarity and
semantic search works end to end; each test scripts the failures it needs.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from actors.search.embed.embedding import (
    DIMENSIONS,
    EmbeddingError,
    OpenAIProvider,
    make_provider,
)
from events.nats_server import EmbeddedNats
from tests.search.conftest import SearchHarness
from tests.search.fake_openai import FakeOpenAI, word_vector

KEY = "sk-test-Zq81VbC0secret"
MODEL = "text-embedding-3-small"


def provider_for(fake: FakeOpenAI, key: str | None = KEY) -> OpenAIProvider:
    return OpenAIProvider(fake.url, MODEL, key, attempts=4, base_delay=0.01)


async def embedding_error(
    provider: OpenAIProvider, texts: tuple[str, ...] = ("x",)
) -> EmbeddingError:
    """The error embedding `texts` ends in; the provider is closed either way."""
    try:
        with pytest.raises(EmbeddingError) as caught:
            await provider.embed_documents(list(texts))
    finally:
        await provider.close()
    return caught.value


async def test_request_shape_and_vectors(fake: FakeOpenAI) -> None:
    fake.shuffle = True  # the answer's `index`, not its order, places each vector
    provider = provider_for(fake)
    try:
        vectors = await provider.embed_documents(["the cat sat", "invoices are due"])
    finally:
        await provider.close()
    assert vectors.shape == (2, DIMENSIONS) and vectors.dtype == np.float32
    np.testing.assert_allclose(vectors[0], word_vector("the cat sat"), rtol=1e-6)
    np.testing.assert_allclose(vectors[1], word_vector("invoices are due"), rtol=1e-6)
    [request] = fake.requests
    assert request["body"] == {
        "model": MODEL,
        "input": ["the cat sat", "invoices are due"],
        "dimensions": 512,
        "encoding_format": "float",
    }
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    assert request["headers"]["Content-Type"] == "application/json"


async def test_no_key_sends_no_authorization(fake: FakeOpenAI) -> None:
    provider = provider_for(fake, key=None)
    try:
        query = await provider.embed_query("hello")
    finally:
        await provider.close()
    assert query.shape == (DIMENSIONS,)
    assert "Authorization" not in fake.requests[0]["headers"]


@pytest.mark.parametrize(
    ("url", "posted_to"),
    [
        ("{base}/v1", "/v1/embeddings"),
        ("{base}/v1/", "/v1/embeddings"),
        ("{base}/v1/embeddings", "/v1/embeddings"),
    ],
)
async def test_base_url_or_full_endpoint(fake: FakeOpenAI, url: str, posted_to: str) -> None:
    base = str(fake.server.make_url(""))
    env = {
        "EMBEDDING_PROVIDER": "openai",
        "EMBEDDING_URL": url.format(base=base.rstrip("/")),
        "EMBEDDING_MODEL": "my-model",
        "EMBEDDING_API_KEY": KEY,
    }
    provider = make_provider(env)
    assert isinstance(provider, OpenAIProvider)
    try:
        await provider.embed_documents(["x"])
    finally:
        await provider.close()
    assert provider.url.endswith(posted_to)
    assert fake.requests[0]["body"]["model"] == "my-model"
    assert provider.fingerprint.endswith(":my-model:512")


async def test_wrong_vector_length_is_a_clear_error_and_not_retried(fake: FakeOpenAI) -> None:
    fake.dims = 1536
    error = await embedding_error(provider_for(fake), ("a", "b"))
    assert str(error) == "provider returned a vector of 1536 dimensions, expected 512"
    assert not error.transient
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"data": []}, "provider returned 0 embeddings for 1 inputs"),
        ({"nothing": 1}, "provider answer has no data[].embedding"),
        (
            {"data": [{"index": 0, "embedding": "abc"}]},
            "provider returned a vector of no dimensions, expected 512",
        ),
    ],
)
async def test_malformed_answers(answer: dict[str, Any], message: str) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post("/embeddings", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    provider = OpenAIProvider(str(server.make_url("/embeddings")), MODEL, KEY, base_delay=0.01)
    try:
        with pytest.raises(EmbeddingError, match=re.escape(message)):
            await provider.embed_documents(["x"])
    finally:
        await provider.close()
        await server.close()


def retry_delays(caplog: pytest.LogCaptureFixture) -> list[float]:
    """The delays `with_retries` announced, in order (its log line carries them as arguments)."""
    delays = []
    for record in caplog.records:
        if record.getMessage().startswith("embedding failed"):
            assert isinstance(record.args, tuple)
            delay = record.args[2]
            assert isinstance(delay, float)
            delays.append(delay)
    return delays


async def test_retries_with_backoff_on_5xx_429_and_dropped_connections(
    fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.script = [503, "drop", 429]
    provider = provider_for(fake)
    try:
        vectors = await provider.embed_documents(["penguins"])
    finally:
        await provider.close()
    np.testing.assert_allclose(vectors[0], word_vector("penguins"), rtol=1e-6)
    assert len(fake.requests) == 4
    assert retry_delays(caplog) == [0.01, 0.02, 0.04]


async def test_gives_up_after_the_last_attempt(
    fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake.script = [500] * 10
    error = await embedding_error(provider_for(fake))
    assert str(error).startswith("provider answered 500")
    assert error.transient
    assert len(fake.requests) == 4


async def test_unreachable_provider_is_transient(caplog: pytest.LogCaptureFixture) -> None:
    from tests.ports import free_port

    provider = OpenAIProvider(
        f"http://127.0.0.1:{free_port()}/v1", MODEL, KEY, attempts=2, base_delay=0.01
    )
    error = await embedding_error(provider)
    assert str(error).startswith("provider unreachable")
    assert error.transient
    assert retry_delays(caplog) == [0.01]


async def test_client_errors_are_not_retried_and_never_show_the_key(
    fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # Some providers echo the key they refused; it must not reach our errors or logs.
    fake.error_body = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}."}})
    fake.script = [401]
    error = await embedding_error(provider_for(fake))
    assert len(fake.requests) == 1
    assert str(error).startswith("provider answered 401: ")
    assert "Incorrect API key provided" in str(error)
    assert KEY not in str(error)
    assert KEY not in caplog.text


# -- through the service --------------------------------------------------------------------------


async def test_one_bad_chunk_never_blocks_the_queue(
    tmp_path: Path, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """A chunk the provider refuses (400) or answers with a wrong length costs only itself:
    the rest of its file and the files after it are embedded and found by meaning."""
    caplog.set_level(logging.DEBUG)

    def poison(text: str) -> int | None:
        if "poison" in text:
            return 400
        if "venom" in text:
            return 3
        return None

    fake.poison = poison
    nats = EmbeddedNats(tmp_path / "nats")
    await nats.start()
    h = SearchHarness(tmp_path, nats)
    try:
        h.registry.add("notes")
        # Each paragraph fits one chunk (chunker.BUDGET) and no two fit together.
        paragraphs = [
            "alpaca " * 90,
            "poison apple " * 45,
            "gamma rays " * 55,
            "venom snake " * 50,
        ]
        h.write("notes/mixed.md", "\n\n".join(p.strip() for p in paragraphs))
        h.write("notes/penguins.txt", "Penguins live in Antarctica.")
        await h.start(
            EMBEDDING_PROVIDER="openai",
            EMBEDDING_URL=fake.url,
            EMBEDDING_MODEL=MODEL,
            EMBEDDING_API_KEY=KEY,
        )
        mixed = await h.event("search.document_indexed", "mixed.md")
        assert mixed["chunks"] == 4
        penguins = await h.event("search.document_indexed", "penguins.txt")
        assert penguins["chunks"] == 1
        done = await h.settled()
        assert (done["chunks"], done["embedded"], done["pending"], done["failed"]) == (5, 3, 0, 2)
        # Chunks are embedded newest first, so the oldest failure (the 400) is the last error.
        assert done["embedding_error"].startswith("provider answered 400")

        _, body = await h.get(
            "/api/search", db="notes", q="where do penguins live", target="semantic"
        )
        assert [g["source"] for g in body["semantic"]] == ["penguins.txt"]
        _, body = await h.get("/api/search", db="notes", q="gamma rays", target="semantic")
        assert body["semantic"][0]["matches"][0]["content"].startswith("gamma rays")
        # The refused chunks are still found by their words.
        _, body = await h.get("/api/search", db="notes", q="poison venom", target="keyword")
        assert len(body["keyword"][0]["matches"]) == 2

        # A repeated query is answered from the query cache, not the provider.
        before = len(fake.requests)
        _, again = await h.get(
            "/api/search", db="notes", q="where do penguins live", target="semantic"
        )
        assert again["semantic"][0]["source"] == "penguins.txt"
        assert len(fake.requests) == before
    finally:
        await h.stop()
        await nats.stop()
    assert KEY not in caplog.text
