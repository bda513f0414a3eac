"""The actor runtime every domain actor uses.

Shape ("actors decide, jobs do"):

* An :class:`AggregateActor` is a pykka thread that owns one event stream. At start it replays
  the stream through :meth:`~AggregateActor.apply`, the only place its state changes.
* :meth:`~AggregateActor.handle` checks a command against the state, records the decision with
  :meth:`~AggregateActor.record` (applied at once, appended to the store in order) and may start
  slow work with :meth:`~AggregateActor.start_job`: a coroutine on the asyncio loop whose outcome
  comes back to ``handle`` as a message. A handler never blocks on I/O.
* The event loop talks to actors through an :class:`ActorHandle`: ``ask`` tells the actor a
  message carrying a reply callback, which resolves an asyncio future through
  ``call_soon_threadsafe``; the loop is never blocked and never awaits a pykka future. The reply
  is released only once the events the command recorded are stored.
* A job reports to its actor with :meth:`~AggregateActor.notify` (fire-and-forget), or, for a
  record that must be stored before the job goes on (a note written ahead of an outside
  change that recovery reads), with :meth:`~AggregateActor.confirmed`, which returns once
  everything the actor recorded until then is stored, and raises what refused it.

Errors:

* :class:`Rejected` from ``handle`` is an answer (a wrong state, a bad argument): the caller's
  ``ask`` raises it, the actor carries on.
* Any other exception from ``handle`` or ``apply``, or a failed append, means the in-memory
  state can no longer be trusted: the caller's ``ask`` raises it, the actor stops (pykka's
  ``on_failure``), and the :class:`ActorHost` starts a new one from the stored stream. Messages
  still queued for the dead actor are handed to the new one.

Faults:

* An append the store still refuses after its retries (:class:`StoreWriteFailed`: a lock held
  too long, a full disk) stops the actor with one log line and cancels its jobs. While the
  store refuses writes, asks to it fail at once with that error; once a probe write succeeds,
  it is started again from its stream and handed :meth:`AggregateActor.recovery`, so a task
  whose job was cancelled is settled (failed, cleaned up) exactly as after a crash.
* A stream that cannot be replayed (:class:`DamagedEvent`: a row that does not decode or
  apply) is quarantined: logged once with its stream, position and error; asks to the actor
  raise that error (503 naming the problem), tells are dropped; every other actor starts.
* :meth:`ActorHost.drain` waits, bounded, for running jobs at a graceful stop and says which.
* Another writer of the same stream (a second host on a shared store) makes an append fail
  with :class:`~events.store.ConcurrencyConflict`: the actor is reloaded from its stream (one
  INFO line, no traceback). A message listed in ``redecide_on_conflict`` (a decision from
  state alone, starting no job) is then handled again by the reloaded actor, up to
  ``REDECIDE_ATTEMPTS`` times, so its caller gets a decision made on the stream as it is;
  any other caller gets the conflict.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, ClassVar, TypeVar

import attrs
import pykka

from events.errors import CommandFailed, DamagedEvent, StoreWriteFailed
from events.model import Event
from events.store import ConcurrencyConflict, EventStore, Recorded
from events.subjects import stream_name

log = logging.getLogger(__name__)

ReplyCallback = Callable[[Any, BaseException | None], None]


class Rejected(CommandFailed):
    """A command refused by the actor's rules; ``status`` is the HTTP status it maps to.
    Raised from a ``serve_json`` handler, it reaches the caller of ``command`` as is."""


class ActorUnavailable(Exception):
    """The actor is not running and is not being restarted."""


class Fenced(CommandFailed):
    """This host may not write for the actor now: in cluster mode its lease on the actor's
    domain is stale (``events/leases.py``), and another host may own the stream."""

    def __init__(self, message: str) -> None:
        super().__init__(503, message)


@attrs.frozen(slots=True)
class _Envelope:
    message: Any
    reply: ReplyCallback | None
    # The reply waits for every append the actor has made, not only this message's.
    barrier: bool = False


@attrs.frozen(slots=True)
class _JobDone:
    done: Callable[[Any], Any]
    future: concurrent.futures.Future[Any]


@attrs.frozen(slots=True)
class _AppendFailed:
    error: BaseException


@attrs.frozen(slots=True)
class _Recover:
    """First message of an actor restarted after a failure."""

    reason: str


@attrs.frozen(slots=True)
class ActorContext:
    loop: asyncio.AbstractEventLoop
    store: EventStore
    host: ActorHost


class AggregateActor(pykka.ThreadingActor):
    """Base of every event-sourced actor. Subclasses set ``aggregate`` and implement ``apply``
    and ``handle``; extra constructor keywords given to ``ActorHost.spawn`` arrive in
    ``setup(**kwargs)``, which runs before the replay."""

    aggregate: ClassVar[str]
    # Message types whose handling is a decision from state alone (it records events and
    # starts no job): safe to handle again after a reload when another writer came first.
    redecide_on_conflict: ClassVar[tuple[type, ...]] = ()

    def __init__(
        self, ctx: ActorContext, ident: str, history: Sequence[Recorded], kwargs: dict[str, Any]
    ) -> None:
        super().__init__()
        self.ctx = ctx
        self.ident = ident
        self.stream = stream_name(self.aggregate, ident)
        self.version = 0
        self._jobs: set[concurrent.futures.Future[Any]] = set()
        self._appends: list[concurrent.futures.Future[Any]] = []
        self._last_append: concurrent.futures.Future[Any] | None = None
        self._append_failed = False
        self.setup(**kwargs)
        for record in history:
            try:
                self.apply(record.event)
            except Exception as exc:
                raise DamagedEvent(
                    self.stream,
                    record.position,
                    record.version,
                    record.event.type_name,
                    f"cannot be applied: {type(exc).__name__}: {exc}",
                ) from exc
            self.version = record.version

    # -- for subclasses ----------------------------------------------------------------------

    def setup(self, **kwargs: Any) -> None:
        """Take the dependencies given to ``spawn``; called before the replay."""
        if kwargs:
            raise TypeError(f"{type(self).__name__} takes no settings, got {sorted(kwargs)}")

    def apply(self, event: Event) -> None:
        """Change the state by one event. Must be a pure state transition: no I/O, no time."""
        raise NotImplementedError

    def handle(self, message: Any) -> Any:
        """Decide on a command or a job's outcome; return the reply."""
        raise NotImplementedError

    def recovery(self, reason: str) -> Any:
        """The message to handle first after a restart caused by a failure (``reason``
        says which), or None. Jobs of the failed actor were cancelled: this is where work
        they left unfinished is settled."""
        return None

    def record(self, *events: Event) -> None:
        """Apply ``events`` now and append them to this actor's stream (in call order).
        Raises :class:`Fenced`, recording nothing, while the host's fence forbids it."""
        if not events:
            # Nothing to append: an empty append would be done at once, ahead of the appends
            # still queued, and a reply waiting for it would come too early.
            return
        if (fenced := self.ctx.host.fenced(self.aggregate)) is not None:
            raise Fenced(f"{self.stream}: not recorded: {fenced}")
        expected = self.version
        for event in events:
            self.apply(event)
        self.version += len(events)
        future = asyncio.run_coroutine_threadsafe(
            self.ctx.store.append(self.stream, expected, events), self.ctx.loop
        )
        self._appends.append(future)
        self._last_append = future
        future.add_done_callback(self._check_append)

    def start_job(
        self,
        coro: Coroutine[Any, Any, Any],
        *,
        done: Callable[[Any], Any] | None = None,
        timer: bool = False,
    ) -> concurrent.futures.Future[Any]:
        """Run ``coro`` on the event loop. When it ends, ``done(result or exception)`` is
        called in this actor's thread and what it returns is handled as a message (``None``:
        nothing to handle). ``timer=True`` for a job that only waits (a retry's pause): a
        graceful stop does not wait for it."""
        future = asyncio.run_coroutine_threadsafe(coro, self.ctx.loop)
        self._jobs.add(future)
        if not timer:
            self.ctx.host.job_started(future, self.stream)

        def finished(f: concurrent.futures.Future[Any]) -> None:
            self._jobs.discard(f)
            if done is not None:
                with contextlib.suppress(pykka.ActorDeadError):
                    self.actor_ref.tell(_JobDone(done, f))

        future.add_done_callback(finished)
        return future

    def notify(self, message: Any) -> None:
        """Queue ``message`` for ``handle`` from any thread (a job's progress, say)."""
        with contextlib.suppress(pykka.ActorDeadError):
            self.actor_ref.tell(_Envelope(message, None))

    async def confirmed(self, message: Any) -> Any:
        """From a job, on the event loop: hand ``message`` to ``handle`` and return what it
        returned once everything this actor has recorded so far (what ``handle`` recorded for
        ``message`` included) is stored. Raises what refused it instead (``StoreWriteFailed``
        after the store's retries, ``Fenced``, an append's conflict), or ``ActorUnavailable``
        when the actor has stopped: a job that asks this must not go on unless it returns."""
        future, reply = _reply_future(asyncio.get_running_loop())
        try:
            self.actor_ref.tell(_Envelope(message, reply, barrier=True))
        except pykka.ActorDeadError:
            raise ActorUnavailable(f"{self.stream} is stopped: nothing more is stored") from None
        return await future

    # -- pykka hooks -------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, _Envelope):
            self._dispatch(message.message, message.reply, message.barrier)
        elif isinstance(message, _JobDone):
            outcome = _outcome(message.future)
            follow_up = message.done(outcome)
            if follow_up is not None:
                self._dispatch(follow_up, None)
        elif isinstance(message, _Recover):
            follow_up = self.recovery(message.reason)
            if follow_up is not None:
                self._dispatch(follow_up, None)
        elif isinstance(message, _AppendFailed):
            error = message.error
            if isinstance(error, StoreWriteFailed):
                # Expected under a fault, not a bug: one line, no traceback, then stop as
                # pykka does for a failure.
                log.error("%s: stopping: %s", self.stream, error.message)
            elif isinstance(error, ConcurrencyConflict):
                # Expected with several writers: our state is behind the stream.
                log.info("%s: another writer appended first: reloading", self.stream)
            else:
                raise error
            self._stop_failed(error)
        return None

    def _stop_failed(self, error: BaseException) -> None:
        """Stop as pykka does on a failure, without its traceback (an expected fault)."""
        pykka.ActorRegistry.unregister(self.actor_ref)
        self.actor_stopped.set()
        self._failed(error)

    def _dispatch(self, message: Any, reply: ReplyCallback | None, barrier: bool = False) -> None:
        self._appends = []
        try:
            value = self.handle(message)
        except Rejected as exc:
            self._reply_after_appends(reply, None, exc)
            return
        except Fenced as exc:
            if reply is not None:
                reply(None, exc)
            self._stop_failed(exc)
            return
        except Exception as exc:
            if reply is not None:
                reply(None, exc)
            raise
        self._reply_after_appends(reply, value, None, barrier)

    def _reply_after_appends(
        self,
        reply: ReplyCallback | None,
        value: Any,
        error: BaseException | None,
        barrier: bool = False,
    ) -> None:
        if reply is None:
            return
        pending = self._appends
        if not pending and barrier and self._last_append is not None:
            # Appends complete in the order they were made: the last one stands for them all.
            pending = [self._last_append]
        if not pending:
            reply(value, error)
            return

        # The append futures complete on the loop in submission order; the last one decides.
        def release(f: concurrent.futures.Future[Any]) -> None:
            if f.cancelled():  # the loop is going away: the events may not be stored
                reply(None, ActorUnavailable(f"{self.stream}: stopped before it was stored"))
                return
            exc = f.exception()
            reply(None, exc) if exc is not None else reply(value, error)

        pending[-1].add_done_callback(release)

    def _check_append(self, future: concurrent.futures.Future[Any]) -> None:
        exc = None if future.cancelled() else future.exception()
        if exc is not None:
            # Appends queued behind one that failed fail too (the stream is behind them):
            # the first failure alone is news. (Runs on the loop thread, as every append.)
            if self._append_failed:
                return
            self._append_failed = True
            if not isinstance(exc, StoreWriteFailed | ConcurrencyConflict):
                log.error("%s: append failed, restarting from the store: %s", self.stream, exc)
            with contextlib.suppress(pykka.ActorDeadError):
                self.actor_ref.tell(_AppendFailed(exc))

    def on_stop(self) -> None:
        self._cancel_jobs()

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._failed(exception_value)

    def _failed(self, error: BaseException | None) -> None:
        self._cancel_jobs()
        queued: list[_Envelope] = []
        while not self.actor_inbox.empty():
            envelope = self.actor_inbox.get()
            if isinstance(envelope.message, _Envelope):
                queued.append(envelope.message)
        self.ctx.host.crashed(type(self), self.ident, queued, error)

    def _cancel_jobs(self) -> None:
        for job in list(self._jobs):
            job.cancel()


def _reply_future(
    loop: asyncio.AbstractEventLoop,
) -> tuple[asyncio.Future[Any], ReplyCallback]:
    """A future on ``loop`` and the reply callback (called from any thread) that resolves it."""
    future: asyncio.Future[Any] = loop.create_future()

    def resolve(value: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if isinstance(error, StopIteration):
            # A future refuses StopIteration (it would end the awaiting coroutine's frame).
            error = RuntimeError(f"handler raised StopIteration: {error!r}")
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def reply(value: Any, error: BaseException | None) -> None:
        loop.call_soon_threadsafe(resolve, value, error)

    return future, reply


def _outcome(future: concurrent.futures.Future[Any]) -> Any:
    if future.cancelled():
        return asyncio.CancelledError()
    exc = future.exception()
    return exc if exc is not None else future.result()


A = TypeVar("A", bound=AggregateActor)


# How often a message in ``redecide_on_conflict`` is handled again after conflicts in a row.
REDECIDE_ATTEMPTS = 8


class ActorHandle:
    """The event loop's way to an actor; stays valid across restarts."""

    def __init__(self, host: ActorHost, cls: type[AggregateActor], ident: str) -> None:
        self._host = host
        self.cls = cls
        self.ident = ident
        self.ref: pykka.ActorRef[Any] | None = None
        self.ready = asyncio.Event()
        self.restarts = 0
        # Why the actor cannot take messages now (its stream is damaged, or the store refuses
        # writes until it restarts); None while it runs.
        self.unavailable: CommandFailed | None = None

    async def ask(self, message: Any) -> Any:
        attempt = 1
        while True:
            try:
                return await self._ask_once(message)
            except ConcurrencyConflict:
                if (
                    not isinstance(message, self.cls.redecide_on_conflict)
                    or attempt >= REDECIDE_ATTEMPTS
                ):
                    raise
                attempt += 1
                # Sent again: if it reaches the actor before its reload, it waits in the
                # dying actor's inbox, which the host hands to the reloaded one.

    async def _ask_once(self, message: Any) -> Any:
        future, reply = _reply_future(asyncio.get_running_loop())
        await self._deliver(_Envelope(message, reply))
        return await future

    async def tell(self, message: Any) -> None:
        """Queue ``message``; dropped (with a debug line) while the actor is unavailable:
        nobody waits for an answer, and its recovery re-reads what it may have missed."""
        try:
            await self._deliver(_Envelope(message, None))
        except CommandFailed as exc:
            if exc is not self.unavailable:
                raise
            log.debug("%s:%s: dropped %r: %s", self.cls.aggregate, self.ident, message, exc)

    async def _deliver(self, envelope: _Envelope) -> None:
        while True:
            await self.ready.wait()
            if self.unavailable is not None:
                raise self.unavailable
            ref = self.ref
            if ref is None:
                raise ActorUnavailable(f"{self.cls.aggregate}:{self.ident} is stopped")
            try:
                ref.tell(envelope)
                return
            except pykka.ActorDeadError:
                # It crashed between our check and the tell; the host is restarting it.
                self.ready.clear()
                if self._host.stopping:
                    raise ActorUnavailable(
                        f"{self.cls.aggregate}:{self.ident} is stopped"
                    ) from None


class ActorHost:
    """Starts actors from their stored streams and restarts the ones that crash."""

    def __init__(self, store: EventStore, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.store = store
        self.loop = loop or asyncio.get_running_loop()
        self.ctx = ActorContext(self.loop, store, self)
        self._handles: dict[tuple[type[AggregateActor], str], ActorHandle] = {}
        self._kwargs: dict[tuple[type[AggregateActor], str], dict[str, Any]] = {}
        self.stopping = False
        # Running jobs and the stream of the actor that started each (for drain); written
        # from actor threads, hence the lock.
        self._jobs: dict[concurrent.futures.Future[Any], str] = {}
        self._jobs_lock = threading.Lock()
        self._writable: asyncio.Task[None] | None = None
        # Why the store refuses writes, while actors wait for it to accept them again.
        self.store_refusal: str | None = None
        self._fences: dict[str, Callable[[], str | None]] = {}

    def fence(self, aggregates: Sequence[str], check: Callable[[], str | None]) -> None:
        """Make actors of ``aggregates`` record nothing while ``check()`` names a reason
        (cluster mode: the lease on their domain is stale). A fenced actor that fails is not
        restarted: whoever set the fence stops it, or lifts the fence."""
        for aggregate in aggregates:
            self._fences[aggregate] = check

    def fenced(self, aggregate: str) -> str | None:
        check = self._fences.get(aggregate)
        return check() if check is not None else None

    async def spawn(self, cls: type[A], ident: str | int, **kwargs: Any) -> ActorHandle:
        key = (cls, str(ident))
        handle = self._handles.get(key)
        if handle is not None:
            return handle
        handle = ActorHandle(self, cls, str(ident))
        self._handles[key] = handle
        self._kwargs[key] = kwargs
        await self._start(handle, [])
        return handle

    def get(self, cls: type[AggregateActor], ident: str | int) -> ActorHandle | None:
        return self._handles.get((cls, str(ident)))

    def handles(self, cls: type[AggregateActor]) -> list[ActorHandle]:
        return [h for (c, _), h in self._handles.items() if c is cls]

    def quarantined(self) -> dict[str, str]:
        """Streams that could not be replayed, and why."""
        return {
            f"{h.cls.aggregate}:{h.ident}": h.unavailable.message
            for h in self._handles.values()
            if isinstance(h.unavailable, DamagedEvent)
        }

    async def _start(
        self, handle: ActorHandle, queued: list[_Envelope], recovery: str | None = None
    ) -> None:
        key = (handle.cls, handle.ident)
        stream = stream_name(handle.cls.aggregate, handle.ident)
        try:
            history = await self.store.read_stream(stream)
            if self.stopping:
                # A restart that lost the race with stop_all: starting now would leave a
                # thread nobody stops.
                _refuse(queued, ActorUnavailable(f"{stream} stopped"))
                return
            actor = handle.cls.start(self.ctx, handle.ident, history, self._kwargs[key])
        except DamagedEvent as exc:
            log.error("%s", exc.message)  # names the stream, the row's position and why
            handle.unavailable = exc
            _refuse(queued, exc)
            handle.ready.set()
            return
        handle.ref = actor
        handle.unavailable = None
        if recovery is not None:
            actor.tell(_Recover(recovery))
        for envelope in queued:
            actor.tell(envelope)
        handle.ready.set()

    def crashed(
        self,
        cls: type[AggregateActor],
        ident: str,
        queued: list[_Envelope],
        error: BaseException | None = None,
    ) -> None:
        """Called from a dying actor's thread (its ``on_failure``)."""
        self.loop.call_soon_threadsafe(self._schedule_restart, cls, ident, queued, error)

    def _schedule_restart(
        self,
        cls: type[AggregateActor],
        ident: str,
        queued: list[_Envelope],
        error: BaseException | None,
    ) -> None:
        handle = self._handles.get((cls, ident))
        if handle is None or self.stopping:
            _refuse(queued, ActorUnavailable(f"{cls.aggregate}:{ident} stopped"))
            return
        if isinstance(error, Fenced):
            # Not restarted: another host may own the stream; the lease's loss stops it.
            log.warning("%s:%s stopped: %s", cls.aggregate, ident, error.message)
            handle.unavailable = error
            handle.ready.set()
            _refuse(queued, error)
            return
        handle.restarts += 1
        reason = f"{type(error).__name__}: {error}" if error is not None else "a failure"
        if isinstance(error, StoreWriteFailed):
            # Nothing it records can be stored yet: refuse its callers at once rather than
            # let them wait, and start it again when the store accepts writes.
            reason = error.message
            handle.unavailable = error
            handle.ready.set()  # a caller that met the dead actor is waiting: it gets the error
            _refuse(queued, error)
            self.loop.create_task(self._restart_when_writable(handle, reason))
            return
        handle.ready.clear()
        log.warning("restarting %s:%s from its stored events", cls.aggregate, ident)
        self.loop.create_task(self._start(handle, queued, recovery=reason))

    async def _restart_when_writable(self, handle: ActorHandle, reason: str) -> None:
        if self._writable is None or self._writable.done():
            self._writable = self.loop.create_task(self._until_writable())
        await asyncio.shield(self._writable)
        if self.stopping or self._handles.get((handle.cls, handle.ident)) is not handle:
            return
        handle.ready.clear()
        log.warning("restarting %s:%s from its stored events", handle.cls.aggregate, handle.ident)
        await self._start(handle, [], recovery=reason)

    async def _until_writable(self) -> None:
        pause, refused = 0.1, False
        while not self.stopping:
            try:
                await self.store.probe_writable()
            except StoreWriteFailed as exc:
                if not refused:
                    log.error("%s; actors restart once it accepts writes again", exc.message)
                refused = True
                self.store_refusal = exc.message
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
                continue
            if refused:
                log.warning("the event store accepts writes again")
            self.store_refusal = None
            return

    # -- jobs ----------------------------------------------------------------------------------

    def job_started(self, future: concurrent.futures.Future[Any], stream: str) -> None:
        """Called from an actor's thread for each job it starts."""
        with self._jobs_lock:
            self._jobs[future] = stream
        future.add_done_callback(self._job_done)

    def _job_done(self, future: concurrent.futures.Future[Any]) -> None:
        with self._jobs_lock:
            self._jobs.pop(future, None)

    def running_jobs(self) -> list[tuple[str, concurrent.futures.Future[Any]]]:
        with self._jobs_lock:
            return [(stream, f) for f, stream in self._jobs.items() if not f.done()]

    async def drain(self, grace: float, *, report_every: float = 2.0) -> list[str]:
        """Wait up to ``grace`` seconds for running jobs (and the jobs they lead to) to end,
        logging what is still running; returns the streams whose jobs are still running."""
        deadline = self.loop.time() + grace
        while True:
            running = self.running_jobs()
            if not running:
                return []
            streams = sorted({stream for stream, _ in running})
            left = deadline - self.loop.time()
            if left <= 0:
                return streams
            log.warning(
                "stopping: waiting up to %.0f s for %d running job(s): %s",
                left,
                len(running),
                ", ".join(streams),
            )
            waiting = [asyncio.wrap_future(f) for _, f in running]
            await asyncio.wait(waiting, timeout=min(left, report_every))

    async def stop(self, cls: type[AggregateActor], ident: str | int) -> None:
        handle = self._handles.pop((cls, str(ident)), None)
        if handle is None or handle.ref is None:
            return
        ref, handle.ref = handle.ref, None
        handle.ready.set()  # waiters see ref None and get ActorUnavailable
        await asyncio.to_thread(_stop_ref, ref)

    async def stop_all(self) -> None:
        self.stopping = True
        refs = [h.ref for h in self._handles.values() if h.ref is not None]
        for handle in self._handles.values():
            handle.ref = None
            handle.ready.set()
        self._handles.clear()

        def stop_refs() -> None:
            for ref in refs:
                _stop_ref(ref)

        await asyncio.to_thread(stop_refs)
        if self._writable is not None:
            self._writable.cancel()


def _refuse(queued: list[_Envelope], error: BaseException) -> None:
    for envelope in queued:
        if envelope.reply is not None:
            envelope.reply(None, error)


def _stop_ref(ref: pykka.ActorRef[Any]) -> None:
    try:
        ref.stop(block=True, timeout=10)
    except pykka.ActorDeadError:
        pass  # it crashed or stopped on its own: nothing to stop
    except pykka.Timeout:
        # A stop must finish; a thread that ignores it is reported, not waited for.
        log.warning("%s did not stop within 10 s", ref)
