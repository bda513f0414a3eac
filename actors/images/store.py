"""The image store actor: the one place that puts files into the served tree or takes them out.

A singleton, because the order of writes to one path must be one decision: the rename that
publishes an upload, or moves a file to the trash, happens inside the handler together with
the event that records it, so the stream's order is the order the files changed. A rename
within one file system is a metadata operation of microseconds, which is why it is done here
and not as a job; the upload's bytes were already written (by the gateway, to a temp file on
the same file system) and never travel through the mailbox.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from pathlib import Path
from typing import Any

import attrs

from actors.images.events import ImageDeleted, ImageStored, deleted, stored
from actors.images.layout import StoreLayout
from actors.images.paths import UnsafePath, clean_filename, clean_relpath, entry_path
from actors.images.sniff import KINDS, SNIFF_BYTES, sniff
from actors.runtime import AggregateActor, Rejected
from events.errors import disk_full, reason
from events.model import Event

log = logging.getLogger(__name__)

SINGLETON = "store"


@attrs.frozen
class StoreFile:
    """Publish the finished temp file ``tmp_name`` (a name inside the layout's tmp dir)."""

    path: str
    tmp_name: str
    type: str
    size: int
    by: str | None = None  # who asked, recorded in the event (the audit trail)


@attrs.frozen
class DeleteFile:
    path: str
    by: str | None = None  # who asked, recorded in the event


@attrs.frozen
class GetCatalogue:
    """What the actor believes is stored (for operators and tests; reads use the files)."""


@attrs.frozen
class Entry:
    type: str
    size: int


@attrs.frozen
class Reconcile:
    """At start and after a failure: the files may have changed without their events being
    stored."""


@attrs.frozen
class _Found:
    files: Any  # dict[str, Entry], or the exception the scan died of


def scan(store: Path) -> dict[str, Entry]:
    """What the store tree holds: each file's path, sniffed type and size."""
    found: dict[str, Entry] = {}
    for folder, _, names in os.walk(store):
        for name in names:
            path = Path(folder) / name
            try:
                with path.open("rb") as fh:
                    kind = sniff(fh.read(SNIFF_BYTES))
                size = path.stat().st_size
            except OSError:
                continue
            if kind is not None:
                found[path.relative_to(store).as_posix()] = Entry(kind.mime, size)
    return found


class ImageStoreActor(AggregateActor):
    aggregate = "images"

    def setup(self, **kwargs: Any) -> None:
        layout = kwargs.pop("layout")
        super().setup(**kwargs)
        self.layout: StoreLayout = layout
        self.catalogue: dict[str, Entry] = {}
        self.deleted = 0

    def apply(self, event: Event) -> None:
        if isinstance(event, ImageStored):
            self.catalogue[event.path] = Entry(event.type, event.size)
        elif isinstance(event, ImageDeleted):
            self.catalogue.pop(event.path, None)
            self.deleted += 1

    def handle(self, message: Any) -> Any:
        if isinstance(message, StoreFile):
            return self._store(message)
        if isinstance(message, DeleteFile):
            return self._delete(message)
        if isinstance(message, GetCatalogue):
            return dict(self.catalogue)
        if isinstance(message, Reconcile):
            self.start_job(asyncio.to_thread(scan, self.layout.store), done=_Found)
            return None
        if isinstance(message, _Found):
            return self._reconciled(message.files)
        raise TypeError(f"unknown command {type(message).__name__}")

    def recovery(self, reason: str) -> Reconcile:
        return Reconcile()

    def _reconciled(self, files: Any) -> None:
        """Record what changed on disk without an event (an upload or delete whose event the
        store refused), so the catalogue and the other hosts' caches catch up."""
        if not isinstance(files, dict):
            log.error("image store: the store tree could not be read: %r", files)
            return None
        changes: list[Event] = [
            stored(rel, entry.type, entry.size)
            for rel, entry in sorted(files.items())
            if self.catalogue.get(rel) != entry
        ]
        changes += [deleted(rel, "") for rel in sorted(set(self.catalogue) - set(files))]
        if changes:
            log.warning("image store: recording %d change(s) found on disk", len(changes))
            self.record(*changes)
        return None

    def _target(self, raw: str) -> tuple[str, Path]:
        """The directory entry ``raw`` names, its parent resolved: a final symlink is itself
        replaced or deleted, never written through."""
        try:
            rel = clean_relpath(raw, trim=False)
            return rel, entry_path(self.layout.store, rel)
        except UnsafePath as exc:
            raise Rejected(400, "invalid path") from exc

    def _store(self, cmd: StoreFile) -> dict[str, Any]:
        rel, target = self._target(cmd.path)
        if cmd.type not in {k.mime for k in KINDS.values()}:
            raise Rejected(415, "unsupported file type")
        try:
            tmp = self.layout.tmp / clean_filename(cmd.tmp_name)
        except UnsafePath as exc:
            raise Rejected(400, "invalid temp file") from exc
        if not tmp.is_file() or tmp.stat().st_size != cmd.size:
            raise Rejected(400, "upload is not complete")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            # mkdir may have walked through a symlink created since the check: check again
            target = entry_path(self.layout.store, rel)
            if target.is_dir() and not target.is_symlink():
                raise Rejected(409, "a directory exists at this path")
            os.replace(tmp, target)
        except UnsafePath as exc:
            raise Rejected(400, "invalid path") from exc
        except (FileExistsError, NotADirectoryError) as exc:
            raise Rejected(409, self._file_in_the_way(rel)) from exc
        except OSError as exc:
            raise _write_failed("store the upload", exc) from exc
        self.record(stored(rel, cmd.type, cmd.size, cmd.by))
        return {"path": rel, "type": cmd.type, "size": cmd.size}

    def _file_in_the_way(self, rel: str) -> str:
        """Say which file stands where a folder of ``rel`` should be: usually the upload path
        named a file (``/upload/cats/a.png``) where it names the folder the file goes into."""
        parts = rel.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folder = "/".join(parts[:depth])
            if (self.layout.store / folder).is_file():
                return (
                    f"a file is in the way of this path: {folder} is a file; the upload path is "
                    f"the folder the file goes into (its name comes from the upload)"
                )
        return "a file is in the way of this path"

    def _delete(self, cmd: DeleteFile) -> dict[str, Any]:
        rel, target = self._target(cmd.path)
        if not (target.is_file() or target.is_symlink()):
            raise Rejected(404, "file not found")
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        trashed_as = f"{stamp}-{secrets.token_hex(4)}/{rel}"
        dest = self.layout.trash / trashed_as
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(target, dest)
        except OSError as exc:
            raise _write_failed("move the file to the trash", exc) from exc
        self.record(deleted(rel, trashed_as, cmd.by))
        return {"path": rel}


def _write_failed(what: str, exc: OSError) -> Rejected:
    if disk_full(exc):
        return Rejected(507, f"disk full: cannot {what}")
    return Rejected(500, f"cannot {what}: {reason(exc)}")
