"""`cairn images ls|put|rm`: the image service over HTTP (docs/images.md has the routes;
docs/cli.md this command line). ``put FOLDER FILE...`` uploads each file into FOLDER under its
own name and prints its read URL; ``rm PATH...`` moves each file to the service's trash. With
several files, every one is tried; the exit code is that of the first that failed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.cli.client import OK, USAGE, CliError, Target, Upload, call, quote_path
from gateway.cli.common import Io, add_command, clean, table

SERVICE = "images"


def cmd_ls(args: Any, t: Target, io: Io) -> int:
    folder = quote_path(args.folder or "")
    body = call(t, "GET", f"/ls/{folder}" if folder else "/ls").json()
    if io.json:
        io.document(body)
        return 0
    entries = body.get("entries") or []
    rows = [
        (
            "dir" if e.get("is_dir") else (e.get("type") or "?"),
            "-" if e.get("is_dir") else e.get("size"),
            e.get("modified"),
            f"{e.get('name')}/" if e.get("is_dir") else e.get("name"),
        )
        for e in entries
    ]
    where = body.get("path") or "/"
    io.say(table(("TYPE", "SIZE", "MODIFIED", "NAME"), rows) if rows else f"{clean(where)}: empty")
    if body.get("truncated"):
        io.note(f"{where}: more entries than shown (the service lists at most 5000)")
    return 0


def _each(io: Io, items: list[str], one: Any) -> tuple[int, list[dict[str, Any]]]:
    """Run ``one(item)`` for every item; the first failure's exit code and every outcome."""
    code = OK
    results: list[dict[str, Any]] = []
    for item in items:
        try:
            results.append(one(item))
        except CliError as exc:
            io.note(f"{item}: {exc.message}")
            results.append({"item": item, "error": exc.message, "status": exc.status})
            code = code or exc.code
    return code, results


def cmd_put(args: Any, t: Target, io: Io) -> int:
    folder = quote_path(args.folder)
    if not folder:
        raise CliError(USAGE, "images put: give the folder to upload into, e.g. photos/2026")

    def one(file: str) -> dict[str, Any]:
        try:
            data = Path(file).read_bytes()
        except OSError as exc:
            raise CliError(USAGE, f"cannot read it: {(exc.strerror or 'error').lower()}") from None
        name = Path(file).name
        stored = call(t, "POST", f"/upload/{folder}", Upload("filepath", name, data)).json()
        # The service answers a path on itself; what a user pastes into a browser is a URL.
        url = t.base + str(stored.get("src", ""))
        io.say(f"{clean(url)}  ({clean(stored.get('type'))}, {stored.get('size')} B)")
        return {"item": file, **stored, "url": url}

    code, results = _each(io, args.files, one)
    if io.json:
        io.document({"ok": code == OK, "results": results})
    return code


def cmd_rm(args: Any, t: Target, io: Io) -> int:
    def one(path: str) -> dict[str, Any]:
        quoted = quote_path(path)
        if not quoted:
            raise CliError(USAGE, "an empty path")
        body = call(t, "DELETE", f"/del/{quoted}").json()
        io.say(clean(body.get("message") or f"{path} deleted"))
        return {"item": path, **body}

    code, results = _each(io, args.paths, one)
    if io.json:
        io.document({"ok": code == OK, "results": results})
    return code


def register(subparsers: Any) -> None:
    images = subparsers.add_parser("images", help="images over HTTP: ls, put, rm")
    sub = images.add_subparsers(dest="images_command", required=True)
    ls = add_command(sub, SERVICE, "ls", cmd_ls, "what a folder holds (the top without FOLDER)")
    ls.add_argument("folder", nargs="?")
    put = add_command(sub, SERVICE, "put", cmd_put, "upload FILEs into FOLDER")
    put.add_argument("folder")
    put.add_argument("files", nargs="+", metavar="FILE")
    rm = add_command(sub, SERVICE, "rm", cmd_rm, "delete files (moved to the service's trash)")
    rm.add_argument("paths", nargs="+", metavar="PATH")
