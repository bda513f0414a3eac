"""The ``cairn`` commands that only talk HTTP to running services, and the module behind each:
the launcher runs them without importing the server side, and cairn's full parser registers
them from the same table."""

from __future__ import annotations

# The first word of such a command line -> the module that registers and runs it.
CLIENT_COMMANDS = {
    "vm": "gateway.cli.vm",
    "fn": "gateway.cli.functions",
    "images": "gateway.cli.images",
}
