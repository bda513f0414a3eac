"""`cairn search add|remove|list`: the durable registry of search databases; `cairn search
status [NAME]` and `cairn search query NAME TEXT`: the running service's indexing progress and
answers; `cairn search mcp`: its MCP server.

A running search service loads a database as soon as `add` registers it; a removal takes effect
at its next start. Names are validated before anything touches the disk. Every path printed is
absolute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Mapping
from typing import Any

from actors.search.registry import (
    Registry,
    RegistryError,
    adopt_legacy,
    inbox_root,
    recorded_inbox,
    state_root,
)
from events.errors import reason
from gateway.cli.common import clean


def _registry(env: Mapping[str, str]) -> Registry:
    moved_from = adopt_legacy(env)
    if moved_from is not None:
        print(
            f"cairn: moved the search registry and indexes of {moved_from} to {state_root(env)}",
            file=sys.stderr,
        )
    return Registry(state_root(env))


def _refused(exc: RegistryError | OSError) -> int:
    """A registry change that did not happen, said on stderr: status 1."""
    if isinstance(exc, RegistryError):
        print(f"cairn: {exc}", file=sys.stderr)
    else:
        print(f"cairn: cannot write the search registry: {reason(exc)}", file=sys.stderr)
    return 1


def cmd_add(args: Any, env: Mapping[str, str]) -> int:
    try:
        entry = _registry(env).add(args.name)
    except (RegistryError, OSError) as exc:
        return _refused(exc)
    inbox = inbox_root(env) / entry.db
    inbox.mkdir(parents=True, exist_ok=True)
    print(
        f"registered {entry.db}; drop files into {inbox}\n"
        f"(a running search service loads it at once; its index is kept in "
        f"{_registry(env).database_dir(entry.db)})"
    )
    return 0


def cmd_remove(args: Any, env: Mapping[str, str]) -> int:
    try:
        _registry(env).remove(args.name)
    except (RegistryError, OSError) as exc:
        return _refused(exc)
    print(
        f"removed {args.name} from the registry (served until the search service restarts; "
        f"its index {_registry(env).database_dir(args.name)} and inbox "
        f"{inbox_root(env) / args.name} are left in place)"
    )
    return 0


def cmd_list(args: Any, env: Mapping[str, str]) -> int:
    try:
        entries = _registry(env).entries()
    except RegistryError as exc:
        print(f"cairn: {exc}", file=sys.stderr)
        return 1
    registry = _registry(env)
    rows = []
    for e in entries:
        inbox = inbox_root(env) / e.db
        recorded = recorded_inbox(registry.database_dir(e.db))
        rows.append(
            {
                **e.to_json(),
                "inbox": str(inbox),
                "index": str(registry.database_dir(e.db)),
                # The inbox the index was built from (None before its first start): another
                # one than `inbox` means another checkout's index, which is not loaded here.
                "indexedFrom": None if recorded is None else str(recorded),
                "otherInbox": recorded is not None and recorded != inbox.resolve(),
            }
        )
    if args.json:
        print(json.dumps(rows))
    else:
        print(f"registry {registry.file}")
        for row in rows:
            line = f"{row['db']}\t{row['createAt']}\tinbox {row['inbox']}\tindex {row['index']}"
            if row["otherInbox"]:
                line += f"\tbuilt from {row['indexedFrom']}: not loaded with this inbox"
            print(line)
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


async def _status(
    env: Mapping[str, str], name: str | None, token_file: str | None = None
) -> list[dict[str, Any]]:
    import aiohttp

    from gateway.cli.search_client import get_json

    params = {"db": name} if name else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        body = await get_json(session, env, "/api/status", params, token_file)
    return [body] if name else list(body["databases"])


_NOT_LOADED = re.compile(r'"(.*)" not exist', re.DOTALL)


def failed(exc: Exception, code: int) -> int:
    """The service's refusal on stderr, in a sentence: its `"notes" not exist` (the
    service's words, kept as they are over HTTP and MCP for the clients that match them) says
    which database and where to look."""
    message = str(exc)
    if (named := _NOT_LOADED.fullmatch(message)) is not None:
        message = (
            f'no database "{named.group(1)}" is loaded in the search service '
            "(`cairn search list` shows the registered ones)"
        )
    print(f"cairn: {message}", file=sys.stderr)
    return code


def cmd_status(args: Any, env: Mapping[str, str]) -> int:
    from gateway.cli.search_client import ServiceError

    try:
        statuses = asyncio.run(_status(env, args.name, args.token_file))
    except ServiceError as exc:
        return failed(exc, exc.code)
    print(
        json.dumps(statuses if args.name is None else statuses[0])
        if args.json
        else status_table(statuses)
    )
    return 0


async def _query(
    env: Mapping[str, str],
    name: str,
    text: str,
    target: str | None,
    limit: int | None,
    rank: str | None = None,
    typo: bool = False,
    token_file: str | None = None,
) -> dict[str, Any]:
    import aiohttp

    from gateway.cli.search_client import get_json

    # Scores always: a person reading the answer sees why each match ranked where it did,
    # and how near a search by meaning came when it found nothing.
    params = {"db": name, "q": text, "scores": "1"}
    if target:
        params["target"] = target
    if rank:
        params["rank"] = rank
    if typo:
        params["typo"] = "1"
    if limit is not None:
        params["limit"] = str(limit)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        body: dict[str, Any] = await get_json(session, env, "/api/search", params, token_file)
    return body


def score_text(score: Any) -> str:
    if not isinstance(score, int | float):
        return ""
    return f" ({score:g})" if float(score).is_integer() else f" ({score:.2f})"


def results_text(body: dict[str, Any]) -> str:
    """Each branch's hits, best first: `source #chunk (score): the chunk's first line`."""
    lines: list[str] = []
    for branch in ("hybrid", "keyword", "semantic"):
        if branch not in body:
            continue
        groups = body[branch]
        count = sum(len(g["matches"]) for g in groups)
        lines.append(f"{branch}: {count} match{'' if count == 1 else 'es'}")
        for group in groups:
            for match in group["matches"]:
                first = " ".join(match["content"].split())[:100]
                score = score_text(match.get("score"))
                lines.append(f"  {clean(group['source'])} #{match['chunk']}{score}: {clean(first)}")
    return "\n".join(lines)


def by_meaning_note(body: dict[str, Any]) -> str | None:
    """Why the search by meaning added nothing, when it did not: no chunk reached the
    similarity cut-off (and how near the nearest came), or nothing is embedded yet."""
    if "semantic_cutoff" not in body:
        return None
    cutoff, closest = body["semantic_cutoff"], body.get("semantic_closest")
    if closest is None:
        return "nothing is embedded yet, so nothing is found by meaning (`cairn search status`)"
    if closest >= cutoff:
        return None
    return (
        f"nothing by meaning passed the {cutoff:g} similarity cut-off "
        f"(the nearest chunk scored {closest:.2f})"
    )


def cmd_query(args: Any, env: Mapping[str, str]) -> int:
    from gateway.cli.search_client import ServiceError

    target = args.target or "hybrid"
    try:
        body = asyncio.run(
            _query(
                env,
                args.name,
                args.text,
                target,
                args.limit,
                args.rank,
                args.typo,
                args.token_file,
            )
        )
        if args.json:
            print(json.dumps(body, ensure_ascii=False))
            return 0
        print(results_text(body))
        note = by_meaning_note(body)
        if note is None:
            return 0
        if target == "hybrid":
            found = bool(body["hybrid"])
            print(f"({note}; {'these are keyword matches' if found else 'no keyword match'})")
        elif target == "semantic":
            # Offered in its place: the words of the query, ranked by BM25.
            print(f"({note}; keyword matches instead:)")
            words = asyncio.run(
                _query(
                    env, args.name, args.text, "keyword", args.limit, "bm25", False, args.token_file
                )
            )
            print(results_text(words))
        else:
            print(f"({note})")
    except ServiceError as exc:
        return failed(exc, exc.code)
    return 0


def cmd_mcp(args: Any, env: Mapping[str, str]) -> int:
    # Imported here: the SDK is only needed by this subcommand.
    from gateway.cli.search_client import ServiceError, token
    from gateway.cli.search_mcp import run_stdio

    if args.token_file is not None:
        try:
            token(env, args.token_file)  # said now, not at the agent's first call
        except ServiceError as exc:
            return failed(exc, exc.code)
    asyncio.run(run_stdio(env, args.token_file))
    return 0


def register(subparsers: Any) -> None:
    search = subparsers.add_parser(
        "search", help="search databases: add, remove, list, status, query, mcp"
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
    _token_option(status)
    status.set_defaults(handler=cmd_status)
    query = sub.add_parser("query", help="search a database of the running service")
    query.add_argument("name")
    query.add_argument("text")
    query.add_argument(
        "--target",
        choices=("keyword", "semantic", "both", "hybrid"),
        default=None,
        help="hybrid (the default: words and meaning in one list, as the console), keyword, "
        "semantic or both",
    )
    query.add_argument(
        "--rank", choices=("bm25",), default=None, help="rank the keyword branch by BM25"
    )
    query.add_argument(
        "--typo",
        action="store_true",
        help="forgive one typo in words of 5+ letters (with --rank bm25 or --target hybrid)",
    )
    query.add_argument("--limit", type=int, default=None, help="rows per branch (1-100)")
    query.add_argument("--json", action="store_true", help="the HTTP answer as it is")
    _token_option(query)
    query.set_defaults(handler=cmd_query)
    mcp = sub.add_parser(
        "mcp",
        help="an MCP server on stdin/stdout (tools list_rag, search_rag) for the running service",
    )
    _token_option(mcp)
    mcp.set_defaults(handler=cmd_mcp)


def _token_option(parser: argparse.ArgumentParser) -> None:
    """``--token-file``, as every command that talks to a service takes it."""
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help="read the token from FILE (default: CAIRN_TOKEN, then CAIRN_TOKEN_FILE)",
    )


def main(argv: list[str], env: Mapping[str, str]) -> int:
    """Run a search subcommand alone (tests, scripts)."""
    parser = argparse.ArgumentParser(prog="cairn")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args, env))
