"""`cairn cluster init DIR --member NAME=ADDRESS ...`: the keys and certificates that close a
cluster's NATS (``events/cluster_kit.py``), and where each file goes; `cairn cluster auth
KEYS...`: an ``auth.conf`` that lets in several keyrings at once, for rotating keys
(docs/cluster.md)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from events.cluster_kit import ClusterKit, Member, write_auth
from events.credentials import Keyring, KeyringError


def placement(kit: ClusterKit, members: list[Member]) -> str:
    """Where each file of the kit goes, for the operator to copy."""
    lines = [
        f"cairn: cluster kit in {kit.root}",
        "",
        "On each NATS server (ops/deploy/cluster/nats-server.conf.example reads them there):",
        f"  {kit.auth_file}  ->  /etc/cairn-nats/auth.conf",
        f"  {kit.ca_file}  ->  /etc/cairn-nats/ca.pem",
    ]
    for member in members:
        lines.append(f"  on {member.name} ({', '.join(member.addresses)}):")
        lines.append(f"    {kit.cert_file(member.name)}  ->  /etc/cairn-nats/server.pem")
        lines.append(f"    {kit.key_file(member.name)}  ->  /etc/cairn-nats/server-key.pem (0600)")
    lines += [
        "",
        "On each cairn host (ops/deploy/cluster/cairn.env.cluster.example):",
        f"  {kit.keyring.path}/  ->  /etc/cairn/nats-keys/ (0700, its files 0600)",
        f"  {kit.ca_file}  ->  /etc/cairn/nats-ca.pem",
        "",
        "A reader of events (`cairn events tail`) needs only keys/observer.nk and ca.pem.",
        f"Keep {kit.tls / 'ca-key.pem'} off the servers: it only makes certificates.",
    ]
    return "\n".join(lines)


def cmd_init(args: Any, env: Mapping[str, str]) -> int:
    try:
        members = [Member.parse(text) for text in args.member]
    except ValueError as exc:
        print(f"cairn: cluster init: {exc}", file=sys.stderr)
        return 2
    if len({m.name for m in members}) != len(members):
        print("cairn: cluster init: each member needs a name of its own", file=sys.stderr)
        return 2
    kit = ClusterKit.create(Path(args.dir), members)
    print(placement(kit, members))
    return 0


def cmd_auth(args: Any, env: Mapping[str, str]) -> int:
    keyrings = [Keyring(Path(path)) for path in args.keys]
    try:
        for keyring in keyrings:
            if not keyring.public_keys():
                raise KeyringError(f"{keyring.path}: no <role>.nk file")
        write_auth(Path(args.out), keyrings)
    except (KeyringError, OSError) as exc:
        print(f"cairn: cluster auth: {exc}", file=sys.stderr)
        return 1
    print(f"cairn: {args.out} lets in the keys of {len(keyrings)} keyring(s)")
    return 0


def register(subparsers: Any) -> None:
    cluster = subparsers.add_parser("cluster", help="keys and certificates of a cluster's NATS")
    sub = cluster.add_subparsers(dest="cluster_command", required=True)
    init = sub.add_parser(
        "init", help="make the keyring, a CA, each NATS server's certificate and auth.conf"
    )
    init.add_argument("dir", help="where to write the kit (made mode 0700)")
    init.add_argument(
        "--member",
        action="append",
        required=True,
        metavar="NAME=ADDRESS[,ADDRESS]",
        help="a NATS server: its name and the addresses clients and peers reach it at",
    )
    init.set_defaults(handler=cmd_init)
    auth = sub.add_parser("auth", help="write an auth.conf letting in several keyrings (rotation)")
    auth.add_argument("keys", nargs="+", help="keyring directories (a kit's keys/)")
    auth.add_argument("--out", required=True, help="the auth.conf to write")
    auth.set_defaults(handler=cmd_auth)
