"""What travels over NATS between gateways, the registry and runner hosts.

Commands to the registry are JSON request/reply (``events.bus``). A run is one request on
``RUN_SUBJECT``, served by a queue group of runner hosts (any machine on the same NATS); the
chosen host answers on the request's reply subject with a sequence of messages:

``accepted`` (queued) or ``busy`` (queue full), then ``started``, then ``log`` lines when the
caller asked for a stream, then exactly one ``result`` or ``error``. From ``accepted`` on, the
host also sends ``alive`` every ``accepted.alive`` seconds until the run ends, so a caller
knows within seconds that a host died with its run (a kill, a power cut, a lost network)
instead of waiting out the run's whole time limit.
"""

from __future__ import annotations

import json
from typing import Any

from events import permissions

UPLOAD_SUBJECT = "cairn.cmd.functions.upload"
RESOLVE_SUBJECT = "cairn.cmd.functions.resolve"
LIST_SUBJECT = "cairn.q.functions.list"
DELETE_SUBJECT = "cairn.cmd.functions.delete"
# Any runner host answers with the languages it runs and their runtimes' versions.
RUNTIMES_SUBJECT = permissions.RUNTIMES
REGISTRY_QUEUE = "functions-registry"
RUN_SUBJECT = permissions.RUN
# The only queue group a runner may take runs in (events/permissions.py).
RUNNERS_QUEUE = permissions.RUNNERS_QUEUE
# Every runner host listens (no queue group): only the one running the id acts on it.
CANCEL_SUBJECT = permissions.CANCEL

ACCEPTED = "accepted"
BUSY = "busy"
STARTED = "started"
LOG = "log"
RESULT = "result"
ERROR = "error"
ALIVE = "alive"
# Seconds between a host's `alive` messages for each run it holds, and how many of them a
# caller may miss before it gives the run up (NATS buffers a host's messages through a short
# reconnect, so a blip does not count as missing).
ALIVE_EVERY_S = 1.0
ALIVE_MISSES = 5
FINAL = frozenset({BUSY, RESULT, ERROR})


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def decode(data: bytes) -> Any:
    return json.loads(data)
