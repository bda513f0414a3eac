"""The keys that let cairn's processes onto NATS, and the key that signs its events.

A *keyring* is a directory (mode 0700) of files (mode 0600):

- ``<role>.nk``: the nkey seed of each role (``events/permissions.py``). The server's
  configuration holds only the public keys; a client proves it holds the seed by signing the
  server's nonce, so no secret crosses the connection.
- ``events.key``: 32 random bytes (hex) with which hosts sign every event they publish
  (``events/signing.py``); consumers that trust events check the signature.

The embedded nats-server makes its keyring on first start (``$CAIRN_DATA/nats/keys``); a
cluster's is made once by ``cairn cluster init`` and copied to each host (``NATS_KEYS``).
A keyring may hold only some roles: an observer's copy holds ``observer.nk`` alone.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from pathlib import Path

import attrs
import nkeys

from events.files import SECRET, write_atomically
from events.permissions import Role

EVENTS_KEY = "events.key"


class KeyringError(Exception):
    """A keyring file is missing, unreadable or not a key."""


def new_seed() -> str:
    """A new user nkey seed (``SU...``)."""
    return nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER).decode()


def public_key(seed: str) -> str:
    """The public key (``U...``) of a user nkey seed."""
    try:
        return str(nkeys.from_seed(bytearray(seed.encode())).public_key.decode())
    except (nkeys.NkeysError, ValueError, TypeError) as exc:
        raise KeyringError(f"not an nkey seed: {exc}") from None


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` to a new file only its owner can read, whole or not at all."""
    write_atomically(path, text + "\n", mode=SECRET)


@attrs.frozen
class Keyring:
    path: Path

    @classmethod
    def create(cls, path: Path, roles: Iterable[Role] = tuple(Role)) -> Keyring:
        """The keyring at ``path``, with whatever of ``roles`` and the events key it lacks
        generated (existing keys are kept: a restart must not lock out running clients)."""
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path, 0o700)
        for role in roles:
            seed_file = path / f"{role.value}.nk"
            if not seed_file.exists():
                write_secret(seed_file, new_seed())
        key_file = path / EVENTS_KEY
        if not key_file.exists():
            write_secret(key_file, secrets.token_hex(32))
        return cls(path)

    def _read(self, name: str) -> str:
        try:
            return (self.path / name).read_text().strip()
        except OSError as exc:
            raise KeyringError(f"{self.path / name}: {exc.strerror}") from None

    def has(self, role: Role) -> bool:
        return (self.path / f"{role.value}.nk").is_file()

    def seed(self, role: Role) -> str:
        return self._read(f"{role.value}.nk")

    def public_key(self, role: Role) -> str:
        return public_key(self.seed(role))

    def public_keys(self) -> dict[Role, str]:
        return {role: self.public_key(role) for role in Role if self.has(role)}

    def events_key(self) -> bytes | None:
        """The events signing key, or None in a keyring without it (an observer's)."""
        if not (self.path / EVENTS_KEY).is_file():
            return None
        text = self._read(EVENTS_KEY)
        try:
            key = bytes.fromhex(text)
        except ValueError:
            raise KeyringError(f"{self.path / EVENTS_KEY}: not a hex key") from None
        if len(key) < 16:
            raise KeyringError(f"{self.path / EVENTS_KEY}: shorter than 16 bytes")
        return key
