"""Images across the cluster's hosts on one shared image tree: uploaded through one host,
served by all; deleted through another, gone from all (each host purges its caches from the
events it follows); the store actor runs on one host, the holder of the `images` lease."""

from __future__ import annotations

import aiohttp
import pytest

from tests.cluster.conftest import Cluster, Host
from tests.conftest import wait_for
from tests.images.imagedata import encoded
from tests.vm.drivers import DRIVERS

# With both drivers (issue 27): the hosts drive the simulated Proxmox through its CLI or its API.
pytestmark = pytest.mark.parametrize("pve_driver", DRIVERS, indirect=True)

PNG = encoded("PNG", (64, 48))


async def _get(host: Host, path: str) -> tuple[int, bytes]:
    async with host.session.get(f"{host.images_url}/c/img/{path}") as resp:
        return resp.status, await resp.read()


async def test_upload_through_one_host_read_through_all_delete_through_another(
    cluster: Cluster,
) -> None:
    first, second, third = cluster.hosts
    form = aiohttp.FormData()
    form.add_field("filepath", PNG, filename="cat.png")
    async with first.session.post(f"{first.images_url}/upload/pets", data=form) as resp:
        assert resp.status == 201, await resp.text()
    for host in cluster.hosts:
        assert await _get(host, "pets/cat.png") == (200, PNG), host.name
        status, small = await _get(host, "pets/cat.png?w=16&t=webp")
        assert status == 200 and small[8:12] == b"WEBP", host.name  # a variant, cached
    async with third.session.delete(f"{third.images_url}/del/pets/cat.png") as resp:
        assert resp.status == 200, await resp.text()

    async def gone_everywhere() -> bool:
        for host in cluster.hosts:
            for path in ("pets/cat.png", "pets/cat.png?w=16&t=webp"):
                if (await _get(host, path))[0] != 404:
                    return False
        return True

    # Each host hears of the deletion through JetStream and drops its cached variant.
    await wait_for(gone_everywhere, timeout=10, what="the image gone from every host")
    owners = [h.name for h in cluster.hosts if await h.runs(h.images_url)]
    assert len(owners) == 1, owners
    assert second.alive
