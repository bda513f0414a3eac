"""Who asked, as a command carries it: the audit trail's ``by``.

The gateway puts it in every state-changing command it sends over NATS (a token's name, or
``ip:<address>`` when this cairn has no tokens; ``gateway/http/identity.py``) and the actor records
it in the event the command causes. The actor host does not trust the bus more than HTTP: a
``by`` that is not a short printable text is refused, whoever sent it, so nothing that could
forge a second journal line or a column of the console's events reaches the store.
"""

from __future__ import annotations

from typing import Any

BY_MAX = 100
BY_RULE = "by: must be a token's name or ip:<address>"


class BadBy(ValueError):
    """A command's ``by`` is not one cairn's gateway would send."""

    def __init__(self) -> None:
        super().__init__(BY_RULE)
        self.message = BY_RULE


def parse_by(value: Any) -> str | None:
    """The ``by`` of a command's payload: None when absent (an older gateway, or cairn acting
    by itself), the text when it is one; else :class:`BadBy`."""
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= BY_MAX or not value.isprintable():
        raise BadBy()
    return value
