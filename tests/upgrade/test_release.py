"""The release's number is one and the same wherever it shows, and CHANGELOG.md has an entry
for it and for every release an upgrade fixture was made with."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from events.release import VERSION

ROOT = Path(__file__).parents[2]
SEMVER = re.compile(r"(\d+)\.(\d+)\.(\d+)(\.dev\d+)?")


def _released() -> list[str]:
    text = (ROOT / "CHANGELOG.md").read_text()
    return re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, re.MULTILINE)


def test_cairn_version_prints_the_one_version() -> None:
    assert SEMVER.fullmatch(VERSION), VERSION
    done = subprocess.run(
        [sys.executable, "-m", "gateway.main", "--version"], capture_output=True, text=True
    )
    assert (done.returncode, done.stdout) == (0, f"cairn {VERSION}\n")
    # The installed package's metadata is read from the same place (ops/setup reinstalls
    # when pyproject.toml changes).
    assert importlib.metadata.version("cairn") == VERSION


def test_the_changelog_has_an_entry_for_this_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    released = _released()
    assert released, "no release in CHANGELOG.md"
    if VERSION.endswith(".dev0"):
        assert "## [Unreleased]" in text
        assert VERSION.removesuffix(".dev0") not in released, "main must carry the next number"
    else:
        assert released[0] == VERSION
    parsed = [tuple(map(int, v.split("."))) for v in released]
    assert parsed == sorted(parsed, reverse=True), "newest first"


def test_every_upgrade_fixture_is_of_a_release() -> None:
    released = set(_released())
    for fixture in (ROOT / "tests" / "upgrade").glob("fixture-*"):
        written_by = (fixture / "VERSION").read_text().strip()
        assert fixture.name == f"fixture-{written_by}"
        assert written_by in released, f"{fixture.name}: no release {written_by} in CHANGELOG.md"
