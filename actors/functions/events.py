"""Events of the function registry.

Stream ``functions:registry``: one singleton actor decides every version, so versions of a path
are strictly increasing Unix milliseconds and never collide. The code itself is not in the
event: it lives content-addressed under ``CAIRN_DATA/functions/code`` and the event names it by
its SHA-256.
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


def version_stored(
    path: str, version: int, language: str, sha256: str, size: int
) -> FunctionVersionStored:
    return FunctionVersionStored(
        path=path, version=version, language=language, sha256=sha256, size=size
    )


@domain_event("functions.deleted")
class FunctionDeleted(Event):
    """Every version of ``path`` is gone (``versions`` of them); a later upload starts the path
    anew, with versions still above every one it had."""

    path: str
    versions: int
