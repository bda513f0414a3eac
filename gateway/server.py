"""The composition root: the one list of cairn's services, and what each brings.

Each service is one record: its app (the HTTP side, built per process), its events (so a
replay knows every type), its journal lines and its command-line group. Everything that
lists services reads this module: ``cairn up`` and ``cairn serve`` (gateway/main.py), the
launcher's fast path for the HTTP clients (gateway/launcher.py), the event catalogue
(events/catalog.py) and the operator's journal (actors/journal.py), which are handed the
domains' parts from here instead of importing them, so events/ and the actors' shared modules
stay below every domain.

Why a module of its own and not gateway/services.py: every app module imports that one for
the shape of a service (``ServiceDef``) and the middlewares all apps share, so the list of
apps cannot live there without a circle. Why the apps and the command-line groups are named by
small loaders: importing this module must stay cheap and free of the server side (the
launcher reads it for ``cairn vm list`` in a loop), and a service that ``CAIRN_SERVICES``
leaves out is never imported (a VM-only host loads no embedding model).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

import attrs

import actors.functions.events
import actors.images.events
import actors.search.events
import actors.vm.events
from actors import journal as journals
from actors.config import ConfigError
from actors.functions.journal import journal_lines as functions_journal
from actors.images.journal import journal_lines as images_journal
from actors.search.journal import journal_lines as search_journal
from actors.vm.journal import journal_lines as vm_journal
from events.catalog import catalogue
from events.model import Event

if TYPE_CHECKING:
    from gateway.services import ServiceDef

# A command-line group's ``register(subparsers)``.
Register = Callable[["argparse._SubParsersAction[Any]"], None]


@attrs.frozen
class CommandGroup:
    """A service's ``cairn WORD …`` commands."""

    word: str
    load: Callable[[], Register]
    # True when its commands only talk HTTP to a running cairn: the launcher runs them without
    # importing the server side.
    client: bool = True


@attrs.frozen
class Service:
    name: str
    app: Callable[[], ServiceDef]
    events: ModuleType | None = None
    journal: Callable[[], journals.JournalLines] | None = None
    commands: tuple[CommandGroup, ...] = ()


def _status_app() -> ServiceDef:
    from gateway.apps.status import SERVICE

    return SERVICE


def _vm_app() -> ServiceDef:
    from gateway.apps.vm import SERVICE

    return SERVICE


def _functions_app() -> ServiceDef:
    from gateway.apps.functions import SERVICE

    return SERVICE


def _search_app() -> ServiceDef:
    from gateway.apps.search import SERVICE

    return SERVICE


def _images_app() -> ServiceDef:
    from gateway.apps.images import SERVICE

    return SERVICE


def _vm_cli() -> Register:
    from gateway.cli.vm import register

    return register


def _functions_cli() -> Register:
    from gateway.cli.functions import register

    return register


def _search_cli() -> Register:
    from gateway.cli.search import register

    return register


def _images_cli() -> Register:
    from gateway.cli.images import register

    return register


# Order is start-up order. "status" is the gateway's own: health and what runs where.
SERVICES = (
    Service("status", _status_app),
    Service("vm", _vm_app, actors.vm.events, vm_journal, (CommandGroup("vm", _vm_cli),)),
    Service(
        "functions",
        _functions_app,
        actors.functions.events,
        functions_journal,
        (CommandGroup("fn", _functions_cli),),
    ),
    Service(
        "search",
        _search_app,
        actors.search.events,
        search_journal,
        (CommandGroup("search", _search_cli, client=False),),
    ),
    Service(
        "images",
        _images_app,
        actors.images.events,
        images_journal,
        (CommandGroup("images", _images_cli),),
    ),
)

KNOWN = tuple(service.name for service in SERVICES)
_BY_NAME = {service.name: service for service in SERVICES}


def load(name: str) -> ServiceDef:
    """The app of service ``name`` (its module imported now)."""
    if name not in _BY_NAME:
        raise KeyError(f"unknown service {name!r}; known: {', '.join(KNOWN[1:])}")
    return _BY_NAME[name].app()


def available() -> list[ServiceDef]:
    """Every service's app, in start-up order."""
    return [service.app() for service in SERVICES]


def chosen(env: Mapping[str, str]) -> list[ServiceDef]:
    """What ``cairn up`` starts: every service, or only those ``CAIRN_SERVICES`` names
    (comma-separated, e.g. ``vm,functions``), in start-up order. "status" (health, the
    console) always runs. A service left out is never imported, so a host without search
    loads no embedding model and needs none installed."""
    raw = (env.get("CAIRN_SERVICES") or "").strip()
    if not raw:
        return available()
    names = [name.strip().lower() for name in raw.split(",") if name.strip()]
    unknown = [name for name in names if name not in KNOWN[1:]]
    if unknown or not names:
        rule = f"a comma-separated list of {', '.join(KNOWN[1:])}"
        raise ConfigError("CAIRN_SERVICES", rule, raw)
    return [
        service.app() for service in SERVICES if service.name == "status" or service.name in names
    ]


def domain_events() -> dict[str, type[Event]]:
    """Every event type the services store, by type name (all registered: their modules are
    imported with this one)."""
    return catalogue(service.events for service in SERVICES if service.events is not None)


def journal() -> journals.Journal:
    """The operator's journal over every service's lines (a fresh one: it keeps open tasks)."""
    return journals.Journal(service.journal() for service in SERVICES if service.journal)


def command_groups(*, client: bool | None = None) -> dict[str, CommandGroup]:
    """The services' command-line groups by their first word; ``client``: only those that
    talk HTTP (True) or only the others (False)."""
    return {
        group.word: group
        for service in SERVICES
        for group in service.commands
        if client is None or group.client == client
    }
