"""Imports every module that declares events, so ``REGISTRY`` is complete wherever events are
decoded (a replay must never meet an unknown type). Add one line per new domain module."""

from __future__ import annotations

import importlib
import importlib.util

from events.model import REGISTRY

DOMAIN_EVENT_MODULES = (
    "actors.vm.events",
    "actors.functions.events",
    "actors.search.events",
    "actors.images.events",
)


def load_all() -> dict[str, type]:
    for name in DOMAIN_EVENT_MODULES:
        if importlib.util.find_spec(name.rpartition(".")[0]) and importlib.util.find_spec(name):
            importlib.import_module(name)
    return dict(REGISTRY)
