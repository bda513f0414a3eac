"""The composition root (gateway/server.py) is the one list of services: every domain's events
are in its catalogue, each service and each command word is listed once."""

from __future__ import annotations

import importlib
from pathlib import Path

from events.model import REGISTRY
from gateway import server

ACTORS = Path(__file__).parents[2] / "actors"


def test_every_domain_event_is_in_the_catalogue_the_root_hands_out() -> None:
    modules = sorted(
        ".".join(path.relative_to(ACTORS.parent).with_suffix("").parts)
        for path in ACTORS.glob("*/events.py")
    )
    assert modules == [f"actors.{d}.events" for d in ("functions", "images", "search", "vm")]
    for name in modules:
        importlib.import_module(name)
    declared = {t for t, cls in REGISTRY.items() if cls.__module__ in modules}
    assert declared and set(server.domain_events()) == declared


def test_each_service_and_each_command_word_is_listed_once() -> None:
    assert server.KNOWN == ("status", "vm", "functions", "search", "images")
    words = [group.word for service in server.SERVICES for group in service.commands]
    assert sorted(words) == sorted(set(words)) == ["fn", "images", "search", "vm"]
    assert sorted(server.command_groups(client=True)) == ["fn", "images", "vm"]
    assert [server.load(name).name for name in server.KNOWN] == list(server.KNOWN)
