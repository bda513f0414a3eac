"""A simulated guest's few files, and the little shell that reads and writes them.

A real guest's disk holds what a script wrote, and a rollback to a snapshot takes it back. The
simulator runs no script on the host, so each VM keeps a small map of path -> text in its
record (`guest_files`), written by the scripts cairn sends over SSH; a snapshot copies the map
(`snapshot_files`) and a rollback restores it, as a disk snapshot would.

Only simple commands at a script's top level are carried out (`echo … > FILE`, `>>`, `cat`,
`test -f`/`[ -f … ]`, `rm -f`, `true`, `false`, `exit N`, `sleep N`, `set -e`, joined by `&&`,
`||` or `;`); anything else, and whatever is inside an `if`, a loop or a function, is taken as
done (cairn's init scripts install packages this simulator does not have).
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping
from typing import Any

FILES = "guest_files"
SNAPSHOT_FILES = "snapshot_files"
# Compound commands whose body is not carried out (their opening and closing words).
_OPENS = ("if", "for", "while", "until", "case")
_CLOSES = ("fi", "done", "esac")


@dataclasses.dataclass
class Outcome:
    stdout: str = ""
    stderr: str = ""
    status: int = 0
    sleep: float = 0.0  # seconds the script slept in all


class _Exit(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


def run(script: str, files: dict[str, str]) -> Outcome:
    """Carry out `script` on `files` (changed in place)."""
    out = Outcome()
    errexit = False
    depth = 0
    try:
        for raw in script.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            first = line.split()[0]
            if first in _OPENS or line.endswith(("{", "(")):
                depth += 1
                continue
            if first in _CLOSES or line in ("}", ")"):
                depth = max(0, depth - 1)
                continue
            if depth:
                continue
            status = _line(line, files, out)
            if status is None:
                errexit = True
                continue
            out.status = status
            if errexit and status != 0:
                raise _Exit(status)
    except _Exit as stop:
        out.status = stop.status
    return out


def _line(line: str, files: dict[str, str], out: Outcome) -> int | None:
    """The status of a line's commands; None for `set -e`."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        out.stderr += "bash: unexpected EOF while looking for matching quote\n"
        return 2
    if words[:2] == ["set", "-e"]:
        return None
    status = 0
    command: list[str] = []
    skip = False  # the last `&&` or `||` decided that the next command does not run
    for word in [*words, ";"]:
        if word in (";", "&&", "||"):
            if command and not skip:
                status = _command(command, files, out)
            command = []
            skip = (word == "&&" and status != 0) or (word == "||" and status == 0)
            continue
        command.append(word)
    return status


def _command(words: list[str], files: dict[str, str], out: Outcome) -> int:
    # `>&2` (or `1>&2`) at the end: what the command prints goes to stderr.
    to_err = words[-2:] == [">&", "2"]
    if to_err:
        words = words[:-3] if words[-3:-2] == ["1"] else words[:-2]
    target, append = None, False
    for op in (">>", ">"):
        if op in words:
            at = words.index(op)
            if at + 1 < len(words):
                target, append = words[at + 1], op == ">>"
            words = words[:at]
            break
    while words and words[0] == "sudo":
        words = words[1:]
    if not words:
        return 0
    head, args = words[0], words[1:]
    text = ""
    status = 0
    if head == "echo":
        text = " ".join(args) + "\n"
    elif head == "cat":
        for path in args:
            if path in files:
                text += files[path]
            else:
                out.stderr += f"cat: {path}: No such file or directory\n"
                status = 1
    elif head in ("test", "[") and len(args) >= 2 and args[0] in ("-f", "-e"):
        return 0 if args[1] in files else 1
    elif head == "rm":
        for path in args:
            if not path.startswith("-"):
                files.pop(path, None)
        return 0
    elif head == "false":
        return 1
    elif head == "exit":
        raise _Exit(int(args[0]) if args and args[0].isdigit() else 0)
    elif head == "sleep":
        try:
            out.sleep += float(args[0]) if args else 0.0
        except ValueError:
            return 1
        return 0
    else:
        return 0  # anything else: taken as done
    if target is not None:
        files[target] = (files.get(target, "") if append else "") + text
    elif to_err:
        out.stderr += text
    else:
        out.stdout += text
    return status


def snapshot(rec: dict[str, Any], name: str) -> None:
    """A snapshot `name` of the VM in `rec` keeps its guest's files as they are."""
    rec.setdefault(SNAPSHOT_FILES, {})[name] = dict(rec.get(FILES, {}))


def rollback(rec: dict[str, Any], name: str) -> None:
    """The guest's files as snapshot `name` kept them."""
    kept: Mapping[str, str] = rec.get(SNAPSHOT_FILES, {}).get(name, {})
    rec[FILES] = dict(kept)


def forget(rec: dict[str, Any], name: str) -> None:
    rec.get(SNAPSHOT_FILES, {}).pop(name, None)
