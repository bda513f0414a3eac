"""Who may say what on NATS: cairn's roles, the subjects each may publish and subscribe to, and
the ``authorization`` block of a nats-server configuration that enforces them.

Every cairn process connects once per part it plays, each connection with its role's nkey
(``events/credentials.py``):

- ``host`` runs the actors: answers commands and queries, publishes the stored events, keeps
  the events stream, the lease bucket and the function code store (the JetStream API);
- ``gateway`` translates HTTP: sends commands and queries, sends function runs and hears their
  replies, follows the events stream (read-only consumers);
- ``runner`` runs functions: takes runs from the queue group and streams their replies back;
- ``observer`` only reads events (``cairn events tail``, a subscriber of your own).

Replies: every role gets its own inbox prefix (``_INBOX_<role>``) and may subscribe to that
prefix alone, so no role hears another's replies (command answers, JetStream API answers with
lease values or function code). A role that answers requests may publish only to the reply
subject of a request it received (``allow_responses``), so no one can answer a request meant
for someone else. Function runs stream many messages back, so their replies go to
``cairn.functions.reply.>``, which only the runner may publish to and only the gateway hear.

The table is data, rendered into the server's configuration by :func:`authorization_block`;
``docs/events.md`` shows it as a table and ``tests/security`` tries every forbidden row.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence

import attrs

from events.jetstream import STREAM

# Subjects of the events, the lease bucket and the function code store (JetStream).
EVENTS = "cairn.evt.>"
LEASE_BUCKET = "CAIRN_LEASES"
CODE_BUCKET = "CAIRN_CODE"
# Where a function run's messages go back to (``gateway/functions.py``, ``RunClient``).
RUN_REPLIES = "cairn.functions.reply"
# How long a host may take to answer one command (an install's first records included).
_RESPONSE_WINDOW = "10m"


class Role(enum.Enum):
    HOST = "host"
    GATEWAY = "gateway"
    RUNNER = "runner"
    OBSERVER = "observer"

    @property
    def inbox(self) -> str:
        """The prefix of this role's reply subjects (nats-py's ``inbox_prefix``)."""
        return f"_INBOX_{self.value}"


@attrs.frozen
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    # Whether the role answers requests: it may then publish once to each reply subject of a
    # request it received, within the window.
    responds: bool = False

    def config(self) -> dict[str, object]:
        granted: dict[str, object] = {
            "publish": {"allow": list(self.publish)} if self.publish else {"deny": [">"]},
            "subscribe": {"allow": list(self.subscribe)},
        }
        if self.responds:
            granted["allow_responses"] = {"max": 1, "expires": _RESPONSE_WINDOW}
        return granted


def _read_events(*extra: str) -> tuple[str, ...]:
    """The JetStream API calls that read the events stream through a consumer of one's own:
    the stream's info, consumers created and removed on it, flow control answers."""
    return (
        "$JS.API.INFO",
        f"$JS.API.STREAM.INFO.{STREAM}",
        "$JS.API.STREAM.NAMES",
        f"$JS.API.CONSUMER.CREATE.{STREAM}",
        f"$JS.API.CONSUMER.CREATE.{STREAM}.>",
        f"$JS.API.CONSUMER.INFO.{STREAM}.>",
        f"$JS.API.CONSUMER.DELETE.{STREAM}.>",
        "$JS.FC.>",
        *extra,
    )


PERMISSIONS: Mapping[Role, Permissions] = {
    Role.HOST: Permissions(
        publish=(
            EVENTS,  # the outbox relay
            "$JS.API.>",  # the events stream, the lease bucket, the code store: kept by hosts
            f"$KV.{LEASE_BUCKET}.>",
            f"$O.{CODE_BUCKET}.>",
            "$JS.FC.>",
            "$JS.ACK.>",
        ),
        # Events too: it can read them through the JetStream API anyway.
        subscribe=("cairn.cmd.>", "cairn.q.>", EVENTS, Role.HOST.inbox + ".>"),
        responds=True,
    ),
    Role.GATEWAY: Permissions(
        publish=(
            "cairn.cmd.>",
            "cairn.q.>",
            "cairn.functions.run",
            "cairn.functions.cancel",
            *_read_events(),
        ),
        subscribe=(f"{RUN_REPLIES}.>", Role.GATEWAY.inbox + ".>"),
    ),
    Role.RUNNER: Permissions(
        publish=(f"{RUN_REPLIES}.>",),
        subscribe=(
            "cairn.functions.run",
            "cairn.functions.cancel",
            "cairn.q.functions.runtimes",
            Role.RUNNER.inbox + ".>",
        ),
        responds=True,
    ),
    Role.OBSERVER: Permissions(
        publish=_read_events(),
        subscribe=(EVENTS, Role.OBSERVER.inbox + ".>"),
    ),
}


def authorization_block(public_keys: Mapping[Role, str]) -> str:
    """The ``authorization`` block of a nats-server configuration: one nkey user per role
    with that role's permissions; nobody else may connect."""
    return authorization_block_for([public_keys])


def authorization_block_for(keyrings: Sequence[Mapping[Role, str]]) -> str:
    """:func:`authorization_block` letting in the keys of several keyrings (while keys
    rotate, the old and the new). JSON is valid NATS configuration syntax, and quoting keeps
    ``$JS...`` from being read as a variable."""
    users = [
        {"nkey": keys[role], "permissions": PERMISSIONS[role].config()}
        for keys in keyrings
        for role in Role
        if role in keys
    ]
    return "authorization " + json.dumps({"users": users}, indent=2) + "\n"
