"""A file replaced whole or not at all.

Every file cairn rewrites in place (tokens, keys, registries, caches, the code store) is
written the same way: a new file beside the old one, then one rename over it. A reader sees
the old file or the new one, never half of either; a failure leaves the old file as it was
and no partial file behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

# A file others may read (what `write_text` makes under the usual umask). Secrets pass 0o600.
PUBLIC = 0o644
SECRET = 0o600


def write_atomically(
    path: Path, data: bytes | str, *, mode: int = PUBLIC, durable: bool = True
) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8).

    The new file gets a unique name in ``path``'s own directory (the rename must stay on one
    file system to be atomic, and two writers must not share a half-written file), is created
    readable by its owner only and given ``mode`` before its first byte, so a secret is never
    readable by others, not even for an instant. ``durable`` flushes it to disk before the
    rename: after a power cut the path holds the old content or the new, not an empty file.
    Caches, which lose nothing but time, pass ``durable=False``. Raises OSError; ``path``'s
    directory must exist.
    """
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            if mode != SECRET:
                os.fchmod(out.fileno(), mode)
            out.write(raw)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
