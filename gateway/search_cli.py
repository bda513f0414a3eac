"""`cairn search add|remove|list`: the durable registry of search databases.

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


def cmd_mcp(args: Any, env: Mapping[str, str]) -> int:
    # Imported here: the SDK is only needed by this subcommand.
    from gateway.search_mcp import run_stdio

    asyncio.run(run_stdio(env))
    return 0


def register(subparsers: Any) -> None:
    search = subparsers.add_parser("search", help="search databases: add, remove, list, mcp")
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
