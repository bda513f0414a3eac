"""Who may say what on NATS: cairn's roles, the account each lives in, what the accounts lend
each other, what each role may publish and subscribe to, and the ``accounts`` block of a
nats-server configuration that enforces it all.

Every cairn process connects once per part it plays, each connection with its role's nkey
(``events/credentials.py``):

- ``host`` runs the actors: answers commands and queries, publishes the stored events, keeps
  the events stream, the lease bucket and the function code store (the JetStream API);
- ``gateway`` translates HTTP: sends commands and queries, sends function runs and hears their
  replies, follows the events stream;
- ``runner`` runs functions: takes runs from the queue group and streams their replies back;
- ``observer`` only reads events (``cairn events tail``, a subscriber of your own).

Each role is an account of its own. Permissions alone cannot hold a role to its row: they
govern what a client publishes, not the reply subject it names on a request, and whoever
answers (JetStream, or a host's responder) publishes to that subject with its own rights. So
the events stream, the lease bucket and the code store live in the hosts' account, where only
hosts connect and JetStream is enabled; the other accounts have no JetStream and reach the
hosts' account only through what it lends them (``SHARES``):

- commands, queries and runs are *service imports*: NATS hands the answerer a private reply
  subject (``_R_.…``) and carries the answer back to the asker's account on the subject the
  asker named, so a forged reply subject lands in the asker's own account, where nothing of
  cairn's lives;
- events are read through consumers a host creates on a reader's behalf
  (``events/consumers.py``), delivering to ``cairn.deliver.<role>.<token>``, a subject the
  hosts' account lends to that role's account alone as ``cairn.deliver.<token>``. A reader
  never calls the JetStream API, so it can neither name where JetStream answers nor where a
  consumer delivers.

Inside each account every role still gets only the subjects it uses; a runner may take runs
only as a member of the runners' queue group (``subject queue`` permissions), so it never sees
a run handed to another runner.

The table is data, rendered into the server's configuration by :func:`accounts_block`;
``docs/events.md`` shows it as a table and ``tests/security`` tries every forbidden row and
every forged reply.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence

import attrs

# Subjects of the events, the lease bucket and the function code store (JetStream).
EVENTS = "cairn.evt.>"
LEASE_BUCKET = "CAIRN_LEASES"
CODE_BUCKET = "CAIRN_CODE"
# Where a function run's messages go back to (``actors/functions/runs.py``, ``RunClient``).
RUN_REPLIES = "cairn.functions.reply"
RUN = "cairn.functions.run"
CANCEL = "cairn.functions.cancel"
RUNTIMES = "cairn.functions.runtimes"
RUNNERS_QUEUE = "functions-runners"
# A reader asks a host for a consumer here, and hears its deliveries under DELIVER.
FOLLOW = "cairn.events.follow"
DELIVER = "cairn.deliver"
# Where NATS maps the reply subject of a request that crossed from another account.
MAPPED_REPLIES = "_R_."
# How long a host may take to answer one command (an install's first records included).
_RESPONSE_WINDOW = "10m"
# How long a runner may go on sending one run's messages: a run's queueing and its time limit.
_RUN_WINDOW = "2h"
# A runner's messages for one run (log lines, `alive` every second): more than a run sends.
_RUN_MESSAGES = 10_000_000


class Role(enum.Enum):
    HOST = "host"
    GATEWAY = "gateway"
    RUNNER = "runner"
    OBSERVER = "observer"

    @property
    def inbox(self) -> str:
        """The prefix of this role's reply subjects (nats-py's ``inbox_prefix``)."""
        return f"_INBOX_{self.value}"

    @property
    def account(self) -> str:
        """The NATS account this role's keys belong to."""
        return self.value.upper()


def reply_prefixes(role: Role) -> tuple[str, ...]:
    """The reply subjects a responder of ``role`` answers: a private subject NATS made for a
    request from another account, a requester's own inbox (requests inside one account; on an
    open bus, without keys, nats-py's default ``_INBOX.``), and for a runner the run-reply
    subjects of an open bus."""
    inboxes = ("_INBOX.", *(r.inbox + "." for r in Role))
    if role is Role.RUNNER:
        return (MAPPED_REPLIES, RUN_REPLIES + ".", *inboxes)
    return (MAPPED_REPLIES, *inboxes)


@attrs.frozen
class Permissions:
    publish: tuple[str, ...]
    # "subject" or "subject queue" (only as a member of that queue group).
    subscribe: tuple[str, ...]
    # How many answers the role may publish to each reply subject it received, within how
    # long (0: it answers nothing).
    answers: int = 0
    window: str = _RESPONSE_WINDOW

    def config(self) -> dict[str, object]:
        granted: dict[str, object] = {
            "publish": {"allow": list(self.publish)} if self.publish else {"deny": [">"]},
            "subscribe": {"allow": list(self.subscribe)},
        }
        if self.answers:
            granted["allow_responses"] = {"max": self.answers, "expires": self.window}
        return granted


PERMISSIONS: Mapping[Role, Permissions] = {
    Role.HOST: Permissions(
        publish=(
            EVENTS,  # the outbox relay
            "$JS.API.>",  # the events stream, the lease bucket, the code store: kept by hosts
            f"$KV.{LEASE_BUCKET}.>",
            f"$O.{CODE_BUCKET}.>",
            "$JS.FC.>",
            "$JS.ACK.>",
            FOLLOW,  # a host's own followers ask a host too
        ),
        subscribe=(
            "cairn.cmd.>",
            "cairn.q.>",
            FOLLOW,
            f"{FOLLOW}.*",
            EVENTS,
            f"{DELIVER}.*",  # a host's own followers: one token, never a reader's delivery
            Role.HOST.inbox + ".>",
        ),
        answers=1,
    ),
    Role.GATEWAY: Permissions(
        publish=("cairn.cmd.>", "cairn.q.>", RUN, CANCEL, RUNTIMES, FOLLOW),
        subscribe=(f"{RUN_REPLIES}.>", f"{DELIVER}.>", Role.GATEWAY.inbox + ".>"),
    ),
    Role.RUNNER: Permissions(
        publish=(),
        subscribe=(
            f"{RUN} {RUNNERS_QUEUE}",
            CANCEL,
            f"{RUNTIMES} {RUNNERS_QUEUE}",
            Role.RUNNER.inbox + ".>",
        ),
        answers=_RUN_MESSAGES,
        window=_RUN_WINDOW,
    ),
    Role.OBSERVER: Permissions(
        publish=(FOLLOW,),
        subscribe=(f"{DELIVER}.>", Role.OBSERVER.inbox + ".>"),
    ),
}


@attrs.frozen
class Share:
    """A subject one role's account lends to another's: a service (requests go in, answers
    come back on a private reply subject) or a stream (messages flow to the borrower)."""

    kind: str  # "service" or "stream"
    subject: str  # in the lender's account
    lender: Role
    borrower: Role
    # The subject as the borrower sees it (None: the same).
    local: str | None = None
    # Services: "stream" when one request has many answers (a run's messages).
    responses: str = "singleton"
    window: str | None = None


def _reading(role: Role) -> tuple[Share, ...]:
    return (
        Share("service", f"{FOLLOW}.{role.value}", Role.HOST, role, local=FOLLOW),
        Share("stream", f"{DELIVER}.{role.value}.>", Role.HOST, role, local=f"{DELIVER}.>"),
    )


SHARES: tuple[Share, ...] = (
    Share("service", "cairn.cmd.>", Role.HOST, Role.GATEWAY, window=_RESPONSE_WINDOW),
    Share("service", "cairn.q.>", Role.HOST, Role.GATEWAY),
    *_reading(Role.GATEWAY),
    *_reading(Role.OBSERVER),
    Share("service", RUN, Role.RUNNER, Role.GATEWAY, responses="stream", window=_RUN_WINDOW),
    Share("service", CANCEL, Role.RUNNER, Role.GATEWAY),
    Share("service", RUNTIMES, Role.RUNNER, Role.GATEWAY),
)


def _export(share: Share) -> dict[str, object]:
    entry: dict[str, object] = {share.kind: share.subject, "accounts": [share.borrower.account]}
    if share.kind == "service" and share.responses != "singleton":
        entry["response_type"] = share.responses
    if share.window is not None:
        entry["response_threshold"] = share.window
    return entry


def _import(share: Share) -> dict[str, object]:
    entry: dict[str, object] = {
        share.kind: {"account": share.lender.account, "subject": share.subject}
    }
    if share.local is not None:
        entry["to"] = share.local
    return entry


def accounts_block(public_keys: Mapping[Role, str]) -> str:
    """The ``accounts`` block of a nats-server configuration: an account per role, with that
    role's key as its one user; nobody else may connect."""
    return accounts_block_for([public_keys])


def accounts_block_for(keyrings: Sequence[Mapping[Role, str]]) -> str:
    """:func:`accounts_block` letting in the keys of several keyrings (while keys rotate, the
    old and the new). JSON is valid NATS configuration syntax, and quoting keeps ``$JS...``
    from being read as a variable."""
    accounts: dict[str, dict[str, object]] = {}
    for role in Role:
        account: dict[str, object] = {
            "users": [
                {"nkey": keys[role], "permissions": PERMISSIONS[role].config()}
                for keys in keyrings
                if role in keys
            ]
        }
        if role is Role.HOST:
            account["jetstream"] = "enabled"
        exports = [_export(s) for s in SHARES if s.lender is role]
        imports = [_import(s) for s in SHARES if s.borrower is role]
        if exports:
            account["exports"] = exports
        if imports:
            account["imports"] = imports
        accounts[role.account] = account
    return "accounts " + json.dumps(accounts, indent=2) + "\n"
