"""The keyword stage in two processes, a batch apart: while the writer writes one batch, the
preparer reads, parses, chunks and tokenises the next.

In one process the stage did both halves one after the other, and the preparing half was
most of it (per 100,000 chunks of the benchmark's corpus: ~4.1 s tokenising, ~0.9 s reading
and parsing, ~3.3 s writing), so a backlog drained at ~14,000 chunks/s with a core to spare.
Overlapped, the stage is bound by the slower half.

What runs where:
- `Pipeline.index` (this process) asks the preparer for a batch (`keyword_stage.prepare`),
  hands it to the writer (`keyword_stage.write_prepared`), and meanwhile has the preparer
  work on the sources the writer will not reach, cut for the chunk id the writer's batch ends
  at. The indexer actor puts those sources back at the head of its queue, so its next call
  begins with them and takes the prepared batch; a call that begins otherwise drops it. The
  writer checks every prepared file before writing it (`Prepared.fresh`): a file that changed
  meanwhile is prepared again, never written stale.
- A prepared batch goes from the preparer to the writer as a file in `handoff/` beside the
  database, not through this process: unpickling and pickling a block's texts and postings
  here would hold the GIL the queries this process answers need (~40 ms per block). The
  files are ours, written by the preparer and read once by the writer; whatever is left of
  them when the service stops or starts is deleted.

Both end with the service, also when it is killed. Either process dying (killed, out of
memory, a parser crash) fails the call with `StageProcessDied`, which says which one; the
next call starts a new process. The indexer offers that batch again in halves. Both processes
run `WRITER_NICE` below the service and are named (`/proc/<pid>/comm`) so an operator's `top`
tells them apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TypeVar

import attrs

from actors.search.index.store import Database, Reader
from actors.search.ingest import keyword_stage
from actors.search.ingest.keyword_stage import IndexReport
from actors.search.priority import WRITER_NICE, lower_this_thread

log = logging.getLogger(__name__)

WRITER = "cairn-kw-writer"
PREPARER = "cairn-kw-prep"
# Seconds both processes wait for the next batch before they end. After a backlog each holds
# what its largest batch needed (180-260 MB each after 100,000 chunks, measured), which an
# inbox that changes now and then should not keep; the next batch starts them again (~0.5 s).
IDLE_SECONDS = 60.0


_T = TypeVar("_T")


class StageProcessDied(BrokenProcessPool):
    """A process of the keyword stage died during a call (the message says which)."""


@attrs.frozen
class Handoff:
    """A prepared batch, waiting in a file for the writer: what this process needs of it."""

    path: str
    sources: tuple[str, ...]
    chunks: int
    next_id: int


class Pipeline:
    """The keyword stage of one database. `index` is called once at a time (the indexer
    actor's keyword job); `close` ends both processes."""

    def __init__(self, database: Path, inbox: Path, name: str) -> None:
        self.database = database
        self.inbox = inbox
        self.name = name
        self.handoff_dir = database.parent / "handoff"
        self.handoff_dir.mkdir(exist_ok=True)
        self._clear_handoffs()
        self._processes: dict[str, ProcessPoolExecutor] = {}  # by name: PREPARER, WRITER
        self._ahead: asyncio.Task[Handoff] | None = None
        self._idle: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        """Start both processes now rather than with the first batch."""
        pools = [await self._process(PREPARER), await self._process(WRITER)]
        await asyncio.gather(*(asyncio.wrap_future(pool.submit(int)) for pool in pools))

    async def _process(self, name: str) -> ProcessPoolExecutor:
        pool = self._processes.get(name)
        if pool is None:
            pool = self._processes[name] = await asyncio.to_thread(_start_process, name)
        return pool

    async def index(self, sources: Sequence[str]) -> IndexReport:
        """Bring `sources` up to date in one transaction, in order, as far as the keyword
        block allows; the report's `rest` is those not reached (their preparation is under
        way for the next call)."""
        started = time.perf_counter()
        sources = tuple(sources)
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        await self._process(WRITER)  # started first: its imports overlap the preparation
        handoff = await self._take_ahead(sources) or await self._prepare(sources, None)
        ahead = sources[len(handoff.sources) :]
        if ahead:
            self._ahead = asyncio.create_task(
                self._prepare(ahead, handoff.next_id + handoff.chunks), name="keyword lookahead"
            )
            self._ahead.add_done_callback(_retrieve)
        try:
            job = (str(self.database), str(self.inbox), self.name, handoff.path)
            report = await self._call(WRITER, write_in_writer, *job)
        except BaseException:
            self._drop_ahead()
            _unlink(handoff.path)
            raise
        finally:
            if self._ahead is None:  # no batch prepared ahead: maybe the last for a while
                self._idle = asyncio.get_running_loop().call_later(IDLE_SECONDS, self._rest)
        return attrs.evolve(report, rest=report.rest + ahead, seconds=time.perf_counter() - started)

    def _rest(self) -> None:
        """End both processes after `IDLE_SECONDS` without a batch (the next one starts
        them again)."""
        self._idle = None
        self._end_processes(wait=False)
        log.debug("search %s: keyword stage processes ended, idle", self.name)

    def close(self) -> None:
        """End both processes (blocking) and delete the batches they left."""
        self._ahead = None
        self._end_processes(wait=True)
        self._clear_handoffs()

    def _end_processes(self, *, wait: bool) -> None:
        pools, self._processes = list(self._processes.values()), {}
        for pool in pools:
            pool.shutdown(wait=wait, cancel_futures=True)

    async def _take_ahead(self, sources: tuple[str, ...]) -> Handoff | None:
        """The batch prepared ahead, if `sources` begin with it."""
        task, self._ahead = self._ahead, None
        if task is None:
            return None
        try:
            handoff = await task
        except Exception as exc:
            # Prepared again now: a file that kills the preparer does so again, in the call
            # that offers it, where the indexer can tell which batch it was in.
            log.debug("search %s: the batch prepared ahead failed: %r", self.name, exc)
            return None
        if handoff.sources and sources[: len(handoff.sources)] == handoff.sources:
            return handoff
        _unlink(handoff.path)
        return None

    def _drop_ahead(self) -> None:
        task, self._ahead = self._ahead, None
        if task is not None:
            task.add_done_callback(_discard)

    async def _prepare(self, sources: tuple[str, ...], next_id: int | None) -> Handoff:
        job = (str(self.database), str(self.inbox), str(self.handoff_dir), sources, next_id)
        handoff: Handoff = await self._call(PREPARER, prepare_in_preparer, *job)
        return handoff

    async def _call(self, name: str, fn: Callable[..., _T], *args: object) -> _T:
        """`fn(*args)` in the process `name`. One that died while idle (killed, out of
        memory) is found at the submit and replaced: that is no verdict on this batch, which
        it never saw. One that dies during the call fails it with `StageProcessDied`."""
        pool = await self._process(name)
        try:
            future = pool.submit(fn, *args)
        except BrokenProcessPool:
            log.warning(
                "search %s: the %s process had died while idle; starting another", self.name, name
            )
            del self._processes[name]
            future = (await self._process(name)).submit(fn, *args)
        try:
            return await asyncio.wrap_future(future)
        except BrokenProcessPool as exc:
            self._processes.pop(name, None)
            which = "writer" if name == WRITER else "preparer"
            raise StageProcessDied(f"the keyword {which} process died ({exc})") from exc

    def _clear_handoffs(self) -> None:
        for path in self.handoff_dir.glob("*.pickle"):
            _unlink(str(path))


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _retrieve(task: asyncio.Task[Handoff]) -> None:
    # Nobody may await a dropped lookahead: its failure is not news (it is prepared again).
    if not task.cancelled():
        task.exception()


def _discard(task: asyncio.Task[Handoff]) -> None:
    if not task.cancelled() and task.exception() is None:
        _unlink(task.result().path)


# -- in the processes -----------------------------------------------------------------------

_readers: dict[str, Reader] = {}
_databases: dict[str, Database] = {}
_handoffs = itertools.count()


def prepare_in_preparer(
    database: str, inbox: str, handoff_dir: str, sources: tuple[str, ...], next_id: int | None
) -> Handoff:
    """`keyword_stage.prepare` in the preparer, its batch written to a handoff file."""
    reader = _readers.get(database)
    if reader is None:
        reader = _readers[database] = Reader(Path(database))
    prepared = keyword_stage.prepare(reader, Path(inbox), sources, next_id)
    path = Path(handoff_dir) / f"{os.getpid()}-{next(_handoffs)}.pickle"
    with path.open("wb") as out:
        # The writer reports what it did not reach of the batch; the rest offered to the
        # preparer is the caller's to count.
        pickle.dump(attrs.evolve(prepared, rest=()), out, protocol=pickle.HIGHEST_PROTOCOL)
    return Handoff(str(path), prepared.sources, prepared.chunks, prepared.next_id)


def write_in_writer(database: str, inbox: str, name: str, handoff: str) -> IndexReport:
    """`keyword_stage.write_prepared` in the writer, on a database kept open between
    batches."""
    with open(handoff, "rb") as batch:
        prepared: keyword_stage.Prepared = pickle.load(batch)
    _unlink(handoff)
    db = _databases.get(database)
    if db is None:
        db = _databases[database] = Database(Path(database))
    return keyword_stage.write_prepared(db, Path(inbox), name, prepared)


def _start_process(name: str) -> ProcessPoolExecutor:
    """A process of the stage, started `WRITER_NICE` below the service. Spawning blocks the
    caller (~10 ms, measured on the event loop while a backlog's first query waited): call
    it off the loop. It is spawned from a throwaway thread lowered first, so the process is
    niced from its first instruction (its imports included), as is the pool's result thread,
    which the same thread starts, and the service's own threads are not."""
    with ThreadPoolExecutor(
        1, f"{name} start", initializer=lower_this_thread, initargs=(WRITER_NICE,)
    ) as starter:
        return starter.submit(_spawn, name).result()


def _spawn(name: str) -> ProcessPoolExecutor:
    pool = ProcessPoolExecutor(
        1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_in_stage_process,
        initargs=(name,),
    )
    pool.submit(int)  # a spawned pool starts its process on the first submit
    return pool


def _in_stage_process(name: str) -> None:
    """Name this process, and end it when the service dies. A pool's worker waits on a
    queue whose writing end it holds itself, so a killed service (`kill -9`, a crash) left
    both processes waiting for ever, the database open. The kernel's parent-death signal
    would follow the thread that spawned them, which is a throwaway one."""
    with contextlib.suppress(OSError):
        Path("/proc/self/comm").write_text(name)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(
            target=_end_with, args=(parent.sentinel,), name="parent watch", daemon=True
        ).start()


def _end_with(parent_sentinel: int) -> None:
    multiprocessing.connection.wait([parent_sentinel])
    os._exit(0)
