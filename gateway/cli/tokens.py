"""`cairn token create NAME --role viewer|operator|admin`, `cairn token list`,
`cairn token revoke NAME`: the API tokens of this cairn (``gateway/http/tokens.py``).

create prints the token once, on stdout alone (``TOKEN=$(cairn token create ci --role
operator)``); cairn keeps only its digest. The first token turns identities on for every
service of this data directory (``CAIRN_DATA``), at once, without a restart; revoking the last
one turns them off again. A revoked token is refused by the next request.
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Mapping
from typing import Any

from actors.config import env_list
from gateway.http.roles import DEFAULT_PUBLIC, ENV, RouteRoles
from gateway.http.tokens import Role, TokenError, create, read_entries, revoke, tokens_path


def public_routes(env: Mapping[str, str]) -> str:
    """Which routes a token does not guard, as this cairn's setting makes them: what an admin
    who just turned tokens on must know (by default `cairn vm list` still shows every VM's
    name and address to anyone who can reach the VM service)."""
    entries = env_list(env, ENV, DEFAULT_PUBLIC)
    if [e.lower() for e in entries] == ["none"]:
        return f"cairn: no route is served without a token ({ENV}=none) but the console's sign-in"
    return f"cairn: still served without a token ({ENV}; `none` closes them all): " + ", ".join(
        entries
    )


def cmd_create(args: Any, env: Mapping[str, str]) -> int:
    path = tokens_path(env)
    try:
        RouteRoles.from_env(env)  # a bad setting is said before a token is made
        role = Role.parse(args.role)
        first = not read_entries(path)
        token = create(path, args.name, role)
    except (TokenError, ValueError) as exc:
        print(f"cairn: token: {exc}", file=sys.stderr)
        return 2
    print(token)
    note = f"cairn: token {args.name!r} ({role.label}) created; it is shown only now"
    if first:
        note += "; identities are now on: every route but the public ones asks for a token"
    print(note, file=sys.stderr)
    print(public_routes(env), file=sys.stderr)
    return 0


def cmd_list(args: Any, env: Mapping[str, str]) -> int:
    try:
        entries = read_entries(tokens_path(env))
    except TokenError as exc:
        print(f"cairn: token: {exc}", file=sys.stderr)
        return 2
    if args.json:
        rows = [{"name": e.name, "role": e.role.label, "created": e.created} for e in entries]
        print(json.dumps(rows))
        return 0
    if not entries:
        print("no tokens: identities are off (every client is served as the spec says)")
        return 0
    for e in entries:
        created = datetime.datetime.fromtimestamp(e.created, datetime.UTC)
        print(f"{e.name:<24} {e.role.label:<9} created {created:%Y-%m-%d %H:%M} UTC")
    return 0


def cmd_revoke(args: Any, env: Mapping[str, str]) -> int:
    path = tokens_path(env)
    try:
        gone = revoke(path, args.name)
        left = len(read_entries(path))
    except TokenError as exc:
        print(f"cairn: token: {exc}", file=sys.stderr)
        return 2
    if not gone:
        print(f"cairn: token: no token named {args.name!r}", file=sys.stderr)
        return 1
    note = f"cairn: token {args.name!r} revoked"
    if left == 0:
        note += "; no token is left: identities are off"
    print(note, file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    token = subparsers.add_parser("token", help="API tokens and their roles: create, list, revoke")
    sub = token.add_subparsers(dest="token_command", required=True)
    making = sub.add_parser("create", help="a new token, printed once")
    making.add_argument("name", help="who or what holds it (shown in the audit trail)")
    making.add_argument("--role", required=True, choices=[r.label for r in Role])
    making.set_defaults(handler=cmd_create)
    listing = sub.add_parser("list", help="the tokens' names and roles (never the tokens)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_list)
    dropping = sub.add_parser("revoke", help="refuse a token from the next request on")
    dropping.add_argument("name")
    dropping.set_defaults(handler=cmd_revoke)
