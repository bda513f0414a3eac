"""How a cairn process reaches NATS: the servers, the keyring its roles' keys come from, and
the TLS settings that verify the servers. One ``NatsAccess`` connects each role it is asked
for (``events/permissions.py``); what it shows of itself never includes a secret."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import attrs
from nats.aio.client import Client

from events.bus import connect, redact_url
from events.credentials import Keyring
from events.permissions import Role
from events.signing import EventSigner


@attrs.frozen
class NatsAccess:
    url: str = attrs.field(repr=redact_url)
    # None: connect without credentials (an open server the operator chose: NATS_KEYS=none).
    keyring: Keyring | None = None
    # The CA that signed the servers' certificates; None: the system's CAs (tls:// URLs) or
    # no TLS at all (nats:// URLs).
    ca_file: Path | None = None

    @property
    def shown_url(self) -> str:
        return redact_url(self.url)

    @property
    def uses_tls(self) -> bool:
        return self.ca_file is not None or "tls://" in self.url

    def tls_context(self) -> ssl.SSLContext | None:
        if not self.uses_tls:
            return None
        context = ssl.create_default_context(
            cafile=str(self.ca_file) if self.ca_file is not None else None
        )
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    def signer(self) -> EventSigner | None:
        """Signs and checks events, when this keyring holds the events key."""
        key = self.keyring.events_key() if self.keyring is not None else None
        return EventSigner(key) if key is not None else None

    def client_options(self, role: Role) -> dict[str, Any]:
        """What nats-py's ``connect`` takes to connect as ``role``: the role's nkey seed and
        inbox prefix (with a keyring) and the TLS context (for TLS servers)."""
        options: dict[str, Any] = {"tls": self.tls_context()}
        if self.keyring is not None:
            options.update(nkeys_seed_str=self.keyring.seed(role), inbox_prefix=role.inbox)
        return options

    async def connect(self, role: Role, *, name: str | None = None) -> Client:
        """cairn's reconnecting client (``events.bus.connect``) as ``role``."""
        return await connect(
            self.url, name=name or f"cairn {role.value}", **self.client_options(role)
        )
