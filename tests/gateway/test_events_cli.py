"""`cairn events tail`: its arguments, its lines, and a real `cairn` process printing events
live from JetStream."""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
from pathlib import Path

import pytest
from nats.aio.msg import Msg

from events.access import NatsAccess
from events.consumers import ConsumerBroker
from events.nats_server import EmbeddedNats
from events.relay import OutboxRelay
from events.signing import SIG_HEADER, EventSigner
from events.store import EventStore
from gateway.cli.events import Start, event_line, parse_since, signature_mark, subject_filter
from tests.events.sample_events import Incremented, Noted
from tests.processes import cairn_run, cairn_start

NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.UTC)


def access_of(server: EmbeddedNats) -> NatsAccess:
    return NatsAccess(server.url, server.keyring)


def test_since_is_a_sequence_or_a_duration() -> None:
    assert parse_since(None, NOW) == Start()
    assert parse_since("1200", NOW) == Start(after=1199)
    assert parse_since("5m", NOW) == Start(since=NOW - datetime.timedelta(minutes=5))
    assert parse_since("1.5h", NOW) == Start(since=NOW - datetime.timedelta(minutes=90))
    for bad in ("0", "5 minutes", "-3", "m"):
        with pytest.raises(ValueError, match="--since"):
            parse_since(bad, NOW)


def test_the_subject_argument() -> None:
    assert subject_filter(None) == "cairn.evt.>"
    assert subject_filter("vm") == "cairn.evt.vm.>"
    assert subject_filter("vm.150") == "cairn.evt.vm.150"
    assert subject_filter("vm:150") == "cairn.evt.vm.150"
    assert subject_filter("fn:a/b") == "cairn.evt.fn.a~2Fb"
    assert subject_filter("cairn.evt.images.*") == "cairn.evt.images.*"


def test_one_line_per_event_with_short_fields() -> None:
    body = {
        "type": "vm.progress",
        "recorded_at": datetime.datetime(2026, 11, 24, 9, 20, tzinfo=datetime.UTC).timestamp()
        + 0.25,
        "data": {"step": "preparation", "message": "x" * 100, "ip": None, "n": [1, 2]},
    }
    line = event_line(42, "cairn.evt.vm.150", body)
    assert line.startswith("2026-11-24T09:20:00.250Z       42 cairn.evt.vm.150 vm.progress ")
    assert "step=preparation" in line and "n=[1,2]" in line and "ip=" not in line
    assert f"message={'x' * 39}…" in line


async def read_lines(stream: asyncio.StreamReader, n: int) -> list[str]:
    lines: list[str] = []
    async with asyncio.timeout(20):
        while len(lines) < n:
            line = await stream.readline()
            assert line, "cairn events tail ended early"
            lines.append(line.decode().rstrip("\n"))
    return lines


async def test_cairn_events_tail_prints_events_live(
    store: EventStore, nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    nc = await nats_server.connect()
    assert nats_server.keyring is not None
    relay = OutboxRelay(store, nc, signer=access_of(nats_server).signer())
    await relay.start()
    # A running cairn's hosts make the consumers readers ask for.
    broker = await ConsumerBroker(nc).start()
    await store.append("counter:a", 0, [Incremented(1)])
    await store.append("note:x", 0, [Noted("before")])
    # No NATS_URL: the embedded server of the cairn on CAIRN_DATA (its store is <data>/nats).
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    env["CAIRN_DATA"] = str(tmp_path)
    tail = ("events", "tail", "note", "--since", "1")
    proc = await cairn_start(*tail, env=env, cwd=tmp_path, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        first = await read_lines(proc.stdout, 1)
        await store.append("note:x", 1, [Noted("live", tags=("a",))])
        second = await read_lines(proc.stdout, 1)
        # Published by a host's key but not signed with the events key: this keyring holds
        # the key, so the line says the event is forged.
        await nc.jetstream().publish("cairn.evt.note.x", b'{"type":"test.noted"}')
        third = await read_lines(proc.stdout, 1)
    finally:
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        await broker.stop()
        await relay.stop()
        await nc.close()
    assert " 2 cairn.evt.note.x test.noted text=before" in first[0]
    assert ' 3 cairn.evt.note.x test.noted text=live tags=["a"]' in second[0]
    assert third[0].endswith(" 4 cairn.evt.note.x FORGED test.noted"), third


def test_a_reader_without_the_events_key_marks_unsigned_events() -> None:
    """An observer's keyring has no events key (it would let its holder sign): it cannot
    check a signature, but it shows an event that carries none as UNSIGNED."""
    signer = EventSigner(b"k" * 32)
    body = b'{"type":"vm.progress"}'

    def msg(headers: dict[str, str]) -> Msg:
        return Msg(None, "cairn.evt.vm.1", "", body, headers)  # type: ignore[arg-type]

    signed = msg({SIG_HEADER: signer.sign("cairn.evt.vm.1", body)})
    bare, wrong = msg({}), msg({SIG_HEADER: "00" * 32})
    assert [signature_mark(m, None) for m in (signed, bare, wrong)] == ["", "UNSIGNED", ""]
    assert [signature_mark(m, signer) for m in (signed, bare, wrong)] == ["", "FORGED", "FORGED"]
    line = event_line(7, "cairn.evt.vm.1", {"type": "vm.progress"}, "UNSIGNED")
    assert line == "-        7 cairn.evt.vm.1 UNSIGNED vm.progress"


async def test_tail_without_a_server_says_so(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    env["CAIRN_DATA"] = str(tmp_path)
    status, _, err = await cairn_run("events", "tail", env=env, cwd=tmp_path, timeout=20)
    assert status == 2
    assert "NATS_URL" in err and "no cairn runs on this data directory" in err
