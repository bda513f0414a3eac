"""The event store's format stamp: which cairn may open a store.

A store holds, beside its events, a small table ``cairn_meta`` with its **format** (an integer)
and the cairn version that stamped it. ``STORE_FORMAT`` rises with a release that changes what
an older cairn could not read: the tables' layout, or the schema version of any event type
(events/upcast.py). So:

* a store of an older format (or one from before the stamp, cairn 0.1.0: format 1) is opened,
  stamped with this format, and its older events are upcast whenever they are read;
* a store of a newer format is refused at start-up, naming both versions and what to do,
  before anything is read or written: an older cairn would misread it;
* releases that keep the format open each other's stores both ways.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from events.release import VERSION

# Raise it (and list why here) whenever a release changes the tables or an event's schema.
# 1: cairn 0.1.0's tables `events` and `cursors`, every event type at schema version 1.
STORE_FORMAT = 1

meta = sa.MetaData()
meta_table = sa.Table(
    "cairn_meta",
    meta,
    sa.Column("key", sa.String(100), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)


class StoreTooNew(Exception):
    """The store was stamped by a newer cairn, with a format this one cannot read."""

    def __init__(
        self, where: str, written_by: str, stored: int, ours: str, our_format: int
    ) -> None:
        super().__init__(
            f"the event store {where} was written by cairn {written_by} (store format "
            f"{stored}); this is cairn {ours}, which reads store formats up to {our_format}. "
            f"Run cairn {written_by} or later on it, or, to go back to cairn {ours}, restore "
            "the backup taken before the upgrade (cairn store backup FILE, or pg_dump)"
        )
        self.written_by = written_by
        self.stored = stored


async def check_and_stamp(
    conn: AsyncConnection,
    where: str,
    *,
    version: str = VERSION,
    store_format: int = STORE_FORMAT,
) -> int:
    """Refuse a store of a newer format; stamp an older or unstamped one with ours. The
    format the store had (1 for one from before the stamp)."""
    await conn.run_sync(meta.create_all)
    rows = dict((await conn.execute(sa.select(meta_table.c.key, meta_table.c.value))).all())
    stored = int(rows.get("format", "1"))
    if stored > store_format:
        raise StoreTooNew(where, rows.get("written_by", "?"), stored, version, store_format)
    if stored < store_format or "format" not in rows:
        await conn.execute(meta_table.delete())
        await conn.execute(
            meta_table.insert(),
            [
                {"key": "format", "value": str(store_format)},
                {"key": "written_by", "value": version},
            ],
        )
    return stored
