"""Errors that carry the HTTP status they map to, and how to recognise a full disk.

The exception tree, in one place:

* ``CommandFailed(status, message)`` — a command was refused or failed. Handlers raise it (an
  actor's ``Rejected`` is one); ``serve_json`` sends it back over NATS as
  ``{"error": {"status", "message"}}``; the gateways answer with its status and message.
* ``BusUnavailable`` (503), ``NoResponders`` (503), ``CommandTimeout`` (504) — the bus could not
  carry a command (``events.bus``).
* ``StoreWriteFailed`` (503, or 507 when the disk is full) — the event store kept refusing a
  write past its retry budget (``events.store``).
* ``DamagedEvent`` (503) — a stored event cannot be read back; its stream is quarantined.
"""

from __future__ import annotations

import errno

__all__ = ["CommandFailed", "DamagedEvent", "StoreWriteFailed", "disk_full", "reason"]

# Errors of a write that a full disk (or a quota, or a file-size limit) causes.
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_FULL_TEXTS = ("database or disk is full", "no space left on device", "disk quota exceeded")


class CommandFailed(Exception):
    """A command was refused or failed; ``status`` is the HTTP status it maps to."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class StoreWriteFailed(CommandFailed):
    """The event store refused a write, and kept refusing it for its whole retry budget."""

    def __init__(self, message: str, *, full: bool) -> None:
        super().__init__(507 if full else 503, message)
        self.full = full


class DamagedEvent(CommandFailed):
    """A stored event that cannot be decoded or applied: its stream cannot be replayed."""

    def __init__(self, stream: str, position: int, version: int, type_name: str, error: str):
        super().__init__(
            503,
            f"stream {stream} is quarantined: its event {version} (position {position}, "
            f"type {type_name}) cannot be replayed: {error}",
        )
        self.stream = stream
        self.position = position
        self.version = version
        self.type_name = type_name
        self.error = error


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) says the disk, a quota or a file-size limit is full."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL_ERRNOS:
            return True
        text = str(current).lower()
        if any(marker in text for marker in _FULL_TEXTS):
            return True
        current = getattr(current, "orig", None) or current.__cause__ or current.__context__
    return False


def reason(exc: BaseException) -> str:
    """A short, plain reason for a failed write, fit for a user: never a driver's traceback."""
    if disk_full(exc):
        return "the disk is full"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[0].lower() + exc.strerror[1:]
    orig = getattr(exc, "orig", None)  # SQLAlchemy's DBAPIError wraps the driver's error
    text = str(orig if orig is not None else exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
