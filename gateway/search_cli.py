"""`cairn search add|remove|list`: the durable registry of search databases; `cairn search
status [NAME]`: the running service's indexing progress; `cairn search mcp`: its MCP server.

Registration takes effect at the next start of the search service (spec: registered, then loaded
after a restart). Names are validated before anything touches the disk.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping
from typing import Any

from actors.search.registry import Registry, RegistryError, config_dir, inbox_root
from events.errors import reason


def _registry(env: Mapping[str, str]) -> Registry:
    return Registry(config_dir(env))


def cmd_add(args: Any, env: Mapping[str, str]) -> int:
    try:
        entry = _registry(env).add(args.name)
    except RegistryError as exc:
        print(f"cairn: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"cairn: cannot write the search registry: {reason(exc)}", file=sys.stderr)
        return 1
    inbox = inbox_root(env) / entry.db
    inbox.mkdir(parents=True, exist_ok=True)
    print(f"registered {entry.db}; drop files into {inbox} (loaded at the next start)")
    return 0


def cmd_remove(args: Any, env: Mapping[str, str]) -> int:
    try:
        _registry(env).remove(args.name)
    except RegistryError as exc:
        print(f"cairn: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"cairn: cannot write the search registry: {reason(exc)}", file=sys.stderr)
        return 1
    print(f"removed {args.name} from the registry (its index and inbox are left in place)")
    return 0


def cmd_list(args: Any, env: Mapping[str, str]) -> int:
    try:
        entries = _registry(env).entries()
    except RegistryError as exc:
        print(f"cairn: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([e.to_json() for e in entries]))
    else:
        for entry in entries:
            print(f"{entry.db}\t{entry.createAt}")
    return 0


STATUS_COLUMNS = (
    "db",
    "state",
    "queued",
    "documents",
    "chunks",
    "embedded",
    "pending",
    "failed",
    "keyword_rate",
    "embedding_rate",
)


def status_table(statuses: list[dict[str, Any]]) -> str:
    """Progress as aligned columns, one database a line (rates in chunks/s)."""
    rows = [[h.replace("_rate", "/s") for h in STATUS_COLUMNS]]
    rows += [[str(s.get(h, "")) for h in STATUS_COLUMNS] for s in statuses]
    widths = [max(len(r[i]) for r in rows) for i in range(len(STATUS_COLUMNS))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    for s in statuses:
        if s.get("embedding_error"):
            lines.append(f"{s['db']}: last embedding error: {s['embedding_error']}")
    return "\n".join(lines)


async def _status(env: Mapping[str, str], name: str | None) -> list[dict[str, Any]]:
    import aiohttp

    from gateway.search_client import get_json

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        body = await get_json(session, env, "/api/status", {"db": name} if name else {})
    return [body] if name else list(body["databases"])


def cmd_status(args: Any, env: Mapping[str, str]) -> int:
    from gateway.search_client import ServiceError

    try:
        statuses = asyncio.run(_status(env, args.name))
    except ServiceError as exc:
        print(f"cairn: {exc}", file=sys.stderr)
        return 1
    print(
        json.dumps(statuses if args.name is None else statuses[0])
        if args.json
        else status_table(statuses)
    )
    return 0


def cmd_mcp(args: Any, env: Mapping[str, str]) -> int:
    # Imported here: the SDK is only needed by this subcommand.
    from gateway.search_mcp import run_stdio

    asyncio.run(run_stdio(env))
    return 0


def register(subparsers: Any) -> None:
    search = subparsers.add_parser(
        "search", help="search databases: add, remove, list, status, mcp"
    )
    sub = search.add_subparsers(dest="search_command", required=True)
    add = sub.add_parser("add", help="register a database (inbox/<name>/ is indexed)")
    add.add_argument("name")
    add.set_defaults(handler=cmd_add)
    remove = sub.add_parser("remove", help="unregister a database")
    remove.add_argument("name")
    remove.set_defaults(handler=cmd_remove)
    listing = sub.add_parser("list", help="registered databases")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_list)
    status = sub.add_parser(
        "status", help="indexing progress of the running service's databases (or of NAME)"
    )
    status.add_argument("name", nargs="?")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_status)
    mcp = sub.add_parser(
        "mcp",
        help="an MCP server on stdin/stdout (tools list_rag, search_rag) for the running service",
    )
    mcp.set_defaults(handler=cmd_mcp)


def main(argv: list[str], env: Mapping[str, str]) -> int:
    """Run a search subcommand alone (tests, scripts)."""
    parser = argparse.ArgumentParser(prog="cairn")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args, env))
