"""The code store of a cluster (``actors/functions/sharedcode.py``): an object is written once;
one that vanished from the bucket is put back from a host that holds a copy; one the registry
deleted (no version uses it) stays deleted."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client

from actors.functions.codestore import CodeStore
from actors.functions.sharedcode import BUCKET, SharedCode

CODE = "def main(input):\n    return 42\n"


async def test_a_lost_object_is_healed_from_another_hosts_copy(nc: Client, tmp_path: Path) -> None:
    first = SharedCode(nc, CodeStore(tmp_path / "first"))
    second = SharedCode(nc, CodeStore(tmp_path / "second"))
    sha = await first.put(CODE)
    # The bucket loses the object (its messages purged: what an outsider did before the bus
    # was closed, or a lost store).
    await nc.jetstream().purge_stream(f"OBJ_{BUCKET}")
    with pytest.raises(FileNotFoundError, match=f"code {sha} is in no host's store"):
        await second.get(sha)
    assert await second.heal() == []  # it holds no copy
    assert await first.heal() == [sha]
    assert await second.get(sha) == CODE
    assert await first.heal() == []  # nothing left to heal


async def test_code_the_registry_deleted_is_not_brought_back(nc: Client, tmp_path: Path) -> None:
    registry = SharedCode(nc, CodeStore(tmp_path / "registry"))
    other = SharedCode(nc, CodeStore(tmp_path / "other"))
    sha = await registry.put(CODE)
    assert await other.get(sha) == CODE  # the other host has a copy now
    await registry.remove(sha)  # no version uses it any more
    assert await other.heal() == []
    third = SharedCode(nc, CodeStore(tmp_path / "third"))
    with pytest.raises(FileNotFoundError):
        await third.get(sha)


async def test_an_object_is_written_once(nc: Client, tmp_path: Path) -> None:
    code = SharedCode(nc, CodeStore(tmp_path / "host"))
    sha = await code.put(CODE)
    info = await nc.jetstream().stream_info(f"OBJ_{BUCKET}")
    again = await SharedCode(nc, CodeStore(tmp_path / "another")).put(CODE)
    assert again == sha
    after = await nc.jetstream().stream_info(f"OBJ_{BUCKET}")
    assert after.state.messages == info.state.messages  # nothing written the second time
