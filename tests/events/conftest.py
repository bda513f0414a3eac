"""The event store's own tests run against each backend cairn offers: SQLite (the default)
and PostgreSQL (a real server, see tests/postgres.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from events.store import EventStore, default_store_url
from tests.conftest import opened_store


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return default_store_url(tmp_path)
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[EventStore]:
    async with opened_store(store_url) as s:
        yield s
