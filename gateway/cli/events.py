"""`cairn events tail [SUBJECT] [--since …]`: print events live from JetStream, one line each.

SUBJECT narrows what is shown: a NATS subject (``cairn.evt.vm.>``), an aggregate (``vm``), an
aggregate and id (``vm.150``) or a stream name (``vm:150``); by default every event. ``--since``
starts earlier than now: a stream sequence (``--since 1200``: that event and every later one)
or a duration (``--since 5m``; ``s``, ``m``, ``h``, ``d``). The NATS server is ``NATS_URL``, or
the embedded server of the cairn running on ``CAIRN_DATA`` (it writes its URL into its store
directory). Each line: the time the event was stored, its stream sequence, subject, type, and
its fields as ``key=value``, long values cut short. Ctrl-C ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import re
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import attrs
from nats.aio.msg import Msg

from actors.config import ConfigError, data_dir, env_str
from events.access import NatsAccess
from events.credentials import Keyring
from events.follow import Follower
from events.nats_server import KEYS_DIR, URL_FILE
from events.permissions import Role
from events.signing import SIG_HEADER, EventSigner
from events.subjects import EVENT_SUBJECT_PREFIX, subject_for

FIELD_WIDTH = 40
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@attrs.frozen
class Start:
    """Where tailing starts: after a stream sequence, at a time, or (neither) at new events."""

    after: int | None = None
    since: datetime.datetime | None = None


def parse_since(text: str | None, now: datetime.datetime) -> Start:
    if text is None:
        return Start()
    if text.isdigit():
        seq = int(text)
        if seq < 1:
            raise ValueError("--since: a stream sequence starts at 1")
        return Start(after=seq - 1)
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(
            f"--since: {text!r} is neither a stream sequence (1200) "
            "nor a duration (30s, 5m, 2h, 1d)"
        )
    seconds = float(match.group(1)) * _UNIT[match.group(2)]
    return Start(since=now - datetime.timedelta(seconds=seconds))


def subject_filter(text: str | None) -> str:
    """The NATS subject a SUBJECT argument names."""
    if not text:
        return f"{EVENT_SUBJECT_PREFIX}.>"
    if text.startswith(f"{EVENT_SUBJECT_PREFIX}.") or text == EVENT_SUBJECT_PREFIX:
        return text
    if ":" in text:
        return subject_for(text)
    if "." in text:
        return f"{EVENT_SUBJECT_PREFIX}.{text}"
    return f"{EVENT_SUBJECT_PREFIX}.{text}.>"


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    text = text.replace("\n", " ")
    return text if len(text) <= FIELD_WIDTH else text[: FIELD_WIDTH - 1] + "…"


def event_line(seq: int, subject: str, body: Mapping[str, Any], mark: str = "") -> str:
    """One printed line for one event; ``mark`` (``UNSIGNED``, ``FORGED``) goes before its
    type."""
    at = body.get("recorded_at")
    when = (
        datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        + "Z"
        if isinstance(at, int | float)
        else "-"
    )
    data = body.get("data")
    fields = (
        " ".join(f"{key}={_short(value)}" for key, value in data.items() if value is not None)
        if isinstance(data, dict)
        else ""
    )
    kind = f"{mark} {body.get('type', '?')}" if mark else str(body.get("type", "?"))
    return f"{when} {seq:>8} {subject} {kind} {fields}".rstrip()


def signature_mark(msg: Msg, signer: EventSigner | None) -> str:
    """What a reader must know of an event's signature: ``FORGED`` when this keyring holds the
    events key and the signature is missing or wrong; without the key (an observer's copy:
    the key signs, so it is not handed to readers) ``UNSIGNED`` when there is no signature at
    all. Empty for an event that is, or may be, genuine."""
    if signer is not None:
        return "" if signer.genuine(msg) else "FORGED"
    return "" if (msg.headers or {}).get(SIG_HEADER) else "UNSIGNED"


def nats_url(env: Mapping[str, str]) -> str:
    url = env_str(env, "NATS_URL")
    if url is not None:
        return url
    path = data_dir(env) / "nats" / URL_FILE
    try:
        return path.read_text().strip()
    except OSError:
        raise ConfigError(
            "NATS_URL", f"is not set and no cairn runs on this data directory ({path} is missing)"
        ) from None


def observer_access(env: Mapping[str, str]) -> NatsAccess:
    """How ``cairn events tail`` reaches NATS: ``NATS_URL`` or the URL the embedded server of
    this data directory wrote, as the read-only ``observer`` role, with the keyring of
    ``NATS_KEYS`` or of this data directory (its ``observer.nk`` is all it needs)."""
    url = nats_url(env)
    keys = env_str(env, "NATS_KEYS")
    if keys is not None and keys.lower() == "none":
        return NatsAccess(url, None, _ca(env))
    keyring = Keyring(Path(keys) if keys is not None else data_dir(env) / "nats" / KEYS_DIR)
    if not keyring.has(Role.OBSERVER):
        raise ConfigError(
            "NATS_KEYS",
            f"{keyring.path} holds no observer key (observer.nk): give the directory of "
            "cairn's NATS keys, or a copy of its observer.nk alone",
        )
    return NatsAccess(url, keyring, _ca(env))


def _ca(env: Mapping[str, str]) -> Path | None:
    ca = env_str(env, "NATS_CA")
    return Path(ca) if ca is not None else None


async def tail(access: NatsAccess, subject: str, start: Start, out: TextIO = sys.stdout) -> None:
    nc = await access.connect(Role.OBSERVER, name="cairn events tail")
    signer = access.signer()

    async def show(seq: int, msg: Msg) -> None:
        try:
            body = json.loads(msg.data)
        except ValueError:
            body = {}
        mark = signature_mark(msg, signer)
        print(event_line(seq, msg.subject, body, mark), file=out, flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with Follower(nc, subject, show, after=start.after, since=start.since):
            await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


def cmd_tail(args: Any, env: Mapping[str, str]) -> int:
    try:
        start = parse_since(args.since, datetime.datetime.now(datetime.UTC))
    except ValueError as exc:
        print(f"cairn: {exc}", file=sys.stderr)
        return 2
    access = observer_access(env)
    try:
        asyncio.run(tail(access, subject_filter(args.subject), start))
    except Exception as exc:
        print(
            f"cairn: cannot tail events from {access.shown_url}: {exc or type(exc).__name__}",
            file=sys.stderr,
        )
        return 1
    return 0


def register(subparsers: Any) -> None:
    events = subparsers.add_parser("events", help="the event stream: tail")
    sub = events.add_subparsers(dest="events_command", required=True)
    tailing = sub.add_parser("tail", help="print events live from JetStream, one line each")
    tailing.add_argument(
        "subject", nargs="?", help="cairn.evt.vm.>, vm, vm.150 or vm:150 (default: every event)"
    )
    tailing.add_argument("--since", help="a stream sequence (1200) or a duration (30s, 5m, 2h, 1d)")
    tailing.set_defaults(handler=cmd_tail)
