"""The simulated pveproxy, driven by cairn's own REST client over real HTTPS on loopback:
auth, certificate pinning, the error shapes, tasks, locks, privileges, versions."""

from __future__ import annotations

import asyncio
import hashlib

import aiohttp
import pytest
from pvesim.cluster import SimCluster

from actors.vm.fakemirror import IMAGE_BYTES, serve_mirror
from actors.vm.pveapi import errors
from actors.vm.pveapi.client import PveClient
from actors.vm.pveapi.tasks import wait_task
from actors.vm.pveapi.wire import normalize_fingerprint, parse_token, sshkeys_param

from .conftest import ED25519_PUB, client_for


async def create(api: PveClient, node: str, vmid: int, **extra: object) -> str:
    params = {
        "vmid": vmid,
        "name": f"t{vmid}",
        "memory": 1024,
        "net0": "virtio,bridge=vmbr0",
        "scsi0": "local-lvm:4",
        **extra,
    }
    outcome = await wait_task(api, await api.post(f"/nodes/{node}/qemu", params))
    return outcome.exitstatus


async def test_version_and_nodes_over_a_pinned_certificate(api: PveClient) -> None:
    assert (await api.get("/version"))["release"] == "8.4"
    nodes = await api.get("/nodes")
    assert sorted(n["node"] for n in nodes) == ["pve1", "pve2", "pve3"]
    assert all("maxcpu" in n for n in nodes)  # the token has Sys.Audit on /nodes


async def test_a_different_certificate_is_refused_before_anything_is_sent(sim: SimCluster) -> None:
    env = sim.api_env()
    wrong = normalize_fingerprint("AB" * 32)
    client = PveClient(env["PVE_API_URL"], parse_token(env["PVE_API_TOKEN"]), fingerprint=wrong)
    try:
        with pytest.raises(errors.FingerprintMismatch) as caught:
            await client.post("/nodes/pve1/qemu", {"vmid": 150})
    finally:
        await client.close()
    assert "AB:AB:AB" in caught.value.text and env["PVE_API_FINGERPRINT"] in caught.value.text
    assert "PVE_API_FINGERPRINT" in caught.value.text
    assert sim.vm(150) is None


async def test_the_cluster_certificate_as_a_ca_file(sim: SimCluster) -> None:
    env = sim.api_env()
    assert sim.pveproxy is not None and sim.pveproxy.cert_path is not None
    client = PveClient(
        env["PVE_API_URL"], parse_token(env["PVE_API_TOKEN"]), ca_file=str(sim.pveproxy.cert_path)
    )
    try:
        assert (await client.get("/version"))["release"] == "8.4"
    finally:
        await client.close()
    # Without it, the system's CAs do not know the cluster's certificate.
    client = PveClient(env["PVE_API_URL"], parse_token(env["PVE_API_TOKEN"]))
    try:
        with pytest.raises(errors.Unreachable, match="certificate"):
            await client.get("/version")
    finally:
        await client.close()


async def test_a_wrong_secret_is_a_401_with_an_empty_body(sim: SimCluster) -> None:
    env = sim.api_env()
    tokenid = env["PVE_API_TOKEN"].rsplit("=", 1)[0]
    client = client_for(sim, token=f"{tokenid}=00000000-0000-4000-8000-000000000000")
    try:
        with pytest.raises(errors.AuthFailed, match="refused the API token"):
            await client.get("/version")
    finally:
        await client.close()
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{env['PVE_API_URL']}/api2/json/version", ssl=False) as resp,
    ):
        assert (resp.status, resp.reason, await resp.read()) == (401, "No ticket", b"")


async def test_create_holds_lock_create_until_its_task_ends(
    sim: SimCluster, api: PveClient
) -> None:
    # The create task takes 4 s: the two requests below must land while it runs, and on a
    # loaded machine the one second it took at 0.5 may not be enough for both (as for the
    # busy-VM check of tests/vm/test_lifecycle_e2e.py).
    sim.set_delay_scale(2)
    upid = await api.post("/nodes/pve2/qemu", {"vmid": 140, "memory": 512})
    assert (await api.get("/nodes/pve2/qemu/140/config"))["lock"] == "create"
    with pytest.raises(errors.ApiError, match=r"VM is locked \(create\)"):
        await api.put("/nodes/pve2/qemu/140/config", {"cores": 2})
    assert (await wait_task(api, upid)).ok
    assert "lock" not in await api.get("/nodes/pve2/qemu/140/config")


async def test_failures_before_and_inside_the_worker(api: PveClient) -> None:
    assert await create(api, "pve2", 130) == "OK"
    # Before the fork: the request fails, no task.
    with pytest.raises(errors.ApiError) as dup:
        await api.post("/nodes/pve3/qemu", {"vmid": 130})
    assert dup.value.status == 500
    assert dup.value.text == "unable to create VM 130 - VM 130 already exists on node 'pve2'"
    assert (await wait_task(api, await api.post("/nodes/pve2/qemu/130/status/start"))).ok
    with pytest.raises(errors.ApiError, match="VM 130 is running - destroy failed"):
        await api.delete("/nodes/pve2/qemu/130", {"purge": True})
    # Inside the worker: HTTP 200 and a UPID, then the task's exit status.
    again = await wait_task(api, await api.post("/nodes/pve2/qemu/130/status/start"))
    assert not again.ok and again.exitstatus == "VM 130 already running"
    # The VM lives on pve2: another node's path says so as PVE does.
    with pytest.raises(errors.ApiError) as elsewhere:
        await api.get("/nodes/pve1/qemu/130/status/current")
    assert elsewhere.value.not_found


async def test_parameter_errors_are_400_with_an_errors_object(api: PveClient) -> None:
    with pytest.raises(errors.ApiError) as caught:
        await api.post("/nodes/pve1/qemu", {"vmid": 131, "numa": "true", "colour": "red"})
    assert caught.value.status == 400
    assert caught.value.errors == {
        "numa": "type check ('boolean') failed - got 'true'",
        "colour": "property is not defined in schema and the schema does not allow additional "
        "properties",
    }
    with pytest.raises(errors.ApiError, match="invalid urlencoded string"):
        await api.post("/nodes/pve1/qemu", {"vmid": 131, "sshkeys": ED25519_PUB})
    assert await create(api, "pve1", 131, sshkeys=sshkeys_param(ED25519_PUB + "\n")) == "OK"
    with pytest.raises(errors.ApiError) as name:
        await api.post("/nodes/pve1/qemu", {"vmid": 132, "name": "bad_name"})
    assert name.value.errors == {"name": "value does not look like a valid DNS name"}


async def test_a_body_on_delete_is_refused(sim: SimCluster) -> None:
    env = sim.api_env()
    async with (
        aiohttp.ClientSession(
            headers={"Authorization": f"PVEAPIToken={env['PVE_API_TOKEN']}"}
        ) as session,
        session.delete(
            f"{env['PVE_API_URL']}/api2/json/nodes/pve1/qemu/130", data=b"purge=1", ssl=False
        ) as resp,
    ):
        assert (resp.status, resp.reason) == (501, "Unexpected content for method 'DELETE'")


async def test_a_token_lacking_a_privilege_is_told_which(sim: SimCluster, api: PveClient) -> None:
    assert await create(api, "pve1", 133) == "OK"
    acl = sim.cairn_acl()
    acl["/vms"] = [p for p in acl["/vms"] if p != "VM.PowerMgmt"]
    secret = sim.add_api_token("cairn@pve!weak", acl)
    weak = client_for(sim, token=f"cairn@pve!weak={secret}")
    try:
        with pytest.raises(errors.PermissionDenied) as caught:
            await weak.post("/nodes/pve1/qemu/133/status/start")
    finally:
        await weak.close()
    assert caught.value.missing is not None
    assert (caught.value.missing.path, caught.value.missing.privilege) == (
        "/vms/133",
        "VM.PowerMgmt",
    )
    assert "lacks VM.PowerMgmt on /vms/133" in caught.value.text


async def test_resources_are_filtered_by_the_token_privileges(
    sim: SimCluster, api: PveClient
) -> None:
    assert await create(api, "pve1", 134) == "OK"
    sim.add_gui_vm(150, "pve2")
    seen = {e["vmid"] for e in await api.get("/cluster/resources", {"type": "vm"})}
    assert seen == {134, 150}
    secret = sim.add_api_token("cairn@pve!narrow", {"/vms/134": ["VM.Audit"]})
    narrow = client_for(sim, token=f"cairn@pve!narrow={secret}")
    try:
        vms = await narrow.get("/cluster/resources", {"type": "vm"})
        nodes = await narrow.get("/cluster/resources", {"type": "node"})
    finally:
        await narrow.close()
    assert [e["vmid"] for e in vms] == [134]  # VM 150 silently left out
    assert nodes and all("maxcpu" not in n for n in nodes)  # no Sys.Audit: no figures


async def test_download_url_then_import_at_create_on_the_target_node(
    sim: SimCluster, api: PveClient
) -> None:
    async with serve_mirror() as mirror:
        url = f"{mirror.base_url}/debian/12/debian-12-generic-amd64.qcow2"
        digest = hashlib.sha512(IMAGE_BYTES).hexdigest()
        params = {
            "content": "import",
            "filename": "debian-12-generic-amd64.qcow2",
            "url": url,
            "checksum": digest,
            "checksum-algorithm": "sha512",
        }
        done = await wait_task(
            api, await api.post("/nodes/pve3/storage/local/download-url", params)
        )
        assert done.ok, done
        assert done.log[-1].endswith("finished")
        again = await wait_task(
            api, await api.post("/nodes/pve3/storage/local/download-url", params)
        )
        assert again.ok and "no need to download" in again.log[0]
        del params["checksum"], params["checksum-algorithm"]
        refused = await wait_task(
            api, await api.post("/nodes/pve3/storage/local/download-url", params)
        )
        assert refused.exitstatus.startswith("refusing to override existing file")
    content = await api.get("/nodes/pve3/storage/local/content", {"content": "import"})
    assert [c["volid"] for c in content] == ["local:import/debian-12-generic-amd64.qcow2"]
    status = await create(
        api, "pve3", 135, scsi0="local-lvm:0,import-from=local:import/debian-12-generic-amd64.qcow2"
    )
    assert status == "OK"
    config = await api.get("/nodes/pve3/qemu/135/config")
    assert config["scsi0"] == "local-lvm:vm-135-disk-0,size=2G"
    assert sim.vm(135) is not None and sim.vm(135).node == "pve3"  # type: ignore[union-attr]
    with pytest.raises(errors.PermissionDenied, match="Only root can pass arbitrary filesystem"):
        await api.post(
            "/nodes/pve3/qemu", {"vmid": 136, "scsi0": "local-lvm:0,import-from=/etc/passwd"}
        )


async def test_download_url_rules(sim: SimCluster, api: PveClient) -> None:
    base = {"content": "import", "url": "http://127.0.0.1:9/x.img"}
    with pytest.raises(errors.ApiError) as ext:
        await api.post("/nodes/pve1/storage/local/download-url", {**base, "filename": "x.img"})
    assert ext.value.errors == {"filename": "invalid filename or wrong extension"}
    lvm = {**base, "filename": "x.qcow2"}
    with pytest.raises(errors.PermissionDenied, match=r"Datastore\.AllocateTemplate on /storage/"):
        await api.post("/nodes/pve1/storage/local-lvm/download-url", lvm)
    everything = ["Datastore.AllocateTemplate", "Sys.Audit", "Sys.Modify"]
    secret = sim.add_api_token("admin@pve!all", {"/": everything})
    admin = client_for(sim, token=f"admin@pve!all={secret}")
    try:
        with pytest.raises(errors.ApiError, match="not a file based storage"):
            await admin.post("/nodes/pve1/storage/local-lvm/download-url", lvm)
    finally:
        await admin.close()


async def test_a_596_while_polling_is_retried(sim: SimCluster, api: PveClient) -> None:
    sim.inject_failure(
        "api GET get_task_status", message="Connection timed out", exit_code=596, times=2
    )
    assert await create(api, "pve1", 137) == "OK"
    assert sim.pending_failures() == []


async def test_wrong_node_for_a_task_is_no_such_task(api: PveClient) -> None:
    upid = await api.post("/nodes/pve1/qemu", {"vmid": 138})
    await wait_task(api, upid)
    with pytest.raises(errors.ApiError) as caught:
        await api.get(f"/nodes/pve2/tasks/{upid}/status")
    assert caught.value.errors == {"upid": "no such task"}


async def test_pve_7_4_and_8_2_differences(sim: SimCluster, api: PveClient) -> None:
    sim.set_api_version("7.4")
    assert (await api.get("/version"))["release"] == "7.4"
    with pytest.raises(errors.ApiError) as caught:
        await api.post("/nodes/pve1/qemu", {"vmid": 139, "ciupgrade": 0})
    assert "ciupgrade" in caught.value.errors
    assert caught.value.message is None  # no `message` key before pve-http-server 5.2.0
    assert await create(api, "pve1", 139) == "OK"
    assert isinstance((await api.get("/nodes/pve1/qemu/139/config"))["memory"], int)
    # resize is synchronous on 7.x: null, not a UPID
    assert await api.put("/nodes/pve1/qemu/139/resize", {"disk": "scsi0", "size": "+1G"}) is None
    sim.set_api_version("8.2")
    with pytest.raises(errors.ApiError) as old:
        await api.post(
            "/nodes/pve1/storage/local/download-url",
            {"content": "import", "filename": "d.qcow2", "url": "https://x/d.qcow2"},
        )
    assert old.value.errors == {
        "content": "value 'import' does not have a value in the enumeration 'iso, vztmpl'"
    }
    upid = await api.put("/nodes/pve1/qemu/139/resize", {"disk": "scsi0", "size": "+1G"})
    assert (await wait_task(api, upid)).ok
    assert (await api.get("/nodes/pve1/qemu/139/config"))["scsi0"].endswith("size=6G")


async def test_closing_the_client_lets_a_waiting_command_end(
    sim: SimCluster, api: PveClient
) -> None:
    """At shutdown the transports close before the node actors stop: a command still waiting
    for its task must not fail with a dropped connection (it is cancelled next instead)."""
    from actors.vm.pve import Create, Hardware
    from actors.vm.pveapi.adapter import RestPve
    from tests.conftest import wait_for

    sim.set_delay_scale(0.25)  # the create task takes half a second
    port = RestPve(api, "pve1")
    hardware = Hardware("t", 1, "kvm64", 512, None, "debian", "test", "vmbr0")
    running = asyncio.create_task(port.create("pve1", 142, Create(hardware)))
    await wait_for(lambda: sim.vm(142) is not None, what="the create task to start")
    await api.close()
    task = await running
    assert (task.node, task.exitstatus) == ("pve1", "OK"), task
    assert sim.vm(142) is not None and sim.vm(142).lock is None  # type: ignore[union-attr]
