"""Every systemd unit cairn ships, with each set of drop-ins it ships for it, rates OK (exposure
at most 3.0) in ``systemd-analyze security``: the measure an admin runs first."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "ops"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
LIMIT = 3.0


def shipped_units() -> list[tuple[str, Path, Path | None]]:
    """(label, unit file, drop-in folder or None) for every ``*.service`` under ops/ and every
    ``<name>.service.d`` folder shipped anywhere under ops/ for it."""
    units = sorted(OPS.rglob("*.service"))
    found: list[tuple[str, Path, Path | None]] = []
    for unit in units:
        if "node_modules" in unit.parts:
            continue
        found.append((str(unit.relative_to(ROOT)), unit, None))
        for drop_ins in sorted(OPS.rglob(f"{unit.name}.d")):
            label = f"{unit.relative_to(ROOT)} + {drop_ins.relative_to(ROOT)}"
            found.append((label, unit, drop_ins))
    return found


def exposure(unit: Path, drop_ins: Path | None, tmp_path: Path) -> tuple[float, str]:
    """The overall exposure systemd-analyze gives the unit (loaded with the drop-ins, as
    systemd would from /etc/systemd/system), and its whole report."""
    assert SYSTEMD_ANALYZE is not None
    (tmp_path / unit.name).write_text(unit.read_text())
    if drop_ins is not None:
        shutil.copytree(drop_ins, tmp_path / drop_ins.name)
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "security", "--offline=yes", "--no-pager", unit.name],
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:", "SYSTEMD_COLORS": "0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = done.stdout + done.stderr
    level = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", report)
    assert level is not None, report
    return float(level.group(1)), report


def test_every_unit_is_found() -> None:
    labels = [label for label, _, _ in shipped_units()]
    assert "ops/deploy/systemd/cairn.service" in labels
    assert "ops/deploy/systemd/cairn.service + ops/deploy/cluster/cairn.service.d" in labels
    assert "ops/deploy/cluster/cairn-nats.service" in labels


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed here")
@pytest.mark.parametrize(
    ("unit", "drop_ins"),
    [pytest.param(unit, drop_ins, id=label) for label, unit, drop_ins in shipped_units()],
)
def test_exposure_is_ok(unit: Path, drop_ins: Path | None, tmp_path: Path) -> None:
    level, report = exposure(unit, drop_ins, tmp_path)
    assert level <= LIMIT, report
    # The whole point: not root, whatever the drop-ins say.
    assert "Service runs as root user" not in report, report


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed here")
def test_the_measure_would_catch_a_root_drop_in(tmp_path: Path) -> None:
    """The measure can fail: yesterday's local-qm drop-in (root, every capability, no mount
    restrictions) rated far above the limit."""
    drop_ins = tmp_path / "given" / "cairn.service.d"
    drop_ins.mkdir(parents=True)
    (drop_ins / "root.conf").write_text(
        "[Service]\nUser=\nGroup=\nCapabilityBoundingSet=~\nProtectSystem=no\n"
        "PrivateDevices=no\nNoNewPrivileges=no\nSystemCallFilter=\n"
    )
    loaded = tmp_path / "loaded"
    loaded.mkdir()
    level, report = exposure(OPS / "deploy" / "systemd" / "cairn.service", drop_ins, loaded)
    assert level > LIMIT, report
