"""One VM's detail (`GET /api/vm/<id>`), the list while an install runs, and the download's
progress records."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from actors.vm.fakemirror import IMAGE_BYTES, mirror_files
from actors.vm.install import DownloadReport
from tests.conftest import wait_for
from tests.vm import drivers
from tests.vm.conftest import Service, Sse, read_sse
from tests.vm.drivers import cli_only

# Every test here runs with both drivers (tests/vm/drivers.py).
driver = drivers.driver
start_service = drivers.start_service


STEP_DOWNLOAD = "OS preparation > downloading OS image"


async def _get_json(service: Service, path: str) -> tuple[int, Any]:
    status, text = await service.get(path)
    return status, json.loads(text) if status == 200 else text


async def test_a_vm_shows_its_name_address_and_user_while_it_installs_and_all_after(
    service: Service,
) -> None:
    gate = asyncio.Event()
    service.mirror.gate = gate  # the download waits: the install is held mid-way
    records: list[dict[str, Any]] = []

    async def install() -> Sse:
        async with service.session.post(
            service.api + "/vm/install",
            json={"os": "debian", "version": "12", "name": "web1", "user": "deploy"},
        ) as resp:
            vmid = int(resp.headers["X-VM-Id"])
            records.append({"vmid": vmid})
            return await read_sse(resp)

    running = asyncio.create_task(install())
    await wait_for(lambda: records, what="the install's first answer")
    vmid = records[0]["vmid"]

    async def downloading() -> bool:
        status, detail = await _get_json(service, f"/vm/{vmid}")
        return status == 200 and detail["state"] == "installing"

    await wait_for(downloading, what="the install under way")
    _, listing = await _get_json(service, "/vm/list")
    row = next(r for r in listing["list"] if r["vmid"] == vmid)
    assert (row["name"], row["ip"], row["user"], row["state"]) == (
        "web1",
        f"127.0.0.{vmid}",
        "deploy",
        "installing",
    )
    _, during = await _get_json(service, f"/vm/{vmid}")
    assert during["task"] is not None and during["created_at"] is None
    assert during["last_task"]["command"] == "install"
    assert during["last_task"]["ok"] is None and during["last_task"]["ended_at"] is None

    gate.set()
    sse = await running
    assert sse.last["status"] == "success", sse.records[-3:]
    status, detail = await _get_json(service, f"/vm/{vmid}")
    assert status == 200
    task = during["task"]
    assert {k: detail[k] for k in ("vmid", "name", "os", "version", "node", "state")} == {
        "vmid": vmid,
        "name": "web1",
        "os": "debian",
        "version": "12",
        "node": "pve1",
        "state": "running",
    }
    assert (detail["cpu"], detail["memory"], detail["disk"]) == (2, 2048, 16)
    assert (detail["ip"], detail["user"], detail["running"]) == (f"127.0.0.{vmid}", "deploy", True)
    assert detail["created_by_cairn"] is True
    assert detail["mark"] == f"created by cairn, install task {task}"
    assert detail["task"] is None
    last = detail["last_task"]
    assert (last["task"], last["command"], last["ok"], last["error"]) == (
        task,
        "install",
        True,
        None,
    )
    iso = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$")
    assert all(iso.match(v) for v in (detail["created_at"], last["started_at"], last["ended_at"]))
    assert last["started_at"] <= detail["created_at"] <= last["ended_at"]


async def test_an_unknown_or_malformed_id(service: Service) -> None:
    assert await service.get("/vm/199") == (404, "VM 199 not found")
    assert await service.get("/vm/abc") == (400, "invalid VM id 'abc'")


async def test_a_download_reports_how_far_it_got(
    start_service: Any,
    driver: str,
) -> None:
    cli_only(driver, "through the API the node downloads the image itself (download-url)")
    service: Service = await start_service(VM_PROGRESS_INTERVAL="0")
    big = IMAGE_BYTES + bytes(3 * 1024 * 1024 - len(IMAGE_BYTES))
    service.mirror.files.update(mirror_files(big))
    sse = await service.install()
    assert sse.last["status"] == "success", sse.records[-3:]
    notes = [
        r["message"]
        for r in sse.records
        if r["step"] == STEP_DOWNLOAD and r["status"] == "processing"
    ]
    seen = [re.search(r"downloaded (\d+)% \((\d+\.\d) MiB of 3\.0 MiB\)", n) for n in notes]
    percents = [int(m.group(1)) for m in seen if m]
    assert len(percents) >= 2, notes
    assert percents == sorted(percents) and percents[-1] == 100
    assert any("downloaded 100% (3.0 MiB of 3.0 MiB)" in n for n in notes)


def test_download_notes_come_at_most_once_an_interval_and_always_at_the_end() -> None:
    now = [0.0]
    notes: list[str] = []
    report = DownloadReport(notes.append, 1.0, clock=lambda: now[0])
    mib = 1 << 20
    for at, done in ((0.0, mib), (0.5, 2 * mib), (1.2, 3 * mib), (1.3, 4 * mib)):
        now[0] = at
        report(done, 4 * mib)
    assert notes == [
        "downloaded 25% (1.0 MiB of 4.0 MiB)",
        "downloaded 75% (3.0 MiB of 4.0 MiB)",
        "downloaded 100% (4.0 MiB of 4.0 MiB)",
    ]
    unknown: list[str] = []
    DownloadReport(unknown.append, 1.0, clock=lambda: 0.0)(5 * mib, None)
    assert unknown == ["downloaded 5.0 MiB"]
