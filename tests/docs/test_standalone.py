"""The reference docs stand alone: they point at nothing outside the repository (a spec, a
contract, an issue, an original implementation), and every setting a service reads from the
environment is explained in its own doc."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"

STANDALONE = [
    "functions.md",
    "images.md",
    "events.md",
    "console.md",
    "upgrading.md",
    "simulator.md",
    "vm.md",
    "cli.md",
]

OUTSIDE = re.compile(
    r"\bspec(?:'s|s)?\b|\bcontract\b|\bthe issue\b|\bissue \d+|\boriginal (?:answers|says|does)"
    r"|the original(?:'s)? (?:service|implementation|contract)",
    re.IGNORECASE,
)


@pytest.mark.parametrize("doc", STANDALONE)
def test_a_doc_refers_to_nothing_outside_the_repository(doc: str) -> None:
    lines = (DOCS / doc).read_text().splitlines()
    found = [
        f"{doc}:{n}: {line.strip()}" for n, line in enumerate(lines, 1) if OUTSIDE.search(line)
    ]
    assert found == []


def _settings(sources: list[str], names: str) -> set[str]:
    """The quoted environment variable names matching ``names`` in ``sources``."""
    pattern = re.compile(rf'"((?:{names})[A-Z0-9_]*)"')
    found: set[str] = set()
    for source in sources:
        for path in sorted(ROOT.glob(source)):
            found |= set(pattern.findall(path.read_text()))
    return found


# Who checks clients (ALLOW_IPS, TRUSTED_PROXIES) for the functions and images services and the
# console; a service's listen address is `<NAME>_HOST` (gateway/services.py builds the name).
CLIENTS = "gateway/http/allow_ips.py"
CHECKS = "ALLOW_IPS|TRUSTED_PROXIES"


@pytest.mark.parametrize(
    ("doc", "sources", "names", "host"),
    [
        (
            "functions.md",
            ["actors/functions/*.py", "gateway/apps/functions.py", CLIENTS],
            f"RUN_|CODE_MAX|FUNCTIONS_|ESBUILD|BWRAP|{CHECKS}",
            "FUNCTIONS_HOST",
        ),
        (
            "images.md",
            ["actors/images/*.py", "gateway/apps/images.py", CLIENTS],
            f"IMAGES_|{CHECKS}",
            "IMAGES_HOST",
        ),
        (
            "events.md",
            ["events/*.py", "actors/platform.py", "gateway/cli/events.py"],
            "CAIRN_EVENT|CAIRN_STORE|CAIRN_DATA|NATS_",
            None,
        ),
        (
            "vm.md",
            ["actors/vm/**/*.py", "gateway/apps/vm.py", "gateway/cli/pve.py", CLIENTS],
            f"VM_|PVE_|ASSIGN_|GATEWAY|MAIN_NODE|IMAGE_BASE_URL|{CHECKS}",
            "VM_HOST",
        ),
        (
            "console.md",
            ["gateway/console/*.py", "gateway/apps/status.py", "gateway/http/hosts.py", CLIENTS],
            f"CAIRN_PORT|CAIRN_SESSION|CAIRN_ALLOWED|{CHECKS}",
            "STATUS_HOST",
        ),
    ],
)
def test_every_setting_a_service_reads_is_explained_in_its_doc(
    doc: str, sources: list[str], names: str, host: str | None
) -> None:
    text = (DOCS / doc).read_text()
    settings = _settings(sources, names) | ({host} if host else set())
    assert len(settings) > 2, f"no settings found for {doc}: the pattern went stale"
    assert sorted(name for name in settings if f"`{name}`" not in text) == []
