"""Path safety for the image store: a URL path becomes a file under the root, or nothing.

Two layers, as aiohttp's static handler does it: first a lexical check of the already
percent-decoded path (no ``..`` or ``.`` segment, no backslash, no NUL or control character, no
empty segment, bounded lengths), then ``resolve()`` and ``relative_to(root)`` so a symlink inside
the store that points outside it is refused too. Nothing here decodes percent escapes again: a
literal ``%2e%2e`` after the server's single decoding is an ordinary, harmless file name.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_PATH_LEN = 1024
MAX_SEGMENT_LEN = 255


class UnsafePath(ValueError):
    """The path would leave the store, or is not a plain relative path."""


def clean_relpath(raw: str, *, trim: bool = True, allow_empty: bool = False) -> str:
    """Validate a relative path; with ``trim`` leading and trailing ``/`` are dropped first
    (a wildcard route's tail may come with or without them), without it an absolute path is
    an error."""
    path = raw.strip("/") if trim else raw
    if not path:
        if allow_empty:
            return ""
        raise UnsafePath("empty path")
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_LEN:
        raise UnsafePath("path too long")
    if path.startswith("/"):
        raise UnsafePath("absolute path")
    if "\\" in path:
        raise UnsafePath("backslash in path")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        raise UnsafePath("control character in path")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise UnsafePath("relative or empty segment in path")
        if len(segment.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_LEN:
            raise UnsafePath("path segment too long")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise UnsafePath("path is not valid UTF-8") from None
    return path


def clean_filename(raw: str | None) -> str:
    """A single path segment (an upload's file name)."""
    if raw is None or "/" in raw:
        raise UnsafePath("invalid file name")
    return clean_relpath(raw, trim=False)


def resolve_under(root: Path, relpath: str) -> Path:
    """``root/relpath`` with every symlink resolved; raises :class:`UnsafePath` unless the
    result is still inside ``root`` (which must itself be resolved) and is not ``root``."""
    try:
        target = (root / relpath).resolve(strict=False)
    except (OSError, RuntimeError) as exc:  # symlink loops raise RuntimeError/OSError
        raise UnsafePath("unresolvable path") from exc
    try:
        rel = target.relative_to(root)
    except ValueError:
        raise UnsafePath("path leaves the store") from None
    if not rel.parts:
        raise UnsafePath("path is the store itself")
    return target


def safe_path(root: Path, raw: str, *, trim: bool = True) -> tuple[str, Path]:
    """Lexical check then resolution; returns the clean relative path and the real file."""
    rel = clean_relpath(raw, trim=trim)
    return rel, resolve_under(root, rel)


def lookup(root: Path, raw: str) -> tuple[str, Path, os.stat_result]:
    """The read path's :func:`safe_path` plus the file's ``stat``, in as few system calls as
    the common case allows: one ``lstat`` per segment below the (already resolved) root, and
    the full ``resolve`` only when a segment is a symlink. Raises :class:`UnsafePath`, or
    ``OSError`` when the file does not exist."""
    rel = clean_relpath(raw)
    current = str(root)
    for segment in rel.split("/"):
        current = f"{current}/{segment}"
        st = os.lstat(current)
        if stat.S_ISLNK(st.st_mode):
            target = resolve_under(root, rel)
            return rel, target, os.stat(target)
    return rel, Path(current), st


def entry_path(root: Path, relpath: str) -> Path:
    """The directory entry for ``relpath`` with its parent resolved under ``root``; the last
    component is left alone so a symlink there is handled as the link itself (for writes and
    deletes, which must never follow a link)."""
    parent, _, name = relpath.rpartition("/")
    base = resolve_under(root, parent) if parent else root
    return base / name
