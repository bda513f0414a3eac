"""The ``cairn`` command's entry point.

The daily commands that only talk HTTP to running services (``cairn vm``, ``cairn fn``,
``cairn images``) are parsed and run here without importing the server side (aiohttp,
SQLAlchemy, the actors, the store), which costs most of a second per call and matters to a
script that calls ``cairn vm list`` in a loop. Everything else goes to :mod:`gateway.main`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from gateway.server import command_groups

# The exit code of a program whose reader went away, as a shell reports one killed by SIGPIPE.
CLOSED_PIPE = 128 + signal.SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # `cairn vm list --json | head -1`: the reader has what it wanted, nothing failed.
        # Python flushes stdout once more at exit; pointing it at /dev/null keeps that flush
        # from reporting the same closed pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return CLOSED_PIPE


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    group = command_groups(client=True).get(args[0]) if args else None
    if group is None:
        from gateway.main import main as full_main

        return full_main(args)
    from actors.config import load_env

    parser = argparse.ArgumentParser(prog="cairn")
    commands = parser.add_subparsers(dest="command", required=True)
    group.load()(commands)
    parsed = parser.parse_args(args)
    return int(parsed.handler(parsed, load_env()) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
