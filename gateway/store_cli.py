"""`cairn store check`: read every stored event back and list the rows that cannot be decoded.

Such a row's stream is quarantined when cairn starts (its VM, function registry, search
database or image store answers 503 naming the row); the others run. Exit status 1 when any
row is damaged, so a script or a timer can alert on it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from events.catalog import load_all
from events.store import EventStore, default_store_url
from gateway.config import data_dir, env_str


async def check(env: Mapping[str, str]) -> tuple[int, list[dict[str, Any]]]:
    load_all()
    url = env_str(env, "CAIRN_EVENT_STORE") or default_store_url(data_dir(env))
    store = await EventStore.open(url)
    try:
        count, damaged = await store.check()
    finally:
        await store.close()
    rows = [
        {
            "position": d.position,
            "stream": d.stream,
            "version": d.version,
            "type": d.type_name,
            "error": d.error,
        }
        for d in damaged
    ]
    return count, rows


def cmd_check(args: Any, env: Mapping[str, str]) -> int:
    count, rows = asyncio.run(check(env))
    if args.json:
        print(json.dumps({"rows": count, "damaged": rows}))
    else:
        for row in rows:
            print(
                f"position {row['position']}  stream {row['stream']}  version {row['version']}"
                f"  type {row['type']}: {row['error']}"
            )
        if rows:
            print(f"{len(rows)} damaged of {count} stored rows")
        else:
            print(f"no damaged rows ({count} checked)")
    return 1 if rows else 0


def register(subparsers: Any) -> None:
    store = subparsers.add_parser("store", help="the event store: check")
    sub = store.add_subparsers(dest="store_command", required=True)
    checking = sub.add_parser("check", help="list stored events that cannot be read back")
    checking.add_argument("--json", action="store_true")
    checking.set_defaults(handler=cmd_check)
