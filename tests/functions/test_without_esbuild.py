"""A host without esbuild (an install from a wheel carries none, docs/deploy.md): TypeScript
runs fail with words that say where to get it; the other languages run as ever."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.platform import Runtime
from events import resources
from tests.functions.conftest import start_service


async def test_typescript_without_esbuild_says_where_to_get_it(
    runtime: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No npm tree and nothing named esbuild on PATH: what a wheel's install has by default.
    monkeypatch.setattr(resources, "node_modules", lambda: tmp_path / "node_modules")
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    runtime.env = {k: v for k, v in runtime.env.items() if k != "ESBUILD"}
    async with start_service(runtime) as service:
        reply = await service.run_now("typescript", "const n: number = 1; return n")
        assert (reply.status, reply.text) == (
            500,
            "failed to run: TypeScript needs esbuild: set ESBUILD to its path or put it on PATH "
            "(in a checkout, ops/setup installs it)",
        )
        assert (await service.run_now("python", "return 1")).json() == {
            "data": 1,
            "type": "number",
        }
