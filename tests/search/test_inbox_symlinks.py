"""The inbox is the inbox: a symlinked folder under it is not followed by the watcher, so no
change names a file outside (issue 31: `drop/linkdir -> outside/` made the outside files
searchable). Real watcher threads on a real folder tree."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import watchfiles

from actors.search.ingest import watching


def tree(tmp_path: Path) -> tuple[Path, Path]:
    inbox, outside = tmp_path / "inbox", tmp_path / "outside"
    (inbox / "drop" / "real").mkdir(parents=True)
    (outside / "sub").mkdir(parents=True)
    (outside / "secret.txt").write_text("secret")
    (outside / "sub" / "deep.md").write_text("deep")
    (outside / "id_rsa").write_text("key")
    (inbox / "drop" / "linkdir").symlink_to(outside, target_is_directory=True)
    (inbox / "drop" / "real" / "uplink").symlink_to(outside / "sub", target_is_directory=True)
    (inbox / "drop" / "linkfile.txt").symlink_to(outside / "secret.txt")
    return inbox, outside


def test_changes_through_a_link_are_dropped(tmp_path: Path) -> None:
    inbox, _ = tree(tmp_path)
    added = watchfiles.Change.added
    drop = inbox / "drop"
    batch = {
        (added, str(drop / "note.txt")),
        (added, str(drop / "real" / "x.md")),
        (added, str(drop / "linkdir" / "secret.txt")),
        (added, str(drop / "linkdir" / "sub" / "deep.md")),
        (added, str(drop / "real" / "uplink" / "deep.md")),
        (added, str(drop / "linkdir")),
        (added, str(drop / "linkfile.txt")),
        (added, str(tmp_path / "outside" / "secret.txt")),  # a target reported as itself
        (watchfiles.Change.deleted, str(drop / "gone.txt")),
    }
    kept = watching.inside(inbox, batch)
    assert kept == {
        (added, str(drop / "note.txt")),
        (added, str(drop / "real" / "x.md")),
        (watchfiles.Change.deleted, str(drop / "gone.txt")),
    }


async def test_the_watcher_names_nothing_outside(tmp_path: Path) -> None:
    inbox, outside = tree(tmp_path)
    stop = asyncio.Event()
    seen: list[str] = []
    marker = inbox / "drop" / "marker.txt"

    async def read() -> None:
        async for batch in watching.changes(inbox, stop):
            seen.extend(path for _, path in batch)
            if str(marker) in seen:
                return

    reader = asyncio.ensure_future(read())
    # The watcher may not watch yet when the first files land: write until the marker (written
    # after the outside files each round) is reported; by then the outside writes were seen.
    n = 0
    while not reader.done():
        (outside / f"new{n}.txt").write_text("outside")
        (outside / "sub" / f"deep{n}.md").write_text("outside")
        os.symlink(outside, inbox / "drop" / f"newlink{n}")
        (inbox / "drop" / "real" / f"inside{n}.txt").write_text("inside")
        marker.write_text(str(n))
        n += 1
        await asyncio.wait([reader], timeout=0.2)
    stop.set()
    assert not [p for p in seen if "link" in p or "outside" in p or "deep" in p], seen
