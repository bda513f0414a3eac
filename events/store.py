"""The event store: append-only streams over SQLAlchemy async (SQLite WAL by default).

Each stream (``"<aggregate>:<id>"``) is a sequence of versions 1, 2, 3, …; ``append`` takes the
version the writer last saw and fails with :class:`ConcurrencyConflict` if someone else wrote in
between (a unique ``(stream, version)`` key makes that true across processes and databases too).
Every row also gets a global ``position``: the outbox relay publishes in that order.

Faults, as the interface promises them (another implementation must keep the same promises):

* A write that fails for a passing reason (another client holds SQLite's write lock, an I/O
  error, a full disk) is retried with growing pauses for ``retry.budget`` seconds, counted from
  the call; then it raises :class:`~events.errors.StoreWriteFailed` (503, or 507 for a full
  disk) with a plain reason. :meth:`EventStore.probe_writable` tells when writes work again.
* A row that cannot be decoded raises :class:`~events.errors.DamagedEvent` naming its stream,
  position and error from :meth:`read_stream`; :meth:`read_page` steps over it and reports it,
  and :meth:`check` lists every such row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs
import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from events.codec import decode_stored, encode
from events.errors import DamagedEvent, StoreWriteFailed, disk_full, reason
from events.model import Event
from events.retry import RetryPolicy, retry_within
from events.stamp import check_and_stamp
from events.subjects import stream_name
from events.upcast import MissingUpcaster, SchemaNewerThanCairn

__all__ = [
    "ConcurrencyConflict",
    "DamagedEvent",
    "EventStore",
    "EventStoreError",
    "Page",
    "Recorded",
    "RetryPolicy",
    "StoreWriteFailed",
    "default_store_url",
    "stream_name",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class EventStoreError(Exception):
    """Base of the store's errors."""


class ConcurrencyConflict(EventStoreError):
    """Another writer appended to the stream after the version this writer read."""

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        super().__init__(
            f"stream {stream!r} is at version {actual}, not {expected}: "
            "another writer appended first; reload the stream and decide again"
        )
        self.stream = stream
        self.expected = expected
        self.actual = actual


@attrs.frozen(slots=True)
class Recorded:
    """An event as stored: where it sits globally and in its stream."""

    position: int
    stream: str
    version: int
    event: Event
    recorded_at: float


metadata = sa.MetaData()
events_table = sa.Table(
    "events",
    metadata,
    sa.Column("position", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("stream", sa.String(400), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("type", sa.String(200), nullable=False),
    sa.Column("schema", sa.Integer, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Column("recorded_at", sa.Float, nullable=False),
    sa.UniqueConstraint("stream", "version", name="uq_stream_version"),
    sqlite_autoincrement=True,
)
cursors_table = sa.Table(
    "cursors",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("position", sa.Integer, nullable=False),
)

AppendListener = Callable[[list[Recorded]], None]

# Built once: SQLAlchemy derives a cache key from every new statement object.
_INSERT = events_table.insert()
_INSERT_RETURNING = events_table.insert().returning(
    events_table.c.position, sort_by_parameter_order=True
)


def default_store_url(data_dir: Path) -> str:
    return f"sqlite+aiosqlite:///{data_dir / 'events.sqlite3'}"


@attrs.frozen(slots=True)
class Page:
    """A run of the global order: the events that decode, the rows that do not, and the last
    position looked at (where the next page starts, even when every row of this one was bad)."""

    records: list[Recorded]
    damaged: list[DamagedEvent]
    last_position: int


def _row_to_recorded(row: Any) -> Recorded:
    position, stream, version, type_name, schema, data, recorded_at = tuple(row)
    try:
        event = decode_stored(type_name, schema, data)
    except Exception as exc:
        raise DamagedEvent(stream, position, version, type_name, _decode_error(exc)) from exc
    return Recorded(position, stream, version, event, recorded_at)


def _decode_error(exc: Exception) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc)) or str(exc)
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    if isinstance(exc, SchemaNewerThanCairn | MissingUpcaster):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _transient(exc: BaseException) -> bool:
    """Worth another try: the database is locked or busy, the disk had an error or is full,
    the connection broke. A conflict or a bug is not."""
    if isinstance(exc, IntegrityError | ConcurrencyConflict):
        return False
    if isinstance(exc, OSError | OperationalError):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    # PostgreSQL says why by SQLSTATE: another client's lock (55P03, after `lock_timeout`),
    # a deadlock or serialization failure (40P01, 40001), the server shutting down or out
    # of resources (57P01-57P03, class 53: a full disk is 53100), a broken connection (08).
    state = str(getattr(exc.orig, "sqlstate", None) or "")
    return state in _TRANSIENT_STATES or state.startswith(("53", "08"))


_SELECT = sa.select(
    events_table.c.position,
    events_table.c.stream,
    events_table.c.version,
    events_table.c.type,
    events_table.c.schema,
    events_table.c.data,
    events_table.c.recorded_at,
)


def _rows(
    stream: str, expected_version: int, events: Sequence[Event], now: float
) -> list[dict[str, Any]]:
    return [
        {
            "stream": stream,
            "version": expected_version + i,
            "type": ev.type_name,
            "schema": ev.schema_version,
            "data": encode(ev).decode(),
            "recorded_at": now,
        }
        for i, ev in enumerate(events, start=1)
    ]


class EventStore:
    """Append, read a stream, read everything in global order; notify listeners of appends."""

    def __init__(self, engine: AsyncEngine, retry: RetryPolicy | None = None) -> None:
        self._engine = engine
        self.retry = retry or RetryPolicy()
        # SQLite has one writer at a time; queueing appends here instead of in SQLite's busy
        # loop keeps latency flat. Other databases are still protected by the unique key.
        self._write_lock = asyncio.Lock()
        # Appends reuse one connection: checking one out of the pool and resetting it on
        # return cost two extra thread hops per append with aiosqlite (measured: 2.0 ms ->
        # see ops/bench/events.py). Used only under the write lock.
        self._writer: AsyncConnection | None = None
        self._listeners: list[AppendListener] = []
        # Last version this process appended per stream (bounded; a miss only costs a read).
        self._versions: dict[str, int] = {}

    def _remember(self, stream: str, version: int) -> None:
        if len(self._versions) >= 100_000:
            self._versions.clear()
        self._versions[stream] = version

    @classmethod
    async def open(cls, url: str, retry: RetryPolicy | None = None) -> EventStore:
        if url.startswith("postgresql"):
            engine = create_async_engine(
                url,
                # A connection the server dropped (a restart) is found before it is used.
                pool_pre_ping=True,
                # Short, like SQLite's busy_timeout: a write kept waiting by another client's
                # lock fails and is retried by the store's own loop, which logs it and keeps
                # to the retry budget (PostgreSQL would otherwise wait forever). A client
                # silent inside a transaction (a host paused between its insert and its
                # commit) is ended by the server, so the append lock it holds is freed and
                # the other hosts' appends go on; its own write fails and is retried when
                # it wakes (a conflict then, if a survivor wrote the stream meanwhile).
                connect_args={
                    "server_settings": {
                        "lock_timeout": "1000",
                        "idle_in_transaction_session_timeout": str(int(IDLE_IN_TRANSACTION * 1000)),
                    }
                },
            )
        else:
            engine = create_async_engine(url)
        if engine.dialect.name == "sqlite":
            sa_event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
            database = engine.url.database
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
        async with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                # Several hosts starting at once on an empty database would each create the
                # tables; the lock makes the others wait and then find them (DDL is
                # transactional there).
                await _lock_database(conn)
            await conn.run_sync(metadata.create_all)
            # Refused here, before anything is read, if a newer cairn stamped the store.
            await check_and_stamp(conn, _where(engine))
        return cls(engine, retry)

    async def close(self) -> None:
        async with self._write_lock:
            if self._writer is not None:
                await self._writer.close()
                self._writer = None
        await self._engine.dispose()

    async def _write_connection(self) -> AsyncConnection:
        if self._writer is None or self._writer.closed or self._writer.invalidated:
            self._writer = await self._engine.connect()
        return self._writer

    async def _discard_writer(self) -> None:
        """After a failed write: the next try starts from a fresh connection."""
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(Exception):
                await writer.close()

    async def _write(
        self,
        what: str,
        body: Callable[[AsyncConnection], Awaitable[T]],
        on_conflict: Callable[[AsyncConnection], Awaitable[T]] | None = None,
    ) -> T:
        """Run ``body`` in a write transaction under the write lock, retried within the
        budget (counted from now, the lock's queue included); a refusal that outlasts it is
        a :class:`StoreWriteFailed`. A unique-key violation goes to ``on_conflict``, after
        the rollback (PostgreSQL refuses any statement in a failed transaction)."""
        started = time.monotonic()

        async def attempt() -> T:
            conn = await self._write_connection()
            try:
                async with conn.begin():
                    return await body(conn)
            except IntegrityError:
                if on_conflict is None:
                    raise
                return await on_conflict(conn)
            except Exception as exc:
                if _transient(exc):
                    await self._discard_writer()
                raise

        async with self._write_lock:
            try:
                return await retry_within(
                    attempt, transient=_transient, policy=self.retry, what=what, started=started
                )
            except (DBAPIError, OSError) as exc:
                raise _refused(exc, time.monotonic() - started) from exc

    async def probe_writable(self) -> None:
        """One small real write, no retry: raises :class:`StoreWriteFailed` if the store
        still refuses writes (a held lock, a full disk)."""
        async with self._write_lock:
            try:
                conn = await self._write_connection()
                async with conn.begin():
                    await self._save_cursor(conn, "~probe", int(time.time()))
            except (DBAPIError, OSError) as exc:
                await self._discard_writer()
                raise _refused(exc, 0.0) from exc

    def add_listener(self, listener: AppendListener) -> None:
        """Call ``listener(records)`` on the event loop after each committed append."""
        self._listeners.append(listener)

    def remove_listener(self, listener: AppendListener) -> None:
        self._listeners.remove(listener)

    async def append(
        self, stream: str, expected_version: int, events: Sequence[Event]
    ) -> list[Recorded]:
        if not events:
            return []
        now = time.time()
        rows: list[dict[str, Any]] = []

        async def insert(conn: AsyncConnection) -> list[int]:
            if not rows:
                # Encoded under the write lock rather than before it: appends queued together
                # (an indexer recording a block's 1,600 documents in slices) are then encoded
                # one per loop turn, between writes, not all in the turn that queued them.
                rows.extend(_rows(stream, expected_version, events, now))
            # A version this process wrote itself needs no re-read: if another writer got
            # there since, the unique (stream, version) key refuses the insert.
            if self._versions.get(stream) != expected_version:
                current = await self._current_version(conn, stream)
                if current != expected_version:
                    raise ConcurrencyConflict(stream, expected_version, current)
            return await self._insert(conn, rows)

        async def conflict(conn: AsyncConnection) -> list[int]:
            self._versions.pop(stream, None)
            actual = await self._current_version(conn, stream)
            await conn.rollback()
            raise ConcurrencyConflict(stream, expected_version, actual)

        positions = await self._write(f"append to {stream}", insert, conflict)
        self._remember(stream, expected_version + len(events))
        recorded = [
            Recorded(pos, stream, version, ev, now)
            for version, (pos, ev) in enumerate(
                zip(positions, events, strict=True), start=expected_version + 1
            )
        ]
        for listener in list(self._listeners):
            listener(recorded)
        return recorded

    async def _insert(self, conn: AsyncConnection, rows: list[dict[str, Any]]) -> list[int]:
        if self._engine.dialect.name == "postgresql":
            # Positions from a sequence are handed out when a row is inserted, not when its
            # transaction commits: two hosts' appends could commit out of position order, and
            # a reader that had seen position n+1 would never look back for n. One append at
            # a time per database (a transaction-scoped advisory lock) keeps commit order and
            # position order the same, which the outbox relay relies on.
            await _lock_database(conn)
        if self._engine.dialect.name != "sqlite" or len(rows) == 1:
            result = await conn.execute(_INSERT_RETURNING, rows)
            return [int(p) for p in result.scalars()]
        # SQLite turns an ordered RETURNING into one statement per row, each a thread hop.
        # One executemany is a single hop, and since SQLite admits one writing transaction at
        # a time, the rows it inserts take the positions right below the new maximum.
        await conn.execute(_INSERT, rows)
        last = (await conn.execute(sa.select(sa.func.max(events_table.c.position)))).scalar()
        assert last is not None
        return list(range(int(last) - len(rows) + 1, int(last) + 1))

    @staticmethod
    async def _current_version(conn: AsyncConnection, stream: str) -> int:
        result = await conn.execute(
            sa.select(sa.func.max(events_table.c.version)).where(events_table.c.stream == stream)
        )
        return int(result.scalar() or 0)

    async def stream_version(self, stream: str) -> int:
        async with self._engine.connect() as conn:
            return await self._current_version(conn, stream)

    async def read_stream(self, stream: str, after_version: int = 0) -> list[Recorded]:
        query = _SELECT.where(
            events_table.c.stream == stream, events_table.c.version > after_version
        ).order_by(events_table.c.version)
        async with self._engine.connect() as conn:
            result = await conn.execute(query)
            return [_row_to_recorded(row) for row in result]

    async def read_all(self, after_position: int = 0, limit: int = 1000) -> list[Recorded]:
        """Events in global order; a damaged row raises :class:`DamagedEvent`."""
        query = (
            _SELECT.where(events_table.c.position > after_position)
            .order_by(events_table.c.position)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            result = await conn.execute(query)
            return [_row_to_recorded(row) for row in result]

    async def read_page(self, after_position: int = 0, limit: int = 1000) -> Page:
        """Like :meth:`read_all`, stepping over damaged rows and reporting them."""
        query = (
            _SELECT.where(events_table.c.position > after_position)
            .order_by(events_table.c.position)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            rows = list(await conn.execute(query))
        records: list[Recorded] = []
        damaged: list[DamagedEvent] = []
        for row in rows:
            try:
                records.append(_row_to_recorded(row))
            except DamagedEvent as exc:
                damaged.append(exc)
        last = int(rows[-1][0]) if rows else after_position
        return Page(records, damaged, last)

    async def check(self, page_size: int = 5000) -> tuple[int, list[DamagedEvent]]:
        """Every row read back: how many there are, and the ones that cannot be decoded."""
        after, count = 0, 0
        damaged: list[DamagedEvent] = []
        while True:
            page = await self.read_page(after, page_size)
            if page.last_position == after:
                return count, damaged
            count += len(page.records) + len(page.damaged)
            damaged += page.damaged
            after = page.last_position

    async def last_position(self) -> int:
        async with self._engine.connect() as conn:
            result = await conn.execute(sa.select(sa.func.max(events_table.c.position)))
            return int(result.scalar() or 0)

    async def stream_names(self, prefix: str) -> list[str]:
        """Names of the streams starting with ``prefix`` (e.g. ``"vm:"``), oldest first."""
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = (
            sa.select(events_table.c.stream)
            .where(events_table.c.stream.like(escaped + "%", escape="\\"))
            .group_by(events_table.c.stream)
            .order_by(sa.func.min(events_table.c.position))
        )
        async with self._engine.connect() as conn:
            result = await conn.execute(query)
            return [row[0] for row in result]

    async def load_cursor(self, name: str) -> int:
        async with self._engine.connect() as conn:
            result = await conn.execute(
                sa.select(cursors_table.c.position).where(cursors_table.c.name == name)
            )
            return int(result.scalar() or 0)

    async def save_cursor(self, name: str, position: int) -> None:
        async def save(conn: AsyncConnection) -> None:
            await self._save_cursor(conn, name, position)

        await self._write(f"save cursor {name}", save)

    @staticmethod
    async def _save_cursor(conn: AsyncConnection, name: str, position: int) -> None:
        # One statement that inserts or updates: hosts sharing a store write the same row at
        # once (every host's health check writes "~probe"), and an update that found nothing
        # followed by an insert lost that race with a duplicate key.
        dialect = {"postgresql": postgresql, "sqlite": sqlite}.get(conn.dialect.name)
        if dialect is not None:
            upsert = dialect.insert(cursors_table).values(name=name, position=position)
            await conn.execute(
                upsert.on_conflict_do_update(
                    index_elements=[cursors_table.c.name],
                    set_={"position": upsert.excluded.position},
                )
            )
            return
        updated = await conn.execute(
            cursors_table.update().where(cursors_table.c.name == name).values(position=position)
        )
        if updated.rowcount == 0:
            await conn.execute(cursors_table.insert().values(name=name, position=position))


def _refused(exc: BaseException, spent: float) -> StoreWriteFailed:
    if disk_full(exc):
        return StoreWriteFailed(
            "the disk holding the event store is full: nothing can be recorded until space "
            "is freed",
            full=True,
        )
    tried = f" (retried for {spent:.0f} s)" if spent >= 1 else ""
    return StoreWriteFailed(f"the event store refuses writes: {reason(exc)}{tried}", full=False)


# PostgreSQL: seconds a session may sit idle inside a transaction before the server ends
# it. Appends never wait on anything but the database inside one; well below the lease
# TTL, so a survivor's first append finds the lock a paused holder had freed.
IDLE_IN_TRANSACTION = 5.0

_TRANSIENT_STATES = frozenset({"55P03", "40P01", "40001", "57P01", "57P02", "57P03"})

# The advisory lock key appends take on PostgreSQL ("cairn" in ASCII).
APPEND_LOCK = 0x636169726E
_LOCK_DATABASE = sa.text("SELECT pg_advisory_xact_lock(:key)")


async def _lock_database(conn: AsyncConnection) -> None:
    """PostgreSQL: this database's one writer lock, held until the transaction ends."""
    await conn.execute(_LOCK_DATABASE, {"key": APPEND_LOCK})


def _where(engine: AsyncEngine) -> str:
    """The store as a user names it: the SQLite file, or the URL without its password."""
    url = engine.url
    if url.get_backend_name() == "sqlite" and url.database:
        return url.database
    return url.render_as_string(hide_password=True)


def _sqlite_pragmas(dbapi_connection: object, _record: object) -> None:
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    # Short: a write that waits longer is retried by the store's own loop, which logs it and
    # keeps to the retry budget.
    cursor.execute("PRAGMA busy_timeout=1000")
    cursor.close()
