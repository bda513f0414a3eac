"""Who a change's function check runs for: the audit trail's `by` the functions service gets,
which it refuses past BY_MAX (actors/audit.py), so a long name must never make the check fail."""

from __future__ import annotations

import pytest

from actors.audit import BY_MAX, parse_by
from actors.vm.change import _checked_by


@pytest.mark.parametrize(
    ("by", "said"),
    [
        ("alice", "alice, for the change of VM 170"),
        ("ip:127.0.0.1", "ip:127.0.0.1, for the change of VM 170"),
        (None, "the change of VM 170 (task t-1)"),
        ("a" * 64, "a" * 64 + ", for the change of VM 170"),
        # The longest `by` a gateway sends (a quoted forwarded hop cut short) stands alone.
        ("ip:" + "x" * (BY_MAX - 3), "ip:" + "x" * (BY_MAX - 3)),
    ],
)
def test_a_check_runs_for_who_asked_for_the_change(by: str | None, said: str) -> None:
    got = _checked_by(by, 170, "t-1")
    assert got == said
    assert parse_by(got) == got  # what the runner accepts as a `by`
