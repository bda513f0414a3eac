"""The design card's top-level `inbox/`: committed with its README, its contents never tracked,
and the default inbox root when cairn runs from the repository."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from actors.search.registry import inbox_root

ROOT = Path(__file__).resolve().parents[2]


def test_inbox_is_the_default_root_when_cairn_runs_from_the_repository(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    assert inbox_root({}) == ROOT / "inbox"
    assert (ROOT / "inbox" / "README.md").is_file()
    assert inbox_root({"SEARCH_INBOX": "/srv/docs"}) == Path("/srv/docs")


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout"
)
def test_dropped_documents_never_show_up_in_git() -> None:
    def ignored(path: str) -> bool:
        done = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
        return done.returncode == 0

    assert ignored("inbox/notes/report.pdf")
    assert ignored("inbox/notes/deep/er/minutes.md")
    assert ignored("inbox/stray.txt")
    assert not ignored("inbox/README.md")
    tracked = subprocess.run(
        ["git", "ls-files", "inbox"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    assert tracked == ["inbox/README.md"]
