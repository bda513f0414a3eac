"""What `cairn vm`, `cairn fn` and `cairn images` share: the options every command takes
(``--json``, ``--token-file``), the text a terminal may be shown, tables, and the one place a
failure becomes a message on stderr and an exit code (gateway/cli/client.py lists them).

With ``--json`` stdout holds exactly one JSON document, also on failure:
``{"error": <message>, "status": <HTTP status or null>, "exit": <exit code>}``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import attrs

from actors.config import ConfigError
from gateway.cli.client import INTERRUPTED, USAGE, CliError, Target, target


@attrs.frozen
class Io:
    out: TextIO
    err: TextIO
    json: bool = False

    def say(self, text: str) -> None:
        """A line of the command's human output (stdout; nothing with --json)."""
        if not self.json:
            print(text, file=self.out, flush=True)

    def note(self, text: str) -> None:
        """A remark beside the output (stderr), also with --json."""
        print(f"cairn: {clean(text)}", file=self.err, flush=True)

    def document(self, value: Any) -> None:
        print(json.dumps(value, ensure_ascii=False), file=self.out, flush=True)

    def show(self, value: Any, text: Callable[[Any], str]) -> None:
        """What a service answered: as it is with --json, else as ``text(value)`` reads it."""
        if self.json:
            self.document(value)
        else:
            self.say(text(value))

    @property
    def live(self) -> TextIO | None:
        """Where live progress goes: stdout, or with --json stderr when it is a terminal."""
        if not self.json:
            return self.out
        return self.err if _isatty(self.err) else None


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def clean(text: Any) -> str:
    """Text safe for a terminal: control characters (escape sequences a VM name, a file name
    or a service's message could carry) are shown as ``\\x1b``, never sent as they are."""
    out = []
    for ch in str(text):
        code = ord(ch)
        if ch == "\t" or not (code < 32 or 127 <= code < 160 or code in (0x2028, 0x2029)):
            out.append(ch)
        else:
            out.append(f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}")
    return "".join(out)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Aligned columns, two spaces apart, cells cleaned; ``-`` for a missing value."""
    cells = [list(headers)] + [[clean("-" if v is None else v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def listing(
    headers: Sequence[str],
    items: Sequence[Any],
    row: Callable[[Any], Sequence[Any]],
    empty: str,
) -> str:
    """A table of ``items``, ``row(item)`` each; ``empty`` (e.g. "no snapshots") if none."""
    return table(headers, [row(item) for item in items]) if items else empty


def size_mb(mb: Any) -> str:
    if not isinstance(mb, int | float):
        return "-"
    return f"{mb / 1024:g} GiB" if mb >= 1024 and mb % 1024 == 0 else f"{mb:g} MiB"


def size_gb(gb: Any) -> str:
    """A disk size the service gives in GB (Proxmox's G: GiB)."""
    if not isinstance(gb, int | float):
        return "-"
    return f"{gb:g} GiB"


def when_ms(ms: Any) -> str:
    """A function version (Unix milliseconds) as a UTC time."""
    if not isinstance(ms, int):
        return "-"
    at = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def common_options() -> argparse.ArgumentParser:
    """The options of every command: a parent parser."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--json", action="store_true", help="print one JSON document on stdout (also on failure)"
    )
    parent.add_argument(
        "--token-file",
        metavar="FILE",
        help="read the token from FILE (default: CAIRN_TOKEN, then CAIRN_TOKEN_FILE)",
    )
    return parent


Handler = Callable[[Any, Target, Io], int]


def add_command(
    sub: Any, service: str, name: str, handler: Handler, help: str
) -> argparse.ArgumentParser:
    """A subcommand taking the common options, run by ``handler(args, target, io)``."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help, parents=[common_options()])
    parser.set_defaults(handler=runner(service, handler), cli_run=(service, handler))
    return parser


def runner(service: str, handler: Handler) -> Callable[[Any, Mapping[str, str]], int]:
    """The ``handler(args, env)`` cairn's dispatcher calls, printing to the real stdout."""

    def run(args: Any, env: Mapping[str, str]) -> int:
        return execute(service, handler, args, env, Io(sys.stdout, sys.stderr, args.json))

    return run


def execute(service: str, handler: Handler, args: Any, env: Mapping[str, str], io: Io) -> int:
    try:
        return handler(args, target(env, service, args.token_file), io)
    except CliError as exc:
        return failed(io, exc.code, exc.message, exc.status)
    except ConfigError as exc:
        return failed(io, USAGE, f"configuration error: {exc}", None)
    except KeyboardInterrupt:
        return failed(io, INTERRUPTED, "interrupted", None)


def failed(io: Io, code: int, message: str, status: int | None) -> int:
    print(f"cairn: {clean(message)}", file=io.err, flush=True)
    if io.json:
        io.document({"error": message, "status": status, "exit": code})
    return code


def main(
    register: Callable[[Any], None],
    argv: Sequence[str],
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
) -> int:
    """Run one command group alone, printing to ``out``/``err`` (tests, scripts)."""
    parser = argparse.ArgumentParser(prog="cairn")
    register(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    service, handler = args.cli_run
    return execute(service, handler, args, env, Io(out, err, args.json))
