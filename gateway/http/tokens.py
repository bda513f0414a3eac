"""API tokens: who is calling. ``cairn token create NAME --role R`` prints a token once; cairn
keeps only its SHA-256 digest, with the name and role, in ``$CAIRN_DATA/tokens.json`` (mode
0600). While that file holds no token, identities are off and every route stays as it was
before tokens; with one token or more, routes ask for ``Authorization: Bearer <token>``
(``gateway/http/identity.py``).

Why SHA-256 and not scrypt or argon2: a slow hash protects a secret a person chose (a password
of 30-40 bits) against offline guessing from a stolen file. A token here is 32 bytes from
``secrets`` (256 bits): no guess list exists, and finding a token from its SHA-256 digest
(a preimage) is 2^256 work, as infeasible against a fast hash as against a slow one. The digest
so serves as the lookup key: checking a request costs one SHA-256 of a short string and one
dictionary lookup (a few microseconds), where scrypt per request would cost tens of
milliseconds. GitHub, PyPI and Proxmox store their random API tokens the same way.

A revocation is seen by the next request: the file is re-read whenever its size, inode or
modification time changed (one ``stat`` per checked request).
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Mapping
from pathlib import Path

import attrs

from actors.config import data_dir
from events.files import SECRET, write_atomically

PREFIX = "cairn_"
FILE_NAME = "tokens.json"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")


class Role(enum.IntEnum):
    """Each role may do what the ones below it may."""

    VIEWER = 1  # reads
    OPERATOR = 2  # runs functions, starts, stops, reboots, resizes and migrates VMs
    ADMIN = 3  # installs and destroys VMs, uploads and deletes functions and images

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Role:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown role {text[:40]!r}: viewer, operator or admin") from None


class TokenError(Exception):
    pass


@attrs.frozen
class Identity:
    name: str
    role: Role


@attrs.frozen
class Entry:
    name: str
    role: Role
    digest: str
    created: float


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def tokens_path(env: Mapping[str, str]) -> Path:
    return data_dir(env) / FILE_NAME


def _parse(text: str) -> list[Entry]:
    raw = json.loads(text) if text.strip() else {"tokens": []}
    return [
        Entry(str(t["name"]), Role.parse(str(t["role"])), str(t["sha256"]), float(t["created"]))
        for t in raw.get("tokens", [])
    ]


def read_entries(path: Path) -> list[Entry]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    try:
        return _parse(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise TokenError(f"{path}: not a token file cairn wrote ({exc})") from None


def _write(path: Path, entries: list[Entry]) -> None:
    body = {
        "tokens": [
            {"name": e.name, "role": e.role.label, "sha256": e.digest, "created": e.created}
            for e in entries
        ]
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(body, indent=1), mode=SECRET)


def create(path: Path, name: str, role: Role) -> str:
    """A new token for ``name`` (unique), returned once and stored as its digest."""
    if not _NAME.fullmatch(name):
        raise TokenError(
            f"name {name[:64]!r}: 1-64 letters, digits, '.', '_', '@' or '-', starting with a "
            "letter or digit"
        )
    entries = read_entries(path)
    if any(e.name == name for e in entries):
        raise TokenError(f"a token named {name!r} exists; revoke it first or pick another name")
    token = new_token()
    _write(path, [*entries, Entry(name, role, digest(token), time.time())])
    return token


def revoke(path: Path, name: str) -> bool:
    entries = read_entries(path)
    kept = [e for e in entries if e.name != name]
    if len(kept) == len(entries):
        return False
    _write(path, kept)
    return True


class TokenStore:
    """The tokens file as the services read it: reloaded when it changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._by_digest: dict[str, Identity] = {}

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._stamp, self._by_digest = None, {}
            return
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp == self._stamp:
            return
        entries = read_entries(self.path)
        self._by_digest = {e.digest: Identity(e.name, e.role) for e in entries}
        self._stamp = stamp

    def enabled(self) -> bool:
        """True while at least one token exists: identities are on."""
        self._refresh()
        return bool(self._by_digest)

    def identify(self, token: str) -> Identity | None:
        """Who this token is, or None (unknown or revoked)."""
        self._refresh()
        return self.identify_as_read(token)

    def identify_as_read(self, token: str) -> Identity | None:
        """``identify`` with the file as ``enabled`` just read it (one ``stat`` a request)."""
        if not token.startswith(PREFIX) or len(token) > 200:
            return None
        return self._by_digest.get(digest(token))
