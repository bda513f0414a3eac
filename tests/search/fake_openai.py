"""A small server that speaks the OpenAI embeddings protocol, for the provider and service tests.

It embeds by hashing words into 512 buckets, so shared words mean cosine similarity and semantic
search works end to end; each test scripts the failures it needs, or holds requests back.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable
from typing import Any

import numpy as np
from aiohttp import web
from aiohttp.test_utils import TestServer

from actors.search.embed.embedding import DIMENSIONS


def word_vector(text: str, dims: int = DIMENSIONS) -> list[float]:
    vector = np.zeros(dims, dtype=np.float32)
    for word in set(re.findall(r"\w+", text.lower())):
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % dims] += 1.0
    norm = float(np.linalg.norm(vector)) or 1.0
    return [float(x) for x in vector / norm]


# A script entry answers one request: an HTTP status, "drop" (close the connection), or
# "ok"; once the script is used up every request is answered "ok".
Script = list[int | str]


class FakeOpenAI:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: Script = []
        self.error_body = "{}"
        # Input text -> what to answer instead of a correct vector: an HTTP status or a length.
        self.poison: Callable[[str], int | None] = lambda text: None
        self.dims = DIMENSIONS
        self.shuffle = False
        # When set, requests wait for `gate` (cleared: held) and `arrived` is set meanwhile.
        self.gate: asyncio.Event | None = None
        self.arrived = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/embeddings", self.embeddings)
        self.server = TestServer(app, host="127.0.0.1")

    @property
    def url(self) -> str:
        return str(self.server.make_url("/v1"))

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({"headers": dict(request.headers), "body": body})
        if self.gate is not None:
            self.arrived.set()
            await self.gate.wait()
        step = self.script.pop(0) if self.script else "ok"
        if step == "drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if isinstance(step, int):
            return web.Response(status=step, text=self.error_body, content_type="application/json")
        inputs = body["input"]
        data = []
        for index, text in enumerate(inputs):
            poisoned = self.poison(text)
            if poisoned is not None and poisoned >= 400:
                return web.json_response({"error": {"message": "bad input"}}, status=poisoned)
            length = poisoned if poisoned is not None else self.dims
            data.append(
                {"object": "embedding", "index": index, "embedding": word_vector(text, length)}
            )
        if self.shuffle:
            data.reverse()
        return web.json_response({"object": "list", "data": data, "model": body["model"]})
