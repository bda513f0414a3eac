"""Safe changes over HTTP, with both drivers: a snapshot, the steps, the checks; kept when
they pass (the snapshot removed), rolled back when a check or a step fails (CPU, memory and a
file a step wrote as before); a storage without snapshots refused before anything changes;
one task at a time; bad bodies refused with their exact messages. A restart mid-change:
tests/faults/test_kill9_change.py; roles: tests/gateway/test_change_roles.py."""

from __future__ import annotations

import json
from typing import Any

from pvesim.cluster import SimCluster

from tests.vm import drivers
from tests.vm.conftest import Service
from tests.vm.helpers import add_raw_disk

driver = drivers.driver
start_service = drivers.start_service

MARKER = "/root/cairn-marker"
SNAP = "change > taking snapshot"
VERIFY = "change > verifying"
KEEP = "change > keeping"
ROLLBACK = "change > rolling back"


async def snapshots(service: Service, vmid: int) -> list[str]:
    status, text = await service.get(f"/vm/{vmid}/snapshots")
    assert status == 200, text
    return [s["name"] for s in json.loads(text)]


def sizes(sim: SimCluster, vmid: int) -> tuple[str, str]:
    vm = sim.vm(vmid)
    assert vm is not None
    return str(vm.config["cores"]), str(vm.config["memory"])


async def test_a_passing_change_is_kept_and_its_snapshot_removed(
    sim: SimCluster, start_service: Any
) -> None:
    service: Service = await start_service()
    vmid = await service.installed(id=140, cpu=2, ram=2048)
    body = {
        "steps": [
            {"set": {"cpu": 4, "memory": 4096}},
            {"run": f"echo upgraded > {MARKER}\necho step output"},
            {"reboot": True},
        ],
        "verify": [{"ssh": True}, {"run": f"test -f {MARKER}", "timeout": 30}],
    }
    sse = await service.post_sse(f"/vm/{vmid}/change", body)
    assert sse.status == 200 and sse.closed, sse.text
    assert sse.steps == [
        SNAP,
        "change > step 1: set",
        "change > step 2: run",
        "change > step 3: reboot",
        VERIFY,
        KEEP,
    ], sse.records
    assert any(r["message"].startswith("[*] | step output (") for r in sse.records)
    assert sse.last["status"] == "success" and sse.last["vm_id"] == vmid
    assert sse.last["message"].startswith(
        f"[+] change kept; snapshot cairn-change-{sse.headers['X-Task-Id'][:16]} removed ("
    )
    assert sizes(sim, vmid) == ("4", "4096")
    assert sim.guest_files(vmid)[MARKER] == "upgraded\n"
    assert await snapshots(service, vmid) == []
    _, text = await service.get(f"/vm/{vmid}")
    detail = json.loads(text)
    assert (detail["cpu"], detail["memory"], detail["state"]) == (4, 4096, "running")
    assert detail["last_task"]["command"] == "change" and detail["last_task"]["ok"] is True
    assert detail["last_task"]["by"] == "ip:127.0.0.1"


async def test_a_failing_check_rolls_the_change_back(sim: SimCluster, start_service: Any) -> None:
    service: Service = await start_service()
    vmid = await service.installed(id=141, cpu=2, ram=2048)
    # What the guest had before: the file a first (kept) change wrote.
    first = {"steps": [{"run": f"echo before > {MARKER}"}], "verify": {"ssh": True}}
    assert (await service.post_sse(f"/vm/{vmid}/change", first)).last["status"] == "success"
    body = {
        "steps": [
            {"set": {"cpu": 3, "memory": 3072}},
            {"run": f"echo after > {MARKER}"},
        ],
        "verify": {"run": "test -f /etc/nginx/ready || exit 7"},
        "keep_snapshot": True,
    }
    sse = await service.post_sse(f"/vm/{vmid}/change", body)
    assert sse.closed, sse.text
    name = f"cairn-change-{sse.headers['X-Task-Id'][:16]}"
    assert sse.steps == [SNAP, "change > step 1: set", "change > step 2: run", VERIFY, ROLLBACK]
    assert sse.last["status"] == "error"
    assert sse.last["message"].startswith(
        "[-] change rolled back: verify failed: check 1 of 1: exit status 7 ("
    ), sse.last
    assert any(
        r["message"].startswith(f"[+] VM {vmid} is back at snapshot {name}") for r in sse.records
    )
    assert sizes(sim, vmid) == ("2", "2048")
    assert sim.guest_files(vmid)[MARKER] == "before\n"
    assert await snapshots(service, vmid) == [name]  # kept, as asked
    assert await service.get(f"/vm/{vmid}/status") == (200, "running")
    _, text = await service.get(f"/vm/{vmid}")
    detail = json.loads(text)
    assert (detail["cpu"], detail["memory"]) == (2, 2048)
    assert detail["last_task"]["ok"] is False
    assert (
        detail["last_task"]["error"]
        == "change rolled back: verify failed: check 1 of 1: exit status 7"
    )


async def test_a_failing_step_rolls_the_change_back(sim: SimCluster, start_service: Any) -> None:
    service: Service = await start_service()
    vmid = await service.installed(id=142, cpu=2, ram=2048)
    body = {
        "steps": [
            {"set": {"memory": 4096}},
            {"run": f"echo half > {MARKER}\necho 'E: broken package' && exit 3"},
            {"run": "echo step-three-ran"},
        ],
        "verify": {"ssh": True},
    }
    sse = await service.post_sse(f"/vm/{vmid}/change", body)
    assert sse.steps == [SNAP, "change > step 1: set", "change > step 2: run", ROLLBACK]
    assert sse.last == {
        "step": ROLLBACK,
        "status": "error",
        "message": sse.last["message"],
    }
    assert sse.last["message"].startswith(
        "[-] change rolled back: step 2 (run) failed: exit status 3: E: broken package ("
    )
    assert sizes(sim, vmid) == ("2", "2048")
    assert MARKER not in sim.guest_files(vmid)
    assert await snapshots(service, vmid) == []  # removed after the rollback
    assert not any("step-three-ran" in r.stdin for r in sim.guest_runs(vmid))

    # A check that outlasts its time-out fails as one that answered no.
    slow = {"steps": [{"reboot": True}], "verify": {"run": "sleep 30", "timeout": 1}}
    sse = await service.post_sse(f"/vm/{vmid}/change", slow)
    assert sse.last["message"].startswith(
        "[-] change rolled back: verify failed: check 1 of 1: timed out after 1s ("
    ), sse.last
    assert await service.get(f"/vm/{vmid}/status") == (200, "running")


async def test_a_storage_without_snapshots_is_refused_up_front(
    sim: SimCluster, start_service: Any
) -> None:
    service: Service = await start_service()
    vmid = await service.installed(id=143)
    add_raw_disk(sim, vmid)
    before = sim.commands()
    body = {"steps": [{"set": {"cpu": 4}}], "verify": {"ssh": True}}
    assert await service.post(f"/vm/{vmid}/change", body) == (
        409,
        f"VM {vmid} cannot take snapshots: disk scsi1 is on dir storage 'files' in raw format, "
        "which cannot take snapshots; a change starts with one, so nothing was changed",
    )
    after = sim.commands()[len(before) :]
    verbs = (" snapshot ", " set ", " shutdown ", " stop ", " reboot ")
    assert [c for c in after if any(v in f" {c} " for v in verbs)] == [], after
    assert sizes(sim, vmid)[0] == "2"


async def test_refusals(sim: SimCluster, start_service: Any) -> None:
    service: Service = await start_service()
    vmid = await service.installed(id=144)
    path = f"/vm/{vmid}/change"
    ok_verify = {"ssh": True}
    cases: list[tuple[Any, str]] = [
        (["steps"], "body: must be a JSON object"),
        ({"verify": ok_verify}, "steps: is required"),
        ({"steps": {}, "verify": ok_verify}, "steps: must be a list of steps"),
        ({"steps": [], "verify": ok_verify}, "steps: must have at least one step"),
        ({"steps": [{"reboot": True}] * 17, "verify": ok_verify}, "steps: at most 16 steps"),
        (
            {"steps": [{"run": "x", "reboot": True}], "verify": ok_verify},
            'steps[0]: must be one of {"set": {...}}, {"run": "<shell>"} or {"reboot": true}',
        ),
        (
            {"steps": [{"run": "x" * 16385}], "verify": ok_verify},
            "steps[0].run: at most 16384 bytes",
        ),
        (
            {"steps": [{"run": "  "}], "verify": ok_verify},
            "steps[0].run: must be a non-empty string of shell",
        ),
        (
            {"steps": [{"run": "true", "timeout": 0}], "verify": ok_verify},
            "steps[0].timeout: must be a whole number of seconds from 1 to 3600",
        ),
        (
            {"steps": [{"set": {"cpu": 99}}], "verify": ok_verify},
            "steps[0].set.cpu: must be between 1 and 32",
        ),
        (
            {"steps": [{"set": {"cores": 2}}], "verify": ok_verify},
            "steps[0].set.cores: unknown field; known: cpu, memory, disk",
        ),
        (
            {"steps": [{"set": {"disk": "8G"}}], "verify": ok_verify},
            "steps[0].set.disk: a grown disk cannot be rolled back in full (the storage keeps "
            'the new size); send "accept": ["disk-grow"] to change it anyway',
        ),
        (
            {"steps": [{"reboot": "yes"}], "verify": ok_verify},
            "steps[0].reboot: must be true",
        ),
        (
            {"steps": [{"reboot": True}]},
            'verify: is required: how to tell the VM still works, {"ssh": true}, '
            '{"run": "<shell>"} or {"function": "<stored function path>"}',
        ),
        ({"steps": [{"reboot": True}], "verify": [ok_verify] * 5}, "verify: at most 4 checks"),
        (
            {"steps": [{"reboot": True}], "verify": {"run": "true", "timeout": 3601}},
            "verify.timeout: must be a whole number of seconds from 1 to 3600",
        ),
        (
            {"steps": [{"reboot": True}], "verify": [ok_verify, {"http": "x"}]},
            'verify[1]: must be one of {"ssh": true}, {"run": "<shell>"} or '
            '{"function": "<stored function path>"}',
        ),
        (
            {"steps": [{"reboot": True}], "verify": ok_verify, "keep_snapshot": "no"},
            "keep_snapshot: must be true or false",
        ),
        (
            {"steps": [{"reboot": True}], "verify": ok_verify, "accept": ["everything"]},
            "accept: unknown item 'everything'; known: disk-grow",
        ),
        (
            {"steps": [{"reboot": True}], "verify": ok_verify, "dry_run": True},
            "dry_run: unknown field; known: steps, verify, keep_snapshot, accept",
        ),
    ]
    for body, message in cases:
        assert await service.post(path, body) == (400, message), body
    good = {"steps": [{"reboot": True}], "verify": ok_verify}
    assert await service.post("/vm/999/change", good) == (404, "VM 999 not found")
    assert await service.post("/vm/x1/change", good) == (400, "invalid VM id 'x1'")
    assert await service.post(f"/vm/{vmid}/stop") == (200, "ok")
    assert await service.post(path, good) == (409, "VM is not running")
    assert await snapshots(service, vmid) == []
