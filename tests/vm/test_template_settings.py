"""VM_TEMPLATES and the templates' id range (TEMPLATE_ID_START/_END), checked at start."""

from __future__ import annotations

import re

import pytest

from actors.vm.settings import SettingsError, load_settings
from tests.vm.helpers import BASE_ENV, settings


def test_defaults_turn_templates_on_and_keep_their_ids_apart_from_the_vms() -> None:
    s = settings()
    assert s.templates is True
    assert (s.template_start, s.template_end) == (9000, 9099)
    assert not set(s.template_range) & set(s.id_range)
    assert settings(VM_TEMPLATES="0").templates is False
    assert settings(VM_TEMPLATES="off").templates is False
    s = settings(TEMPLATE_ID_START="300", TEMPLATE_ID_END="300")
    assert list(s.template_range) == [300]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"VM_TEMPLATES": "maybe"}, "VM_TEMPLATES must be 1 or 0, got 'maybe'"),
        ({"TEMPLATE_ID_START": "nine"}, "TEMPLATE_ID_START must be an integer, got 'nine'"),
        ({"TEMPLATE_ID_START": "99"}, "TEMPLATE_ID_START must be at least 100, got 99"),
        (
            {"TEMPLATE_ID_END": "1000000000"},
            "TEMPLATE_ID_END must be at most 999999999, got 1000000000",
        ),
        (
            {"TEMPLATE_ID_START": "9100", "TEMPLATE_ID_END": "9000"},
            "TEMPLATE_ID_START (9100) must not exceed TEMPLATE_ID_END (9000)",
        ),
        (
            {"TEMPLATE_ID_START": "200", "TEMPLATE_ID_END": "300"},
            "TEMPLATE_ID_START..TEMPLATE_ID_END (200..300) overlaps the VMs' ids "
            "ASSIGN_IP_START..ASSIGN_IP_END (100..254); give templates a range of their own",
        ),
        (
            {
                "ASSIGN_IP_START": "120",
                "ASSIGN_IP_END": "130",
                "TEMPLATE_ID_START": "100",
                "TEMPLATE_ID_END": "120",
            },
            r"\(100..120\) overlaps the VMs' ids ASSIGN_IP_START..ASSIGN_IP_END \(120..130\)",
        ),
    ],
)
def test_bad_template_settings_stop_the_start(extra: dict[str, str], message: str) -> None:
    pattern = message if message.startswith(r"\(") else re.escape(message)
    with pytest.raises(SettingsError, match=pattern):
        load_settings({**BASE_ENV, **extra})
