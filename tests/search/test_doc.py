"""docs/search.md stands alone: it points at nothing outside the repository (a spec, a contract,
an issue), outside quoted API values and messages (the MCP tool's `rank` value `spec` is one),
and every setting the search service reads from the environment is explained in it."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.test_standalone import OUTSIDE

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "search.md"
SOURCES = ["actors/search/**/*.py", "gateway/apps/search*.py", "gateway/cli/search*.py"]
CODE_SPAN = re.compile(r"`[^`]*`")


def test_the_doc_refers_to_nothing_outside_the_repository() -> None:
    prose = CODE_SPAN.sub("", DOC.read_text())  # spans may cross lines
    assert [line for line in prose.splitlines() if OUTSIDE.search(line)] == []


def test_every_setting_search_reads_is_explained_in_the_doc() -> None:
    pattern = re.compile(r'"((?:SEARCH_|EMBEDDING_|XDG_|CAIRN_DATA)[A-Z0-9_]*)"')
    settings = {
        name
        for source in SOURCES
        for path in sorted(ROOT.glob(source))
        for name in pattern.findall(path.read_text())
    } | {"CAIRN_DATA", "SEARCH_PORT", "PORT"}  # read through actors.config / gateway/main.py
    assert len(settings) > 10, "the pattern went stale"
    text = DOC.read_text()
    assert sorted(name for name in settings if f"`{name}`" not in text) == []


def test_benchmark_history_lives_beside_the_benchmarks() -> None:
    notes = ROOT / "ops" / "bench" / "search_notes.md"
    assert "search_embed_load" in notes.read_text()
    assert "ops/bench/search_notes.md" in DOC.read_text()
    assert len(DOC.read_text().splitlines()) < 350
