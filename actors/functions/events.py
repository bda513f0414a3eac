"""Events of the function registry.

Stream ``functions:registry``: one singleton actor decides every version, so versions of a path
are strictly increasing Unix milliseconds and never collide. The code itself is not in the
event: it lives content-addressed under ``CAIRN_DATA/functions/code`` and the event names it by
its SHA-256.

``by`` is who asked (the audit trail): a token's name, or ``ip:<address>`` when this cairn has
no tokens (``gateway/http/identity.py``); None in events stored before cairn kept it. A field with a
default, so it keeps the schema version (``events/upcast.py``): an older event reads with
None, and an older cairn reading a newer event leaves the field out.
"""

from __future__ import annotations

from events.model import Event, domain_event


@domain_event("functions.version_stored")
class FunctionVersionStored(Event):
    """``path`` has a new ``version`` (Unix ms) in ``language``; code ``sha256``, ``size`` bytes."""

    path: str
    version: int
    language: str
    sha256: str
    size: int
    by: str | None = None  # who asked: a token's name or "ip:<address>"


def version_stored(
    path: str, version: int, language: str, sha256: str, size: int, by: str | None = None
) -> FunctionVersionStored:
    return FunctionVersionStored(
        path=path, version=version, language=language, sha256=sha256, size=size, by=by
    )


@domain_event("functions.deleted")
class FunctionDeleted(Event):
    """Every version of ``path`` is gone (``versions`` of them); a later upload starts the path
    anew, with versions still above every one it had."""

    path: str
    versions: int
    by: str | None = None  # who asked
