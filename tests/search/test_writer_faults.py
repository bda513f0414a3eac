"""The keyword writer process killed during a batch: nothing of the batch was written, the
files are offered again (in halves) to a new writer and all indexed once; a batch of one file
during which it dies dismisses that file, which is indexed again once it changes."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from actors.search.events import DocumentDismissed, DocumentIndexed
from tests.search.conftest import SearchHarness


def writer_pids() -> set[int]:
    """This process's children started by multiprocessing's spawn: the keyword writer."""
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if int(ppid) == os.getpid() and b"spawn_main" in cmdline:
            pids.add(int(entry.name))
    return pids


async def kill_the_writer_when_it_starts(before: set[int]) -> None:
    """SIGKILL the writer as soon as it exists: the batch submitted to it is in flight."""
    async with asyncio.timeout(60):
        while True:
            if new := writer_pids() - before:
                break
            await asyncio.sleep(0.005)  # polling /proc for a process that is being spawned
    for pid in new:
        os.kill(pid, signal.SIGKILL)


async def test_a_writer_killed_during_a_batch_loses_no_file(harness: SearchHarness) -> None:
    files = 300
    harness.registry.add("notes")
    for i in range(files):
        harness.write(f"notes/f{i:03}.txt", f"file{i} " + "some words to index " * 30)
    before = writer_pids()
    await harness.start(EMBEDDING_PROVIDER="none")
    await kill_the_writer_when_it_starts(before)

    body = await harness.until_indexed("notes", files)
    assert (body["queued"], body["chunks"]) == (0, files)
    for i in (0, files // 2, files - 1):
        _, found = await harness.get("/api/search", db="notes", q=f"file{i}", target="keyword")
        assert [g["source"] for g in found["keyword"]] == [f"f{i:03}.txt"]
    stream = await harness.stopped_stream("notes")
    assert not [r for r in stream if isinstance(r.event, DocumentDismissed)]
    indexed_sources = [r.event.source for r in stream if isinstance(r.event, DocumentIndexed)]
    assert sorted(indexed_sources) == [f"f{i:03}.txt" for i in range(files)]


async def test_a_file_during_which_the_writer_dies_alone_is_dismissed_until_it_changes(
    harness: SearchHarness,
) -> None:
    harness.registry.add("notes")
    harness.write("notes/only.txt", "first version of the only file")
    before = writer_pids()
    await harness.start(EMBEDDING_PROVIDER="none")
    await kill_the_writer_when_it_starts(before)
    dismissed = await harness.event("search.document_dismissed", "only.txt")
    assert dismissed["reason"].startswith("indexing failed: the keyword writer process died (")
    body = await harness.until_indexed("notes", 0)
    assert (body["documents"], body["chunks"], body["queued"]) == (0, 0, 0)

    # It heals: the file changed, a new writer indexes it.
    harness.write("notes/only.txt", "second version of the only file")
    assert (await harness.event("search.document_indexed", "only.txt"))["chunks"] == 1
    _, found = await harness.get("/api/search", db="notes", q="second", target="keyword")
    assert [g["source"] for g in found["keyword"]] == ["only.txt"]
