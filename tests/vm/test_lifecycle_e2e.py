"""Every lifecycle endpoint over HTTP against the simulated cluster, happy paths and rules."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from pvesim.cluster import VmView

from tests.vm import drivers
from tests.vm.conftest import Service, read_sse
from tests.vm.helpers import PUBKEY

# Every test here runs with both drivers (tests/vm/drivers.py).
driver = drivers.driver
start_service = drivers.start_service


async def test_install_with_every_field_then_manage_the_vm(
    service: Service,
    driver: str,
) -> None:
    sse = await service.install(
        os="ubuntu", version="22.04", name="web-01", id=150, node="pve2", cpu=4, ram=4096,
        disk="40G", user="deploy", passwd="s3cr3t", pubkey=PUBKEY,
    )  # fmt: skip
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    # A node was asked for: the stage is there with either driver, right after the configuration.
    migrating = "VM initialization > migrating VM"
    assert sse.steps.index(migrating) == (
        sse.steps.index("VM initialization > initializing configuration") + 1
    )
    done = [r["message"] for r in sse.records if (r["step"], r["status"]) == (migrating, "success")]
    # Either driver clones on the node asked for: nothing to migrate.
    assert done == ["[+] created on pve2 directly: nothing to migrate (0.00s)"]
    assert (sse.last["vm_id"], sse.last["ip"]) == (150, "127.0.0.150")
    assert sse.records[-1]["message"].startswith("[*] User: deploy (")
    vm = service.sim.vm(150)
    assert vm is not None
    assert (vm.node, vm.status) == ("pve2", "running")
    c = vm.config
    assert (c["name"], c["cores"], c["memory"], c["ciuser"]) == ("web-01", 4, 4096, "deploy")
    assert "size=40G" in c["scsi0"] and c["boot"] == "order=scsi0"
    assert PUBKEY in unquote(c["sshkeys"])
    assert "s3cr3t" not in str(c["cipassword"])
    assert all("s3cr3t" not in line for line in service.sim.commands())

    listing = await service.list()
    row = next(r for r in listing["list"] if r["vmid"] == 150)
    assert {k: row[k] for k in ("name", "os", "running", "node", "cpu", "memory", "disk")} == {
        "name": "web-01", "os": "ubuntu", "running": True, "node": "pve2",
        "cpu": 4, "memory": 4096, "disk": 40,
    }  # fmt: skip

    assert await service.post("/vm/150/stop") == (200, "ok")
    assert await service.get("/vm/150/status") == (200, "stopped")
    assert sim_vm(service, 150).status == "stopped"

    moved = await service.post_sse("/vm/150/set/node", {"node": "pve3"})
    assert moved.closed and moved.last["status"] == "success", moved.records
    assert moved.last["vm_id"] == 150
    assert any("starting migration of VM 150" in r["message"] for r in moved.records)
    assert sim_vm(service, 150).node == "pve3"

    assert await service.post("/vm/150/set/cpu", {"cpu": 2}) == (200, "ok")
    assert await service.post("/vm/150/set/memory", {"memory": 1024}) == (200, "ok")
    assert await service.post("/vm/150/set/disk", {"disk": "8G"}) == (200, "ok")
    async with service.session.get(service.api + "/vm/150/task") as resp:
        grown = await read_sse(resp)  # the resize's records, qm's own lines among them
    assert grown.steps == ["set > disk"] and grown.last["status"] == "success"
    assert any("Size of logical volume" in r["message"] for r in grown.records), grown.records
    c = sim_vm(service, 150).config
    assert (c["cores"], c["memory"]) == (2, 1024) and "size=48G" in c["scsi0"]

    started = await service.post_sse("/vm/150/start")
    assert started.closed and started.last["status"] == "success", started.records
    assert started.last == {**started.last, "vm_id": 150, "ip": "127.0.0.150"}
    assert await service.get("/vm/150/status") == (200, "running")

    rebooted = await service.post_sse("/vm/150/reboot")
    assert rebooted.closed and rebooted.last["status"] == "success", rebooted.records
    assert service.sim.guest_up(150)

    assert await service.post("/vm/150/shutdown") == (200, "ok")
    assert await service.get("/vm/150/status") == (200, "stopped")
    assert await service.post("/vm/150/destroy") == (200, "ok")
    assert service.sim.vm(150) is None
    assert await service.get("/vm/150/status") == (404, "VM 150 not found")
    listing = await service.list()
    assert all(r["vmid"] != 150 for r in listing["list"])
    again = await service.install(id=150)
    assert again.last["vm_id"] == 150, again.records[-2:]


def busy(vmid: int) -> str:
    return f"VM {vmid} is busy: a task is running; follow it at /api/vm/{vmid}/task"


def sim_vm(service: Service, vmid: int) -> VmView:
    vm = service.sim.vm(vmid)
    assert vm is not None, f"VM {vmid} is not in the cluster"
    return vm


async def test_wrong_state_unknown_vm_and_bad_ids(service: Service) -> None:
    vmid = await service.installed()
    for action in ("destroy", "set/cpu", "set/memory", "set/disk"):
        body = {"set/cpu": {"cpu": 2}, "set/memory": {"memory": 1024}, "set/disk": {"disk": "1G"}}
        assert await service.post(f"/vm/{vmid}/{action}", body.get(action)) == (
            409, "VM is running",
        ), action  # fmt: skip
    for sse_action in ("start",):
        got = await service.post_sse(f"/vm/{vmid}/{sse_action}")
        assert (got.status, got.text) == (409, "VM is running")
    got = await service.post_sse(f"/vm/{vmid}/set/node", {"node": "pve2"})
    assert (got.status, got.text) == (409, "VM is running")
    assert await service.post(f"/vm/{vmid}/stop") == (200, "ok")
    for action in ("stop", "shutdown"):
        assert await service.post(f"/vm/{vmid}/{action}") == (409, "VM is not running")
    got = await service.post_sse(f"/vm/{vmid}/reboot")
    assert (got.status, got.text) == (409, "VM is not running")

    assert await service.post("/vm/201/stop") == (404, "VM 201 not found")
    assert await service.get("/vm/201/status") == (404, "VM 201 not found")
    got = await service.post_sse("/vm/201/start")
    assert (got.status, got.text) == (404, "VM 201 not found")

    assert await service.get("/vm/abc/status") == (400, "invalid VM id 'abc'")
    for action in ("stop", "shutdown", "destroy"):
        status, _ = await service.post(f"/vm/abc/{action}")
        assert status == 500
    bodies: list[tuple[str, dict[str, Any]]] = [
        ("cpu", {"cpu": 2}), ("memory", {"memory": 1024}), ("disk", {"disk": "1G"}),
    ]  # fmt: skip
    for what, body in bodies:
        status, _ = await service.post(f"/vm/1.5/set/{what}", body)
        assert status == 500


async def test_busy_vm_answers_409_at_once(start_service: Any) -> None:
    # The start waits VM_SSH_WAIT for a guest that never answers: long enough for the two
    # requests below on a loaded machine.
    service: Service = await start_service(VM_SSH_WAIT="4")
    vmid = await service.stopped()
    service.sim.inject_failure("guest boot", vmid=vmid)
    async with service.session.post(f"{service.api}/vm/{vmid}/start") as resp:
        from tests.vm.conftest import read_sse

        first = await read_sse(resp, stop_after=1)
        assert first.records[0]["status"] == "processing"
        assert await service.post(f"/vm/{vmid}/stop") == (409, busy(vmid))
        assert await service.post(f"/vm/{vmid}/set/cpu", {"cpu": 1}) == (409, busy(vmid))
        rest = await read_sse(resp)
    assert rest.closed and rest.last["status"] == "error"
    assert "not ready after 4s" in rest.last["message"]


BAD_BODIES: list[tuple[str, Any, str]] = [
    ("/vm/install", {"version": "12"}, "os: is required"),
    ("/vm/install", {"os": "debian", "version": "12", "cpu": "lots"}, "cpu: must be an integer"),
    ("/vm/install", {"os": "debian", "version": "12", "id": 300}, "id: must be between 100"),
    ("/vm/install", {"os": "debian", "version": "12", "disk": "10T"}, "disk: must be a whole"),
    ("/vm/install", {"os": "debian", "version": "12", "node": "x"}, "node: unknown node 'x'"),
    ("/vm/100/set/cpu", {"cpu": 0}, "cpu: must be between 1 and 32"),
    ("/vm/100/set/memory", {"memory": "1G"}, "memory: must be an integer"),
    ("/vm/100/set/disk", {"disk": "-1G"}, "disk: shrinking is not supported"),
    ("/vm/100/set/node", {}, "node: is required"),
]


async def test_bad_bodies_are_400_naming_the_field(service: Service) -> None:
    for path, body, message in BAD_BODIES:
        status, text = await service.post(path, body)
        assert status == 400 and text.startswith(message), (path, status, text)
    async with service.session.post(
        service.api + "/vm/install", data=b"{not json", headers={"Content-Type": "application/json"}
    ) as resp:
        assert (resp.status, await resp.text()) == (400, "body: must be valid JSON")


async def test_clamping_minimums_and_balloon(start_service: Any) -> None:
    service: Service = await start_service(
        VM_MAX_CPU="4", VM_MAX_RAM="4096", VM_MAX_DISK="32", VM_BALLOON_MIN="1024"
    )
    sse = await service.install(cpu=16, ram=100000, disk="100G")
    notes = [r["message"] for r in sse.records if r["status"] == "processing"]
    assert any(n.startswith("[*] setting CPU to maximum 4 (") for n in notes)
    assert any(n.startswith("[*] setting RAM to maximum 4096 (") for n in notes)
    assert any(n.startswith("[*] setting disk to maximum 32G (") for n in notes)
    c = sim_vm(service, sse.last["vm_id"]).config
    assert (c["cores"], c["memory"], c["balloon"]) == (4, 4096, 1024) and "size=32G" in c["scsi0"]

    small = await service.install(cpu=0, ram=100, disk="8G")
    c = sim_vm(service, small.last["vm_id"]).config
    assert (c["cores"], c["memory"]) == (1, 512) and "size=16G" in c["scsi0"]
    assert "balloon" not in c or c["balloon"] in (0, "0")
    assert await service.post(f"/vm/{small.last['vm_id']}/stop") == (200, "ok")
    assert await service.post(f"/vm/{small.last['vm_id']}/set/disk", {"disk": "17G"}) == (
        400, "disk: 16G + 17G exceeds VM_MAX_DISK (32G)",
    )  # fmt: skip


async def test_allow_ips_and_forwarded_for(start_service: Any) -> None:
    service: Service = await start_service(ALLOW_IPS="10.9.9.9")
    # The 403 names the address the check saw.
    forbidden = (403, "this IP is not allowed to perform this action (client address 127.0.0.1)")
    assert await service.post("/vm/install", {"os": "debian", "version": "12"}) == forbidden
    assert await service.post("/vm/100/start") == forbidden
    assert await service.post("/vm/100/stop") == forbidden
    assert await service.post("/vm/100/set/node", {"node": "pve2"}) == forbidden
    assert await service.get("/vm/100/task") == forbidden
    # A client cannot vouch for itself: X-Forwarded-For counts only from a trusted proxy.
    forged = {"X-Forwarded-For": "10.9.9.9"}
    assert await service.post("/vm/100/stop", headers=forged) == forbidden
    # Queries and the scripts are open to all.
    assert await service.get("/health") == (200, "ok")
    assert (await service.get("/vm/100/status"))[0] == 404
    async with service.session.get(service.api + "/vm/list") as resp:
        assert resp.status == 200


async def test_trusted_proxy_forwards_the_client(start_service: Any) -> None:
    service: Service = await start_service(ALLOW_IPS="10.9.9.9", TRUSTED_PROXIES="127.0.0.1")
    assert await service.post("/vm/100/stop", headers={"X-Forwarded-For": "10.9.9.9"}) == (
        404, "VM 100 not found",
    )  # fmt: skip
    spoofed = {"X-Forwarded-For": "10.9.9.9, 10.1.1.1"}
    assert await service.post("/vm/100/stop", headers=spoofed) == (
        403, "this IP is not allowed to perform this action (client address 10.1.1.1)",
    )  # fmt: skip
    # A forwarded hop is any text a client likes: shown quoted and cut short, never as is.
    junk = {"X-Forwarded-For": "<script>" + "x" * 200}
    status, text = await service.post("/vm/100/stop", headers=junk)
    assert status == 403
    assert text.endswith("(client address '<script>" + "x" * 56 + "')")


async def test_init_scripts_are_served(service: Service) -> None:
    async with service.session.get(service.url + "/sh/debian_12.sh") as resp:
        assert resp.status == 200
        assert "qemu-guest-agent" in await resp.text()
    async with service.session.get(service.url + "/sh/../gateway/launcher.py") as resp:
        assert resp.status in (403, 404)
    async with service.session.get(service.url + "/sh/nope.sh") as resp:
        assert resp.status == 404


async def test_the_host_key_seen_at_install_is_checked_after_a_restart(
    start_service: Any,
) -> None:
    service: Service = await start_service()
    installed = await service.install(id=156)
    assert installed.last["status"] == "success", installed.records[-3:]
    await start_service.stop_last()
    service = await start_service()  # the pinned key comes back from the stored events

    rebooted = await service.post_sse("/vm/156/reboot")
    assert rebooted.last["status"] == "success", rebooted.records

    service.sim.inject_failure("guest rekey", vmid=156)
    refused = await service.post_sse("/vm/156/reboot")
    assert refused.closed and refused.last["status"] == "error"
    assert refused.last["step"] == "reboot > waiting for ready"
    assert "the host key is not the one it showed first (SHA256:" in refused.last["message"]
    assert await service.get("/vm/156/status") == (200, "running")  # as the cluster says
