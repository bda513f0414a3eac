"""The search service killed (`kill -9`) while its events trail its indexing (they are paced, a
few hundred a second): the documents are in the database, their events are not in the stream.
The next start compares the two and records what is missing, once, so the stream says what the
database holds: each file indexed once, each file removed once."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

from actors.search.events import DocumentIndexed, DocumentRemoved
from events.model import Event
from events.store import EventStore, default_store_url
from tests.conftest import wait_for
from tests.faults.conftest import Cairn, StartCairn, stray_processes
from tests.processes import cairn_run

FILES = 3000


async def status(cairn: Cairn) -> dict[str, Any]:
    async with cairn.session.get(cairn.url("search") + "/api/status?db=notes") as resp:
        assert resp.status == 200, await resp.text()
        body: dict[str, Any] = await resp.json()
        return body


async def stream(tmp_path: Path) -> list[Event]:
    store = await EventStore.open(default_store_url(tmp_path / "data"))
    try:
        return [record.event for record in await store.read_stream("search:notes")]
    finally:
        await store.close()


def indexed(events: list[Event]) -> Counter[str]:
    return Counter(e.source for e in events if isinstance(e, DocumentIndexed))


def removed(events: list[Event]) -> Counter[str]:
    return Counter(e.source for e in events if isinstance(e, DocumentRemoved))


async def killed_once(cairn: Cairn, settled: dict[str, int]) -> None:
    """SIGKILL `cairn` as soon as its status shows `settled` and nothing queued."""

    async def there() -> bool:
        now = await status(cairn)
        return now["state"] != "indexing" and all(now[k] == v for k, v in settled.items())

    await wait_for(there, timeout=60, what=f"the search status to show {settled}")
    assert await cairn.stop(signal.SIGKILL) == -signal.SIGKILL
    marker = str(cairn.log_path.parent)

    def indexer_processes() -> list[str]:
        return [line for line in stray_processes(marker) if "multiprocessing" in line]

    # They held the database open, waiting for a service that was gone.
    await wait_for(lambda: not indexer_processes(), timeout=10, what="its processes to end")


async def test_a_killed_search_service_records_what_its_stream_missed(
    start_cairn: StartCairn, tmp_path: Path
) -> None:
    cairn = await start_cairn("serve", "search")
    assert (await cairn_run("search", "add", "notes", env=cairn.env, cwd=tmp_path))[0] == 0
    inbox = tmp_path / "inbox" / "notes"
    await wait_for(lambda: inbox.is_dir(), timeout=30, what="the inbox of notes")
    names = [f"f{i:04}.txt" for i in range(FILES)]
    for i, name in enumerate(names):
        (inbox / name).write_text(f"word{i} and some text about granite")
    await killed_once(cairn, {"documents": FILES})
    before = indexed(await stream(tmp_path))
    assert len(before) < FILES, "every event was recorded before the kill: nothing to heal"

    cairn = await start_cairn("serve", "search")

    async def all_told() -> bool:
        return len(indexed(await stream(tmp_path))) == FILES

    await wait_for(all_told, timeout=60, what="the stream to tell every indexed file")
    assert indexed(await stream(tmp_path)) == Counter(names)  # each once: no file twice
    assert "the stream lacked" in cairn.log()

    # Files removed, the service killed again before their events were recorded.
    gone = names[: FILES // 3]
    for name in gone:
        (inbox / name).unlink()
    await killed_once(cairn, {"documents": FILES - len(gone)})
    assert len(removed(await stream(tmp_path))) < len(gone), "nothing left to heal"

    cairn = await start_cairn("serve", "search")

    async def all_removed() -> bool:
        return len(removed(await stream(tmp_path))) == len(gone)

    await wait_for(all_removed, timeout=60, what="the stream to tell every removed file")
    events = await stream(tmp_path)
    assert removed(events) == Counter(gone)
    assert indexed(events) == Counter(names)  # nothing indexed again
    _, hits = await cairn.request(
        "GET", cairn.url("search") + "/api/search?db=notes&q=word2999&target=keyword"
    )
    assert "f2999.txt" in hits
    assert await cairn.stop() == 0
