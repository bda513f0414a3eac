"""The subscriber of docs/events.md, run as written (its server and seed file filled in) as the
observer role of a running cairn: it prints the events a host publishes. The same program with
no key is refused: the docs show where the key comes from."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from pathlib import Path

from actors.platform import Runtime
from events.permissions import Role
from tests.events.sample_events import Incremented

DOC = Path(__file__).resolve().parents[2] / "docs" / "events.md"


def documented_subscriber() -> str:
    text = DOC.read_text()
    section = text[text.index("## A subscriber of your own") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "docs/events.md has no python block under 'A subscriber of your own'"
    return match.group(1)


async def run(program: str, tmp_path: Path) -> asyncio.subprocess.Process:
    script = tmp_path / "subscriber.py"
    script.write_text(program)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_the_documented_subscriber_reads_events_as_observer(
    runtime: Runtime, tmp_path: Path
) -> None:
    assert runtime.bus.keyring is not None
    program = documented_subscriber()
    assert '"nats://127.0.0.1:4222"' in program and 'nkeys_seed="observer.nk"' in program
    program = program.replace('"nats://127.0.0.1:4222"', repr(runtime.nats_url))
    program = program.replace('"cairn.evt.vm.>"', '"cairn.evt.counter.>"')
    # The operator hands out observer.nk alone.
    (tmp_path / "observer.nk").write_text(runtime.bus.keyring.seed(Role.OBSERVER))
    proc = await run(program, tmp_path)
    assert proc.stdout is not None
    try:
        line = b""
        for version in range(200):  # until the subscriber has its consumer and prints
            await runtime.store.append("counter:3", version, [Incremented(version)])
            with contextlib.suppress(TimeoutError):
                line = await asyncio.wait_for(proc.stdout.readline(), 0.25)
            if line:
                break
        assert b"counter:3 test.incremented" in line, line
    finally:
        proc.kill()
        await proc.wait()


async def test_without_the_key_it_is_refused(runtime: Runtime, tmp_path: Path) -> None:
    program = documented_subscriber()
    # The same connect without its key and inbox prefix.
    program = re.sub(
        r"nats\.connect\(.*?_INBOX_observer\"\)",
        f"nats.connect({runtime.nats_url!r}, allow_reconnect=False)",
        program,
        flags=re.S,
    )
    assert "nkeys_seed" not in program
    proc = await run(program, tmp_path)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode != 0
    assert b"Authorization Violation" in err
