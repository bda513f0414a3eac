"""A keyword stage process (the writer or the preparer) killed during a batch: nothing of the
batch was written, the files are offered again (in halves) to a new process and all indexed
once; a batch of one file during which it dies dismisses that file, which is indexed again once
it changes."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from actors.search.events import DocumentDismissed, DocumentIndexed
from actors.search.ingest.keyword_pipeline import PREPARER, WRITER
from tests.conftest import wait_for
from tests.search.conftest import SearchHarness

PROCESSES = pytest.mark.parametrize("name", [WRITER, PREPARER], ids=["writer", "preparer"])


def stage_pids(name: str) -> set[int]:
    """This process's children started by multiprocessing's spawn under `name`."""
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        ppid = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if int(ppid) == os.getpid() and b"spawn_main" in cmdline and comm == name:
            pids.add(int(entry.name))
    return pids


def has_database_open(pid: int) -> bool:
    """Whether `pid` has a search database open: each stage process opens it in its first
    batch, so that batch is then in flight (the writer is started before it has one)."""
    try:
        links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    except OSError:
        return False
    return any(link.endswith("index.sqlite") for link in links)


async def kill_when_busy(name: str, before: set[int]) -> None:
    """SIGKILL the process `name` once its first batch is in flight."""
    async with asyncio.timeout(60):
        while True:
            if busy := [pid for pid in stage_pids(name) - before if has_database_open(pid)]:
                break
            await asyncio.sleep(0.005)  # polling /proc for a process at work
    for pid in busy:
        os.kill(pid, signal.SIGKILL)


@PROCESSES
async def test_a_process_killed_during_a_batch_loses_no_file(
    harness: SearchHarness, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Enough files that preparing or writing them takes a few hundred ms: the kill, a few ms
    # after the process has its name, lands while its first batch is in flight.
    files = 2000
    harness.registry.add("notes")
    for i in range(files):
        harness.write(f"notes/f{i:04}.txt", f"file{i} " + "some words to index " * 30)
    before = stage_pids(name)
    await harness.start(EMBEDDING_PROVIDER="none")
    await kill_when_busy(name, before)

    body = await harness.until_indexed("notes", files)
    assert (body["queued"], body["chunks"]) == (0, files)
    which = "writer" if name == WRITER else "preparer"
    assert f"the keyword {which} process died" in caplog.text  # the kill hit a batch
    for i in (0, files // 2, files - 1):
        _, found = await harness.get("/api/search", db="notes", q=f"file{i}", target="keyword")
        assert [g["source"] for g in found["keyword"]] == [f"f{i:04}.txt"]
    stream = await harness.stopped_stream("notes")
    assert not [r for r in stream if isinstance(r.event, DocumentDismissed)]
    indexed_sources = [r.event.source for r in stream if isinstance(r.event, DocumentIndexed)]
    assert sorted(indexed_sources) == [f"f{i:04}.txt" for i in range(files)]


@PROCESSES
async def test_a_file_during_which_a_process_dies_alone_is_dismissed_until_it_changes(
    harness: SearchHarness, name: str
) -> None:
    harness.registry.add("notes")
    # Large enough (~2,000 chunks) that the kill lands while it is being prepared or written.
    harness.write("notes/only.txt", "first version of the only file. " * 60_000)
    before = stage_pids(name)
    await harness.start(EMBEDDING_PROVIDER="none")
    await kill_when_busy(name, before)
    dismissed = await harness.event("search.document_dismissed", "only.txt")
    which = "writer" if name == WRITER else "preparer"
    assert dismissed["reason"].startswith(f"indexing failed: the keyword {which} process died (")
    body = await harness.until_indexed("notes", 0)
    assert (body["documents"], body["chunks"], body["queued"]) == (0, 0, 0)

    # It heals: the file changed, a new process takes it.
    harness.write("notes/only.txt", "second version of the only file")
    assert (await harness.event("search.document_indexed", "only.txt"))["chunks"] == 1
    _, found = await harness.get("/api/search", db="notes", q="second", target="keyword")
    assert [g["source"] for g in found["keyword"]] == ["only.txt"]


@PROCESSES
async def test_a_process_killed_while_idle_costs_no_file(
    harness: SearchHarness, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Killed between batches (the OOM killer, an operator): the next batch never met it, so
    it is no verdict on that batch's files. A new process takes the batch."""
    harness.registry.add("notes")
    harness.write("notes/first.txt", "the first file")
    before = stage_pids(name)
    await harness.start(EMBEDDING_PROVIDER="none")
    await harness.event("search.document_indexed", "first.txt")
    (pid,) = stage_pids(name) - before
    os.kill(pid, signal.SIGKILL)
    # Reaped once the pool has seen it die.
    await wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=30, what="the reaping")
    harness.write("notes/second.txt", "the second file")
    assert (await harness.event("search.document_indexed", "second.txt"))["chunks"] == 1
    assert f"the {name} process had died while idle" in caplog.text
