"""The image store actor's NATS commands: another way in, so attacked like the HTTP one."""

from __future__ import annotations

import pytest

from actors.images.commands import DELETE_SUBJECT, STORE_SUBJECT, serve_commands
from actors.images.store import SINGLETON, Entry, GetCatalogue, ImageStoreActor, Reconcile
from actors.platform import Runtime
from events.bus import request_json
from tests.conftest import wait_for
from tests.images.conftest import Images
from tests.images.imagedata import encoded


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        ({}, 400, "malformed command"),
        ({"path": "a.png", "tmp_name": "x", "type": "image/png", "size": "many"}, 400, None),
        ({"path": "../a.png", "tmp_name": "t", "type": "image/png", "size": 1}, 400, None),
        ({"path": "/etc/a.png", "tmp_name": "t", "type": "image/png", "size": 1}, 400, None),
        ({"path": "a.png", "tmp_name": "../../secret", "type": "image/png", "size": 1}, 400, None),
        ({"path": "a.png", "tmp_name": "missing", "type": "image/png", "size": 1}, 400, None),
        ({"path": "a.html", "tmp_name": "t", "type": "text/html", "size": 1}, 415, None),
    ],
)
async def test_store_command_rules(
    images: Images, runtime: Runtime, payload: dict[str, object], status: int, message: str | None
) -> None:
    reply = await request_json(runtime.gateway_nc, STORE_SUBJECT, payload)
    assert reply["error"]["status"] == status
    if message is not None:
        assert reply["error"]["message"] == message
    assert list(images.layout.store.iterdir()) == []


async def test_store_command_refuses_a_temp_file_of_another_size(
    images: Images, runtime: Runtime
) -> None:
    (images.layout.tmp / "up-1").write_bytes(b"12345")
    payload = {"path": "a.png", "tmp_name": "up-1", "type": "image/png", "size": 4}
    reply = await request_json(runtime.gateway_nc, STORE_SUBJECT, payload)
    assert reply["error"] == {"status": 400, "message": "upload is not complete"}


@pytest.mark.parametrize("path", ["", "..", "a/../../b", "a\\b", "/abs"])
async def test_delete_command_rules(images: Images, runtime: Runtime, path: str) -> None:
    reply = await request_json(runtime.gateway_nc, DELETE_SUBJECT, {"path": path})
    assert reply["error"] == {"status": 400, "message": "invalid path"}


async def test_catalogue_is_rebuilt_from_the_stream(images: Images, runtime: Runtime) -> None:
    async with await images.upload("k", "a.png", encoded("PNG", (4, 4))) as resp:
        assert resp.status == 201
    async with await images.upload("k", "b.png", encoded("PNG", (4, 4))) as resp:
        assert resp.status == 201
    async with images.http.delete("/del/k/a.png") as resp:
        assert resp.status == 200
    await runtime.actors.stop(ImageStoreActor, SINGLETON)
    handle = await runtime.actors.spawn(ImageStoreActor, SINGLETON, layout=images.layout)
    catalogue = await handle.ask(GetCatalogue())
    assert catalogue == {"k/b.png": Entry("image/png", len(encoded("PNG", (4, 4))))}


async def test_after_a_failure_the_catalogue_catches_up_with_the_files(
    images: Images, runtime: Runtime
) -> None:
    async with await images.upload("k", "a.png", encoded("PNG", (4, 4))) as resp:
        assert resp.status == 201
    # Changes whose events never got stored: a file appeared, another went.
    images.put("k/new.png", encoded("PNG", (6, 6)))
    (images.layout.store / "k" / "a.png").unlink()
    handle = runtime.actors.get(ImageStoreActor, SINGLETON)
    assert handle is not None
    await handle.ask(Reconcile())  # what the runtime sends first after a failure

    async def caught_up() -> bool:
        catalogue = await handle.ask(GetCatalogue())
        return bool(catalogue == {"k/new.png": Entry("image/png", len(encoded("PNG", (6, 6))))})

    await wait_for(caught_up, what="the catalogue to match the files")

    async def recorded() -> list[str]:
        # The actor's state changes as it records; the append to the store follows.
        stored = [r.event.type_name for r in await runtime.store.read_stream("images:store")]
        return stored[-2:] if len(stored) >= 3 else []

    assert await wait_for(recorded, what="the changes stored") == [
        "images.stored",
        "images.deleted",
    ]


async def test_at_start_the_catalogue_catches_up_with_files_changed_while_stopped(
    images: Images, runtime: Runtime
) -> None:
    async with await images.upload("k", "a.png", encoded("PNG", (4, 4))) as resp:
        assert resp.status == 201
    await runtime.actors.stop(ImageStoreActor, SINGLETON)
    # While it is stopped: a file put into the store by hand, another removed by hand.
    images.put("k/by-hand.png", encoded("PNG", (5, 5)))
    (images.layout.store / "k" / "a.png").unlink()
    handle, subs = await serve_commands(runtime.nc, runtime.actors, images.layout)
    try:

        async def recorded() -> list[tuple[str, str]]:
            records = await runtime.store.read_stream("images:store")
            tail = [(r.event.type_name, getattr(r.event, "path", "")) for r in records]
            return tail if len(tail) >= 3 else []

        assert await wait_for(recorded, what="the changes stored") == [
            ("images.stored", "k/a.png"),  # the upload, then what start-up found:
            ("images.stored", "k/by-hand.png"),
            ("images.deleted", "k/a.png"),
        ]
        assert await handle.ask(GetCatalogue()) == {
            "k/by-hand.png": Entry("image/png", len(encoded("PNG", (5, 5))))
        }
    finally:
        for sub in subs:
            await sub.unsubscribe()
