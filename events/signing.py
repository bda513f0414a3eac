"""Signed events: what a host publishes carries proof that a host published it.

NATS permissions already keep everyone but hosts from publishing on ``cairn.evt.>``. This is the
second wall behind them (a leaked host credential, a misconfigured external server): each event
is published with ``Cairn-Sig``, an HMAC-SHA256 of its subject and payload under the events key
that only hosts hold (``events/credentials.py``), and its JetStream de-duplication id ends with
a piece of that signature. So a forger can neither make an event a consumer accepts nor claim
the id of an event a host is about to publish (JetStream would have dropped the real one as a
duplicate). Consumers that act on events (SSE streams, the console's feed, cache purges) drop
a message whose signature is missing or wrong, with a log line.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Mapping

import attrs
from nats.aio.msg import Msg

SIG_HEADER = "Cairn-Sig"
# How much of the signature the de-duplication id carries (hex characters: 64 bits).
ID_SIG_CHARS = 16
# At most one warning about dropped messages per this many seconds.
_WARN_EVERY = 10.0

log = logging.getLogger(__name__)


@attrs.define
class EventSigner:
    """Signs and checks events with one key."""

    key: bytes = attrs.field(repr=False)
    dropped: int = 0
    _warned_at: float = -_WARN_EVERY

    def sign(self, subject: str, payload: bytes) -> str:
        mac = hmac.new(self.key, subject.encode(), hashlib.sha256)
        mac.update(b"\n")
        mac.update(payload)
        return mac.hexdigest()

    def signed(self, subject: str, payload: bytes, headers: Mapping[str, str] | None) -> bool:
        """Whether a message carries a valid signature (nothing counted or logged)."""
        given = (headers or {}).get(SIG_HEADER, "")
        return bool(given) and hmac.compare_digest(given, self.sign(subject, payload))

    def genuine(self, msg: Msg) -> bool:
        """Whether ``msg`` carries a valid signature; a forgery is counted and logged."""
        given = (msg.headers or {}).get(SIG_HEADER, "")
        if self.signed(msg.subject, msg.data, msg.headers):
            return True
        self.dropped += 1
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY:
            self._warned_at = now
            log.warning(
                "dropped an event on %s that no cairn host signed (%s; %d so far): someone "
                "who is not a cairn host publishes on the events subjects",
                msg.subject,
                "no signature" if not given else "wrong signature",
                self.dropped,
            )
        return False
