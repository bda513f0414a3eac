"""The audit trail in cluster mode: functions and images changed through different hosts, as
different tokens, carry who asked across the bus. The events the lease holder stores and signs
hold their `by`; a follower that checks every signature (as the console's feed and the image
hosts do) gets it; `cairn events tail` on the cluster prints it; and the journal of the host
that holds the service's lease names it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import aiohttp
from nats.aio.msg import Msg

from events.follow import Follower
from events.permissions import Role
from gateway.http.tokens import FILE_NAME, create
from gateway.http.tokens import Role as TokenRole
from tests.cluster.conftest import Cluster, Host, dump, journal
from tests.conftest import wait_for
from tests.images.imagedata import encoded
from tests.processes import tail_lines

PNG = encoded("PNG", (16, 12))
CODE = "def handler(x):\n    return 1\n"
WANTED = [
    ("functions.version_stored", "team/billing", "ada"),
    ("functions.version_stored", "team/billing", "bert"),
    ("functions.deleted", "team/billing", "ada"),
    ("images.stored", "cats/a.png", "bert"),
    ("images.deleted", "cats/a.png", "ada"),
]


def tokens_on_every_host(cluster: Cluster) -> tuple[str, str]:
    """Two admins, made on the first host and copied to the others (docs: one tokens.json
    for the cluster, copied to each host)."""
    made = Path(cluster.hosts[0].env["CAIRN_DATA"]) / FILE_NAME
    ada, bert = create(made, "ada", TokenRole.ADMIN), create(made, "bert", TokenRole.ADMIN)
    for host in cluster.hosts[1:]:
        shutil.copy2(made, Path(host.env["CAIRN_DATA"]) / FILE_NAME)
    return ada, bert


async def ok(host: Host, method: str, url: str, token: str, **kwargs: Any) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with host.session.request(method, url, headers=headers, **kwargs) as resp:
        assert resp.status in (200, 201), (host.name, url, resp.status, await resp.text())


def image_form() -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("filepath", PNG, filename="a.png", content_type="image/png")
    return form


async def test_who_asked_survives_the_bus(cluster: Cluster) -> None:
    first, second, third = cluster.hosts
    ada, bert = tokens_on_every_host(cluster)
    signer = cluster.nats.access.signer()
    assert signer is not None, "the cluster's bus signs its events"
    heard: list[dict[str, Any]] = []

    async def on_event(_: int, msg: Msg) -> None:
        heard.append(json.loads(msg.data))

    nc = await cluster.nats.connect(Role.GATEWAY)
    try:
        followers = [
            await Follower(nc, subject, on_event, signer=signer).start()
            for subject in ("cairn.evt.functions.>", "cairn.evt.images.>")
        ]
        upload = {"path": "team/billing", "language": "python", "code": CODE}
        await ok(first, "POST", f"{first.functions_url}/upload", ada, json=upload)
        upload["code"] = CODE.replace("1", "2")
        await ok(second, "POST", f"{second.functions_url}/upload", bert, json=upload)
        await ok(third, "DELETE", f"{third.functions_url}/functions/team/billing", ada)
        await ok(second, "POST", f"{second.images_url}/upload/cats", bert, data=image_form())
        await ok(first, "DELETE", f"{first.images_url}/del/cats/a.png", ada)
        await wait_for(lambda: len(heard) >= len(WANTED), timeout=30, what="the signed events")
        for follower in followers:
            await follower.stop()
    finally:
        await nc.close()
    heard.sort(key=lambda body: int(body["position"]))
    got = [(b["type"], b["data"]["path"], b["data"].get("by")) for b in heard]
    assert got == WANTED, dump(cluster)
    assert signer.dropped == 0

    printed = []
    kinds = ("functions", "images")
    for line in await tail_lines({**os.environ, **third.env}, len(WANTED), kinds=kinds):
        fields = dict(f.split("=", 1) for f in line.split()[4:] if "=" in f)
        printed.append((line.split()[3], fields["path"], fields.get("by")))
    assert printed == WANTED

    # The journal line is written where the event is stored: the lease holder's log.
    registry = await cluster.runner_of("functions_url")
    store = await cluster.runner_of("images_url")
    stored = r"function team/billing: version \d+ stored \(python, \d+ bytes\), asked by "
    assert len(journal(registry, stored + "ada$")) == 1, registry.log()[-4000:]
    assert len(journal(registry, stored + "bert$")) == 1
    assert journal(registry, r"function team/billing: deleted \(2 versions\), asked by ada$")
    assert journal(store, r"images: stored cats/a.png \(image/png, \d+ bytes\), asked by bert$")
    assert journal(store, r"images: deleted cats/a.png, asked by ada$")
    for host in cluster.hosts:
        assert ada not in host.log() and bert not in host.log()  # names, never tokens
