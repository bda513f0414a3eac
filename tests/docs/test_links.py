"""Every link between the docs (and from the README) reaches a file of the repository and, when
it names a section, a heading that exists: a section renumbered or renamed leaves no reader at
a dead anchor."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")])
# [text](target): not images, not absolute URLs.
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```", re.DOTALL)


def anchors(page: Path) -> set[str]:
    """The ids a Markdown renderer gives the page's headings (lower case, punctuation but `-`
    and `_` dropped, spaces as `-`; a repeated heading gets `-1`, `-2`...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in CODE.sub("", page.read_text()).splitlines():
        if not (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            continue
        text = re.sub(r"`|\*|\[([^\]]*)\]\([^)]*\)", r"\1", m[1]).strip().lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_reaches_a_file_and_its_section(page: Path) -> None:
    broken = []
    for target in LINK.findall(CODE.sub("", page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, section = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif section and linked.suffix == ".md" and section not in anchors(linked):
            broken.append(f"{target}: no heading #{section}")
    assert broken == []


# A file of the repository named by where the documented install puts it (`/opt/cairn/...`),
# but what `ops/setup` makes there (the venv, the npm tree).
INSTALLED = re.compile(r"/opt/cairn/([\w./-]*[\w-])")
MADE_BY_SETUP = (".venv", "ops/node_modules")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_a_command_copies_from_the_install_exists(page: Path) -> None:
    """`cp /opt/cairn/ops/deploy/pve/cairn_allow.py ...`: a file moved in the tree leaves no
    command that copies nothing."""
    missing = sorted(
        {
            path
            for path in INSTALLED.findall(page.read_text())
            if not path.startswith(MADE_BY_SETUP) and not (ROOT / path).exists()
        }
    )
    assert missing == []
