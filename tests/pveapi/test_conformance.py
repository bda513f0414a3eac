"""Proven against artefacts nobody here wrote: PVE's own API schema and proxmoxer.

- Every request the VM service's API driver sent during an install and every lifecycle command,
  and every answer of the simulated pveproxy, checked against the schema of that PVE release.
- proxmoxer (a third-party client from PyPI) drives the simulated pveproxy: version, nodes,
  nextid, create, task polling, config, start/stop, delete with purge, and the error shapes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pvesim.cluster import SimCluster

from tests.pveapi.schema import (
    RELEASES,
    schema_or_skip,
    template_for,
    validate_request,
    validate_return,
)
from tests.vm import conftest as vm_fixtures
from tests.vm.conftest import Service
from tests.vm.drivers import answering

LIFECYCLE: list[tuple[str, dict[str, Any] | None]] = [
    ("stop", None), ("set/cpu", {"cpu": 2}), ("set/memory", {"memory": 1024}),
    ("set/disk", {"disk": "4G"}), ("set/node", {"node": "pve3"}), ("start", None),
    ("reboot", None), ("shutdown", None), ("destroy", None),
]  # fmt: skip
# The endpoints of a template build and a clone, which the trimmed schema files were cut
# without: their requests are checked by the simulated pveproxy's parameter tables (read from
# PVE's API2/Qemu.pm), which refuse any other parameter, in tests/vm/test_templates_e2e.py with
# the API driver; here they must be seen, and are not checked against the schema.
NOT_IN_SCHEMA = {
    "POST /nodes/{node}/qemu/{vmid}/template",
    "POST /nodes/{node}/qemu/{vmid}/clone",
}
sim = vm_fixtures.sim
mirror = vm_fixtures.mirror
start_service = vm_fixtures.start_service


def test_the_validator_reports_what_pve_reports() -> None:
    """The validator itself, on the two cases the schema's README documents."""
    old = schema_or_skip("7.4")
    create = old["/nodes/{node}/qemu"]["POST"]
    assert validate_request(create, {"node": "pve1", "vmid": "120", "ciupgrade": "0"}) == {
        "ciupgrade": "property is not defined in schema"
    }
    download = schema_or_skip("8.2")["/nodes/{node}/storage/{storage}/download-url"]["POST"]
    params = {
        "node": "pve1",
        "storage": "local",
        "content": "import",
        "filename": "d.qcow2",
        "url": "https://x/d.qcow2",
    }
    assert set(validate_request(download, params)) == {"content"}
    assert validate_request(create, {"node": "pve1", "vmid": "120", "numa": "true"}) == {
        "numa": "type check ('boolean') failed - got 'true'"
    }


@pytest.mark.parametrize("templates", ["1", "0"], ids=["templates", "import"])
@pytest.mark.parametrize("release", ["8.4", "9.1"])
async def test_every_request_and_answer_of_an_install_and_the_lifecycle_fits_the_schema(
    sim: SimCluster, start_service: Any, release: str, templates: str
) -> None:
    """Both install paths: the default (a template built, then cloned) and the import of the
    image into the VM itself (VM_TEMPLATES=0)."""
    endpoints = schema_or_skip(release)
    sim.set_api_version(release)
    assert sim.pveproxy is not None
    service: Service = await start_service(PVE_DRIVER="api", VM_TEMPLATES=templates)
    await answering(service)
    sse = await service.install(id=130, node="pve2", disk="20G", pubkey=vm_fixtures_pubkey())
    assert sse.closed, sse.text
    assert sse.last["status"] == "success", sse.records[-3:]
    for command, body in LIFECYCLE:
        status, text = await service.post(f"/vm/130/{command}", body)
        assert status == 200 and "error" not in text, (command, text)
    problems: list[str] = []
    seen: set[str] = set()
    unchecked: set[str] = set()
    for ex in list(sim.pveproxy.journal):
        beyond = {u for u in NOT_IN_SCHEMA if template_for(_one(u), ex.path) is not None}
        if beyond and ex.method == "POST":
            unchecked |= beyond
            continue
        found = template_for(endpoints, ex.path)
        assert found is not None, f"{ex.method} {ex.path}: not an endpoint of PVE {release}"
        template, values = found
        method = endpoints[template].get(ex.method)
        assert method is not None, f"{ex.method} {template}: no such method in PVE {release}"
        seen.add(f"{ex.method} {template}")
        bad = validate_request(method, {**values, **ex.params})
        if bad:
            problems.append(f"request {ex.method} {ex.path}: {bad}")
        if ex.status == 200:
            problems += [
                f"answer {ex.method} {template}: {p}"
                for p in validate_return(method.get("returns", {}), ex.data)
            ]
    assert problems == []
    # What the driver used, so a silently skipped part of the pipeline shows here.
    assert {
        "POST /nodes/{node}/storage/{storage}/download-url",
        "POST /nodes/{node}/qemu",
        "PUT /nodes/{node}/qemu/{vmid}/resize",
        "POST /nodes/{node}/qemu/{vmid}/migrate",
        "DELETE /nodes/{node}/qemu/{vmid}",
        "GET /nodes/{node}/tasks/{upid}/status",
        "GET /cluster/resources",
        "GET /version",
    } <= seen
    if templates == "1":  # built, cloned, and the token's permissions asked first
        assert unchecked == NOT_IN_SCHEMA
        assert "GET /access/permissions" in seen
    else:
        assert unchecked == set()


def _one(endpoint: str) -> dict[str, Any]:
    """An endpoint (`METHOD /path`) as a one-path schema, to match paths against it."""
    method, path = endpoint.split(" ", 1)
    return {path: {method: {}}}


def vm_fixtures_pubkey() -> str:
    from tests.vm.helpers import PUBKEY

    return PUBKEY


@pytest.mark.parametrize("release", RELEASES)
async def test_the_simulated_answers_of_each_release_fit_its_schema(
    tmp_path: Path, release: str
) -> None:
    """Version-dependent answers (resize null on 7.4, memory as a string from 8.x, ...)."""
    endpoints = schema_or_skip(release)
    from actors.vm.pveapi.tasks import wait_task
    from tests.pveapi.conftest import client_for

    async with SimCluster(tmp_path / "pve", delay_scale=0, statd_lag=0) as cluster:
        cluster.set_api_version(release)
        api = client_for(cluster)
        try:
            params = {
                "vmid": 140,
                "name": "c140",
                "memory": 1024,
                "cores": 2,
                "net0": "virtio,bridge=vmbr0",
                "scsi0": "local-lvm:4",
            }
            assert (await wait_task(api, await api.post("/nodes/pve1/qemu", params))).ok
            await api.get("/nodes/pve1/qemu/140/config")
            await api.get("/nodes/pve1/qemu/140/status/current")
            await api.get("/cluster/resources", {"type": "vm"})
            await api.get("/nodes")
            await api.get("/cluster/nextid")
            resized = await api.put("/nodes/pve1/qemu/140/resize", {"disk": "scsi0", "size": "+1G"})
            if resized is not None:
                await wait_task(api, resized)
        finally:
            await api.close()
        assert cluster.pveproxy is not None
        problems: list[str] = []
        for ex in cluster.pveproxy.journal:
            found = template_for(endpoints, ex.path)
            assert found is not None
            method = endpoints[found[0]][ex.method]
            bad = validate_request(method, {**found[1], **ex.params})
            problems += [f"{ex.method} {ex.path} {k}: {v}" for k, v in bad.items()]
            if ex.status == 200:
                problems += validate_return(method.get("returns", {}), ex.data)
        assert problems == []


# --- proxmoxer ----------------------------------------------------------------------------------


@pytest.fixture
def proxmox(sim: SimCluster) -> Iterator[Any]:
    proxmoxer = pytest.importorskip("proxmoxer", reason="proxmoxer is a dev dependency")
    env = sim.api_env()
    assert sim.pveproxy is not None and sim.pveproxy.cert_path is not None
    tokenid, secret = env["PVE_API_TOKEN"].rsplit("=", 1)
    user, name = tokenid.split("!")
    host, port = env["PVE_API_URL"].removeprefix("https://").rsplit(":", 1)
    yield proxmoxer.ProxmoxAPI(
        host,
        port=int(port),
        user=user,
        token_name=name,
        token_value=secret,
        verify_ssl=str(sim.pveproxy.cert_path),
        timeout=30,
    )


def _blocking(prox: Any, upid: str) -> dict[str, Any]:
    from proxmoxer.tools import Tasks

    status: dict[str, Any] = Tasks.blocking_status(prox, upid, timeout=30, polling_interval=0.05)
    return status


async def test_proxmoxer_drives_the_simulated_pveproxy(sim: SimCluster, proxmox: Any) -> None:
    from proxmoxer import ResourceException

    def scenario() -> None:
        assert proxmox.version.get()["release"] == "8.4"
        assert sorted(n["node"] for n in proxmox.nodes.get()) == ["pve1", "pve2", "pve3"]
        vmid = int(proxmox.cluster.nextid.get())
        upid = proxmox.nodes("pve2").qemu.post(
            vmid=vmid,
            name="px",
            memory=1024,
            cores=1,
            net0="virtio,bridge=vmbr0",
            scsi0="local-lvm:2",
        )
        assert _blocking(proxmox, upid)["exitstatus"] == "OK"
        vm = proxmox.nodes("pve2").qemu(vmid)
        assert vm.config.get()["name"] == "px"
        assert _blocking(proxmox, vm.status.start.post())["exitstatus"] == "OK"
        assert vm.status.current.get()["status"] == "running"
        again = _blocking(proxmox, vm.status.start.post())
        assert again["exitstatus"] == f"VM {vmid} already running"  # a task error: HTTP 200
        assert _blocking(proxmox, vm.status.stop.post())["exitstatus"] == "OK"
        assert _blocking(proxmox, vm.delete(purge=1))["exitstatus"] == "OK"
        assert sim.vm(vmid) is None

        with pytest.raises(ResourceException) as bad:
            proxmox.nodes("pve1").qemu.post(vmid=vmid, numa="yes")
        assert bad.value.status_code == 400
        assert bad.value.errors == {"numa": "type check ('boolean') failed - got 'yes'\n"}
        with pytest.raises(ResourceException) as gone:
            proxmox.nodes("pve1").qemu(vmid).config.get()
        assert gone.value.status_code == 500
        assert str(gone.value).endswith(  # proxmoxer shows the reason phrase
            f"Configuration file 'nodes/pve1/qemu-server/{vmid}.conf' does not exist"
        )
        with pytest.raises(ResourceException) as denied:
            proxmox.nodes("pve1").storage("local-lvm")("download-url").post(
                content="import", filename="x.qcow2", url="https://example.invalid/x.qcow2"
            )
        assert denied.value.status_code == 403
        assert "(/storage/local-lvm, Datastore.AllocateTemplate)" in str(denied.value)

    await asyncio.to_thread(scenario)


async def test_proxmoxer_sees_401_and_403(sim: SimCluster) -> None:
    proxmoxer = pytest.importorskip("proxmoxer", reason="proxmoxer is a dev dependency")
    from proxmoxer import ResourceException

    env = sim.api_env()
    assert sim.pveproxy is not None
    host, port = env["PVE_API_URL"].removeprefix("https://").rsplit(":", 1)
    secret = sim.add_api_token("cairn@pve!audit", {"/vms": ["VM.Audit"]})
    cert = str(sim.pveproxy.cert_path)

    def client(name: str, value: str) -> Any:
        return proxmoxer.ProxmoxAPI(
            host,
            port=int(port),
            user="cairn@pve",
            token_name=name,
            token_value=value,
            verify_ssl=cert,
            timeout=30,
        )

    def scenario() -> None:
        with pytest.raises(ResourceException) as unauth:
            client("audit", "00000000-0000-4000-8000-000000000000").version.get()
        assert unauth.value.status_code == 401
        with pytest.raises(ResourceException) as forbidden:
            client("audit", secret).nodes("pve1").qemu.post(vmid=199)
        assert forbidden.value.status_code == 403
        assert "Permission check failed (/vms/199, VM.Allocate)" in str(forbidden.value)

    await asyncio.to_thread(scenario)
