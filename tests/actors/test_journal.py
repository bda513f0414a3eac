"""The journal's lines, event by event (golden): what an operator reads in the log."""

from __future__ import annotations

import logging

import pytest

from actors.functions.events import FunctionDeleted, version_stored
from actors.images.events import deleted, stored
from actors.search.events import (
    DocumentDismissed,
    DocumentIndexed,
    DocumentRemoved,
    IndexingProgress,
)
from actors.vm.events import Disowned, IdReserved, Progress, TaskEnded, TaskStarted
from events.model import Event
from events.store import Recorded
from gateway.server import journal as new_journal


def rec(stream: str, event: Event, at: float = 100.0) -> Recorded:
    return Recorded(1, stream, 1, event, at)


def test_a_failed_install_says_what_failed_and_after_how_long() -> None:
    journal = new_journal()
    start = TaskStarted(task="t1", command="install", working="installing")
    assert journal.line(rec("vm:120", start, 100.0)) is None
    end = TaskEnded(task="t1", ok=False, state="absent", error="qm create failed: no space")
    assert journal.line(rec("vm:120", end, 112.34)) == (
        "vm 120: install failed after 12.3 s, left absent: qm create failed: no space"
    )


def test_bookkeeping_is_not_journalled() -> None:
    journal = new_journal()
    progress = Progress(task="t", step="s", status="processing", message="m")
    assert journal.line(rec("vm:120", progress)) is None
    assert journal.line(rec("vmalloc:cluster", IdReserved(vmid=1, ip="x", task="t"))) is None


def progress(state: str, failed: int) -> IndexingProgress:
    return IndexingProgress(
        db="notes",
        state=state,
        queued=0,
        documents=1,
        chunks=3,
        embedded=3 - failed,
        pending=0,
        failed=failed,
        keyword_rate=0.0,
        embedding_rate=0.0,
        embedding_error="timeout" if failed else None,
    )


def test_the_other_services_changes() -> None:
    journal = new_journal()
    lines = [
        journal.line(rec("functions:registry", version_stored("a/b", 17, "python", "00", 42))),
        journal.line(rec("functions:registry", FunctionDeleted(path="a/b", versions=3))),
        journal.line(rec("search:notes", DocumentIndexed("notes", "a.md", "00", 3, 0))),
        journal.line(rec("search:notes", progress("embedding", failed=0))),
        journal.line(rec("search:notes", progress("idle", failed=0))),
        journal.line(rec("search:notes", progress("idle", failed=1))),
        journal.line(rec("search:notes", DocumentRemoved("notes", "a.md", 3))),
        journal.line(rec("search:notes", DocumentDismissed("notes", "x.bin", "unsupported"))),
        journal.line(rec("images:store", stored("cats/a.png", "image/png", 1234))),
        journal.line(rec("images:store", deleted("cats/a.png", "1-a.png"))),
    ]
    assert lines == [
        "function a/b: version 17 stored (python, 42 bytes)",
        "function a/b: deleted (3 versions)",
        "search notes: indexed a.md (3 chunks)",
        None,  # progress while a backlog drains is not a change worth a line
        "search notes: up to date (1 documents, 3 chunks, 3 embedded, 0 failed)",
        "search notes: up to date (1 documents, 3 chunks, 2 embedded, 1 failed);"
        " embedding failed: timeout",
        "search notes: removed a.md",
        "search notes: dismissed x.bin: unsupported",
        "images: stored cats/a.png (image/png, 1234 bytes)",
        "images: deleted cats/a.png",
    ]


def test_a_vm_found_without_cairns_mark_is_said_to_be_left_alone() -> None:
    event = Disowned(task="t1", reason="its description has no cairn mark")
    assert new_journal().line(rec("vm:150", event)) == (
        "vm 150: not cairn's VM, left untouched: its description has no cairn mark"
    )


def test_a_backlog_batch_is_one_line_not_one_per_file(caplog: pytest.LogCaptureFixture) -> None:
    journal = new_journal()
    batch = [
        rec("search:notes", DocumentIndexed("notes", f"d{i}.md", "00", 3, 0)) for i in range(500)
    ]
    batch.append(rec("search:notes", DocumentDismissed("notes", "x.bin", "unsupported")))
    few = [rec("search:notes", DocumentIndexed("notes", f"e{i}.md", "00", 2, 0)) for i in range(3)]
    with caplog.at_level(logging.INFO, logger="cairn.journal"):
        journal._appended(batch)
        journal._appended(few)
    assert [r.getMessage() for r in caplog.records] == [
        "search notes: indexed 500 files (1500 chunks), d0.md … d499.md",
        "search notes: dismissed x.bin: unsupported",
        "search notes: indexed e0.md (2 chunks)",
        "search notes: indexed e1.md (2 chunks)",
        "search notes: indexed e2.md (2 chunks)",
    ]
