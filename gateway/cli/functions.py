"""`cairn fn list|put|run|rm`: the functions service over HTTP (docs/functions.md has the routes;
docs/cli.md this command line).

``fn run`` prints the function's result on stdout as data (a string as it is, anything else
as JSON), so ``X=$(cairn fn run tools/add --input '{"n": 2}')`` works, and its log lines (what
it prints) on stderr as it prints them. A run that fails exits 1 with the failure on stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gateway.cli.client import (
    REFUSED,
    UNREACHABLE,
    USAGE,
    CliError,
    Target,
    call,
    quote_path,
    stream,
)
from gateway.cli.common import Io, add_command, clean, table, when_ms

SERVICE = "functions"
LANGUAGES = {".py": "python", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript"}
RUN_TIMEOUT = 600.0  # a run lasts at most RUN_TIMEOUT on the service; this only bounds silence


def cmd_list(args: Any, t: Target, io: Io) -> int:
    body = call(t, "GET", "/functions").json()
    if io.json:
        io.document(body)
        return 0
    functions = body.get("functions") or []
    rows = [
        (f.get("path"), f.get("language"), when_ms(f.get("latest")), len(f.get("versions") or []))
        for f in functions
    ]
    io.say(table(("PATH", "LANGUAGE", "LATEST", "VERSIONS"), rows) if rows else "no functions")
    return 0


def language_of(file: str, given: str | None) -> str:
    if given is not None:
        return given
    language = LANGUAGES.get(Path(file).suffix.lower())
    if language is None:
        raise CliError(
            USAGE,
            f"cannot tell the language of {file!r} from its name: give --language "
            "python, javascript or typescript",
        )
    return language


def _existing(t: Target, path: str) -> dict[str, Any] | None:
    try:
        body = call(t, "GET", f"/functions/{quote_path(path)}").json()
    except CliError as exc:
        if exc.status == 404:
            return None
        raise
    return body if isinstance(body, dict) else None


def cmd_put(args: Any, t: Target, io: Io) -> int:
    language = language_of(args.file, args.language)
    try:
        code = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror.lower() if isinstance(exc, OSError) and exc.strerror else "not text"
        raise CliError(USAGE, f"cannot read {args.file}: {why}") from None
    before = _existing(t, args.path)
    body = call(t, "POST", "/upload", {"path": args.path, "language": language, "code": code})
    stored = body.json()
    result = {**stored, "replaced": before is not None}
    if before is not None:
        old = before.get("versions") or []
        old_language = old[-1].get("language") if old and isinstance(old[-1], dict) else None
        result["previous"] = {"version": before.get("latest"), "language": old_language}
        if old_language and old_language != language:
            io.note(f"{args.path} was {old_language}; its new version is {language}")
    if io.json:
        io.document(result)
    else:
        verb = "new version of" if before is not None else "stored"
        io.say(
            f"{verb} {clean(stored.get('path'))}: version {stored.get('version')} "
            f"({when_ms(stored.get('version'))}, {clean(stored.get('language'))})"
        )
    return 0


def run_input(args: Any) -> str | None:
    """The run's input as a JSON text (checked here, sent as text so that a JSON string stays
    a string): --input JSON, --input-file FILE (- for stdin), or none."""
    text: str | None = args.input
    if args.input_file is not None:
        try:
            text = sys.stdin.read() if args.input_file == "-" else Path(args.input_file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror.lower() if isinstance(exc, OSError) and exc.strerror else "not text"
            raise CliError(USAGE, f"cannot read {args.input_file}: {why}") from None
    if text is None:
        return None
    try:
        json.loads(text)
    except ValueError as exc:
        raise CliError(USAGE, f"the input is not JSON: {exc}") from None
    return text


def result_text(data: Any, type_: str | None) -> str:
    """A result as stdout shows it: strings and text as they are, the rest as JSON."""
    if type_ in ("string", "text") and isinstance(data, str):
        return data
    return json.dumps(data, ensure_ascii=False)


def streamed_value(data: Any, type_: Any) -> Any:
    """A streamed result's value: the stream sends numbers and JSON as their JSON text."""
    if type_ in ("json", "number") and isinstance(data, str):
        try:
            return json.loads(data)
        except ValueError:
            return data
    return data


def cmd_run(args: Any, t: Target, io: Io) -> int:
    body: dict[str, Any] = {}
    value = run_input(args)
    if value is not None:
        body["input"] = value
    path = f"/run/{quote_path(args.path)}"
    if args.version is not None:
        path += f"?version={args.version}"
    t = Target(t.service, t.base, t.token, RUN_TIMEOUT)
    # Always the stream: its log lines (what the function prints) are half of what a run
    # says, and the plain answer carries only the result.
    body["stream"] = True
    logs: list[str] = []
    with stream(t, "POST", path, body) as answer:
        if answer.events is None:
            assert answer.plain is not None
            raise CliError(REFUSED, answer.plain.text().strip() or "no stream")
        for ev in answer.events:
            data = ev.data if isinstance(ev.data, dict) else {}
            kind = data.get("event")
            if kind == "log":
                line = str(data.get("data", ""))
                logs.append(line)
                print(clean(line), file=io.err, flush=True)
            elif kind == "result":
                value = streamed_value(data.get("data"), data.get("type"))
                if io.json:
                    io.document({"data": value, "type": data.get("type"), "logs": logs})
                else:
                    print(result_text(value, data.get("type")), file=io.out, flush=True)
                return 0
            elif kind == "error":
                raise CliError(REFUSED, f"failed to run: {data.get('data', '')}")
            elif ev.event == "stopping":
                raise CliError(UNREACHABLE, str(data.get("message") or "cairn is stopping"))
    raise CliError(UNREACHABLE, "the run's stream ended before its result")


def cmd_rm(args: Any, t: Target, io: Io) -> int:
    body = call(t, "DELETE", f"/functions/{quote_path(args.path)}").json()
    if io.json:
        io.document(body)
    else:
        gone = body.get("deleted")
        count = len(gone) if isinstance(gone, list) else gone
        versions = f"{count} version{'' if count == 1 else 's'}"
        io.say(f"removed {clean(body.get('path', args.path))} ({versions})")
    return 0


def register(subparsers: Any) -> None:
    fn = subparsers.add_parser("fn", help="functions over HTTP: list, put, run, rm")
    sub = fn.add_subparsers(dest="fn_command", required=True)
    add_command(sub, SERVICE, "list", cmd_list, "the stored functions")
    put = add_command(sub, SERVICE, "put", cmd_put, "store FILE as a new version of PATH")
    put.add_argument("path")
    put.add_argument("file", help="the code (- for stdin)")
    put.add_argument(
        "--language",
        choices=sorted(set(LANGUAGES.values())),
        help="default: from the file name (.py, .js, .mjs, .ts)",
    )
    run = add_command(sub, SERVICE, "run", cmd_run, "run a stored function; its result on stdout")
    run.add_argument("path")
    given = run.add_mutually_exclusive_group()
    given.add_argument("--input", metavar="JSON", help="the input, a JSON text")
    given.add_argument("--input-file", metavar="FILE", help="the input from FILE (- for stdin)")
    run.add_argument("--version", type=int, help="that version (default: the latest)")
    run.add_argument(
        "--stream", action="store_true", help="accepted for old scripts: log lines always come"
    )
    rm = add_command(sub, SERVICE, "rm", cmd_rm, "remove a function with every version")
    rm.add_argument("path")
