"""`cairn vm` against a running cairn (the simulated cluster): each command's output and exit
code, --json parsed, an install's stages printed while it runs, refusals and failures."""

from __future__ import annotations

import io
import json
import signal
import urllib.request
from typing import Any

import pytest

from gateway.cli import common as cli_common
from gateway.cli import vm as cli_vm
from tests.cli.conftest import Cairn
from tests.vm.test_install_e2e import STAGES

INSTALL_STEPS = STAGES  # the install pipeline's stages, in order (docs/vm.md)


def vm_row(cairn: Cairn, vmid: int) -> dict[str, Any] | None:
    with urllib.request.urlopen(cairn.url("vm") + "/api/vm/list", timeout=30) as resp:
        body = json.load(resp)
    return next((vm for vm in body["list"] if vm["vmid"] == vmid), None)


def installed(cairn: Cairn, *more: str) -> int:
    result = cairn.run("vm", "install", "--os", "debian", "--version", "12", "--json", *more)
    assert result.code == 0, result
    vmid: int = result.json()["vm_id"]
    return vmid


def test_an_install_prints_each_stage_while_it_runs_and_exits_0(cairn: Cairn) -> None:
    # The first stage is on the terminal while the install still runs (at a real node's pace
    # until then, so that a loaded machine cannot let the install end first).
    with cairn.sim_delays(1):
        argv = ("vm", "install", "--os", "debian", "--version", "12", "--name", "web-1")
        proc = cairn.start(*argv)
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        assert first.startswith("install: VM "), first
        vmid = int(first.split()[2].rstrip(","))
        assert proc.stdout.readline() == "preparation > checking VMID\n"
        row = vm_row(cairn, vmid)
        assert row is not None and row["state"] == "installing", row
    rest = proc.stdout.read()
    assert proc.wait(120) == 0, proc.stderr.read()
    assert proc.stderr.read() == ""
    lines = rest.splitlines()
    steps = ["preparation > checking VMID"] + [ln for ln in lines if not ln.startswith("  ")]
    assert steps == INSTALL_STEPS
    assert f"  [*] VMID: {vmid} " in rest
    assert f"  [*] IP: 127.0.0.{vmid} " in rest
    assert "  [*] Password: " in rest  # generated, shown once
    assert lines[-1].startswith("  [*] User: debian")
    row = vm_row(cairn, vmid)
    assert row is not None and row["state"] == "running" and row["name"] == "web-1"


def test_install_with_json_prints_one_document(cairn: Cairn, tmp_path: Any) -> None:
    secret = tmp_path / "pw"
    secret.write_text("correct horse battery\n")
    result = cairn.program(
        "vm", "install", "--os", "debian", "--version", "12", "--cpu", "1", "--memory", "1024",
        "--password-file", str(secret), "--json",
    )  # fmt: skip
    assert result.code == 0, result
    doc = result.json()  # the whole of stdout is one document
    assert doc["ok"] is True and isinstance(doc["vm_id"], int) and doc["ip"].startswith("127.0.0.")
    assert doc["task"] and doc["records"][-1]["message"].startswith("[*] User: debian")
    assert doc["records"][0]["step"] == INSTALL_STEPS[0]
    assert not any("Password" in r["message"] for r in doc["records"])  # given, not generated
    assert result.err == ""  # not a terminal: no progress on stderr
    shown = cairn.run("vm", "show", str(doc["vm_id"]), "--json").json()
    assert (shown["cpu"], shown["memory"]) == (1, 1024)


def test_list_and_show_as_text_and_json(cairn: Cairn) -> None:
    vmid = installed(cairn, "--name", "listed")
    text = cairn.run("vm", "list")
    assert text.code == 0 and text.err == ""
    header, *rows = text.out.splitlines()
    assert header.split() == [
        "VMID", "NAME", "STATE", "NODE", "IP", "OS", "CPU", "MEMORY", "DISK", "CAIRN",
    ]  # fmt: skip
    mine = next(r for r in rows if r.startswith(f"{vmid} "))
    assert mine.split() == [
        str(vmid), "listed", "running", "pve1", f"127.0.0.{vmid}", "debian", "2", "2", "GiB",
        "16", "GiB", "yes",
    ]  # fmt: skip
    # The count of the VMs listed (this module's cairn may hold others' VMs, or only this one).
    count = len(rows) - 1
    assert rows[-1] == f"{count} VM{'s' if count != 1 else ''} (simulated cluster)", rows
    as_json = cairn.run("vm", "list", "--json").json()
    assert as_json["simulated"] is True
    assert any(vm["vmid"] == vmid and vm["name"] == "listed" for vm in as_json["list"])

    show = cairn.run("vm", "show", str(vmid))
    assert show.code == 0
    fields = dict(line.split(None, 1) for line in show.out.splitlines())
    assert fields["vmid"] == str(vmid) and fields["name"] == "listed"
    assert fields["state"] == "running" and fields["created_by_cairn"] == "yes"
    assert fields["version"] == "12" and fields["last_task"].startswith("install ok")
    # The units of the list and the console: memory in MiB/GiB, the disk in GiB.
    assert (fields["memory"], fields["disk"]) == ("2 GiB", "16 GiB")
    assert cairn.run("vm", "show", str(vmid), "--json").json()["vmid"] == vmid


def test_the_lifecycle_of_a_vm(cairn: Cairn) -> None:
    vmid = installed(cairn)
    stop = cairn.run("vm", "stop", str(vmid))
    assert (stop.code, stop.out, stop.err) == (0, f"VM {vmid} stopped (ok)\n", "")

    again = cairn.run("vm", "stop", str(vmid), "--json")
    assert again.code == 1
    assert again.err == "cairn: VM is not running\n"
    assert again.json() == {"error": "VM is not running", "status": 409, "exit": 1}

    resized = cairn.run("vm", "set", str(vmid), "--cpu", "3", "--memory", "4096", "--disk", "2G")
    assert resized.code == 0, resized
    assert resized.out.splitlines() == [
        f"VM {vmid}: cpu set to 3",
        f"VM {vmid}: memory set to 4 GiB",
        f"VM {vmid}: disk grown by 2G",
    ]
    shown = cairn.run("vm", "show", str(vmid), "--json").json()
    assert (shown["cpu"], shown["memory"], shown["disk"]) == (3, 4096, 18)

    moved = cairn.run("vm", "set", str(vmid), "--node", "pve2", "--json")
    assert moved.code == 0, moved
    doc = moved.json()
    assert doc["set"] == {"node": "pve2"} and doc["migration"]["ok"] is True
    assert doc["migration"]["records"][0]["step"] == "migrate > migrating VM"
    assert cairn.run("vm", "show", str(vmid), "--json").json()["node"] == "pve2"

    start = cairn.run("vm", "start", str(vmid))
    assert start.code == 0, start
    assert "start > starting VM\n" in start.out and "start > waiting for ready\n" in start.out

    reboot = cairn.run("vm", "reboot", str(vmid), "--json")
    assert reboot.code == 0 and reboot.json()["ok"] is True and reboot.json()["vm_id"] == vmid

    busy_destroy = cairn.run("vm", "destroy", str(vmid))
    assert busy_destroy.code == 1 and busy_destroy.err == "cairn: VM is running\n"

    shutdown = cairn.run("vm", "shutdown", str(vmid))
    assert (shutdown.code, shutdown.out) == (0, f"VM {vmid} shut down (ok)\n")
    destroy = cairn.run("vm", "destroy", str(vmid), "--json")
    assert destroy.code == 0
    assert destroy.json() == {"ok": True, "vm_id": vmid, "action": "destroy"}
    gone = cairn.run("vm", "show", str(vmid))
    assert (gone.code, gone.out, gone.err) == (1, "", f"cairn: VM {vmid} not found\n")


def test_a_refused_install_says_why_before_any_stage(cairn: Cairn) -> None:
    result = cairn.program("vm", "install", "--os", "debian", "--version", "99")
    assert result.code == 1
    assert result.out == ""
    assert result.err == "cairn: version: debian supports 11, 12, 13\n"


def test_an_install_that_fails_exits_1_with_the_failure(cairn: Cairn) -> None:
    taken = installed(cairn)
    result = cairn.run("vm", "install", "--os", "debian", "--version", "12", "--id", str(taken))
    assert result.code == 1
    assert result.out.splitlines() == [
        "preparation > checking VMID",
        "  [*] start VM installation (0.00s)",
        f"  [-] VM {taken} already exists (0.00s)",
    ]
    assert result.err == f"cairn: install failed: [-] VM {taken} already exists (0.00s)\n"


def test_set_without_a_change_and_bad_ids_are_usage_errors(cairn: Cairn) -> None:
    nothing = cairn.run("vm", "set", "101")
    assert nothing.code == 2 and "give at least one of --cpu" in nothing.err
    for argv in (["show", "abc"], ["stop", "-1"], ["start", "1e3"]):
        bad = cairn.program("vm", *argv)
        assert bad.code == 2, argv
        assert "invalid VM id value" in bad.err
    unknown = cairn.run("vm", "stop", "99999")
    assert (unknown.code, unknown.err) == (1, "cairn: VM 99999 not found\n")


def test_a_service_that_is_not_there_is_exit_3(cairn: Cairn) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # a port nobody listens on
        port = sock.getsockname()[1]
        result = cairn.program("vm", "list", "--json", env={"VM_PORT": str(port)})
    assert result.code == 3
    doc = result.json()
    assert doc["exit"] == 3 and doc["status"] is None
    assert f"cannot reach the vm service at http://127.0.0.1:{port}/api: connection refused" in (
        result.err
    )


@pytest.mark.parametrize("group", ["vm", "fn", "images"])
def test_every_command_documents_its_options(cairn: Cairn, group: str) -> None:
    result = cairn.program(group, "--help")
    assert result.code == 0 and result.err == ""
    assert "usage: cairn " + group in result.out


def test_ctrl_c_leaves_the_install_running_and_vm_task_follows_it_again(cairn: Cairn) -> None:
    # At a real node's pace the install has some 40 s to go when Ctrl-C is pressed; at the
    # tests' pace a loaded machine could let it end before the signal lands.
    with cairn.sim_delays(1):
        proc = cairn.start("vm", "install", "--os", "debian", "--version", "12")
        assert proc.stdout is not None and proc.stderr is not None
        vmid = int(proc.stdout.readline().split()[2].rstrip(","))
        assert proc.stdout.readline() == "preparation > checking VMID\n"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130
        assert proc.stderr.read() == (
            f"cairn: interrupted; the install goes on in cairn: follow it with "
            f"`cairn vm task {vmid}`\n"
        )
        row = vm_row(cairn, vmid)
        assert row is not None and row["state"] == "installing", row
    again = cairn.run("vm", "task", str(vmid))
    assert again.code == 0, again
    lines = again.out.splitlines()
    assert lines[0].startswith(f"task: VM {vmid}, task ")
    assert [ln for ln in lines[1:] if not ln.startswith("  ")] == INSTALL_STEPS
    assert lines[-1].startswith("  [*] User: debian")
    assert "Password" not in again.out  # shown once, to the stream that asked for it
    assert vm_row(cairn, vmid) is not None


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_with_json_a_terminal_still_sees_the_stages_on_stderr(cairn: Cairn) -> None:
    out, err = io.StringIO(), Terminal()
    argv = ["vm", "install", "--os", "debian", "--version", "12", "--json"]
    code = cli_common.main(cli_vm.register, argv, cairn.env, out, err)
    assert code == 0, err.getvalue()
    doc = json.loads(out.getvalue())
    shown = err.getvalue().splitlines()
    assert shown[0] == f"install: VM {doc['vm_id']}, task {doc['task']}"
    assert [ln for ln in shown[1:] if not ln.startswith("  ")] == INSTALL_STEPS
    assert [f"  {r['message']}" for r in doc["records"]] == [
        ln for ln in shown if ln.startswith("  ")
    ]


def test_snapshots_from_the_command_line(cairn: Cairn) -> None:
    vmid = installed(cairn)
    empty = cairn.run("vm", "snapshot", "list", str(vmid))
    assert (empty.code, empty.out) == (0, "no snapshots\n")
    taken = cairn.run(
        "vm", "snapshot", "create", str(vmid), "pre", "--description", "before the upgrade"
    )
    assert taken.code == 0, taken
    assert "snapshot > taking snapshot\n" in taken.out and "[+] snapshot pre taken (" in taken.out
    listed = cairn.run("vm", "snapshot", "list", str(vmid))
    header, row = listed.out.splitlines()
    assert header.split() == ["NAME", "CREATED", "PARENT", "RAM", "BY", "DESCRIPTION"]
    cells = row.split()
    assert cells[0] == "pre" and " ".join(cells[2:]) == "- no ip:127.0.0.1 before the upgrade"
    doc = cairn.run("vm", "snapshot", "list", str(vmid), "--json").json()
    assert [(s["name"], s["vmstate"]) for s in doc] == [("pre", False)]

    again = cairn.run("vm", "snapshot", "create", str(vmid), "pre", "--json")
    assert again.code == 1
    assert again.json()["error"] == f"VM {vmid} already has a snapshot named 'pre'"
    bad = cairn.run("vm", "snapshot", "create", str(vmid), "1st")
    assert bad.code == 1 and bad.err.startswith("cairn: name: invalid snapshot name '1st'")

    back = cairn.run("vm", "snapshot", "rollback", str(vmid), "pre", "--json")
    assert back.code == 0, back
    assert back.json()["records"][0]["step"] == "rollback > rolling back"
    gone = cairn.run("vm", "snapshot", "delete", str(vmid), "nope")
    assert (gone.code, gone.err) == (1, f"cairn: VM {vmid} has no snapshot named 'nope'\n")
    deleted = cairn.run("vm", "snapshot", "delete", str(vmid), "pre")
    assert (deleted.code, deleted.out) == (0, f"VM {vmid}: snapshot pre deleted (ok)\n")
    assert cairn.run("vm", "snapshot", "list", str(vmid), "--json").json() == []


def test_a_change_from_the_command_line(cairn: Cairn, tmp_path: Any) -> None:
    vmid = installed(cairn)
    kept = cairn.run(
        "vm", "change", str(vmid), '{"steps": [{"run": "echo hi"}], "verify": {"ssh": true}}'
    )
    assert kept.code == 0, kept
    assert "change > step 1: run\n" in kept.out and "[+] change kept; snapshot" in kept.out
    failing = tmp_path / "change.json"
    failing.write_text(json.dumps({"steps": [{"run": "exit 4"}], "verify": {"ssh": True}}))
    back = cairn.run("vm", "change", str(vmid), "--file", str(failing), "--json")
    assert back.code == 1
    assert back.json()["error"].startswith(
        "change failed: [-] change rolled back: step 1 (run) failed: exit status 4 ("
    )
    bad = cairn.run("vm", "change", str(vmid), '{"steps": []}')
    assert (bad.code, bad.err) == (1, "cairn: steps: must have at least one step\n")
    neither = cairn.run("vm", "change", str(vmid))
    assert neither.code == 2, neither
    assert "give the change as a JSON argument or with --file FILE" in neither.err
    broken = cairn.run("vm", "change", str(vmid), "{steps")
    assert broken.code == 2 and "the change is not JSON: " in broken.err, broken


def test_templates_from_the_command_line(cairn: Cairn) -> None:
    # Templates are on by default: an install builds (or finds) the Debian 12 template on the
    # main node and clones it.
    vmid = installed(cairn)
    listed = cairn.run("vm", "templates")
    assert listed.code == 0, listed
    header, *rows = [line.split() for line in listed.out.splitlines()]
    assert header == ["VMID", "NODE", "OS", "VERSION", "CHECKSUM", "STATE", "CLONES"]
    row = next(r for r in rows if r[0] == "9000")
    assert row[1:4] == ["pve1", "debian", "12"] and row[5:7] == ["ready,", "current"], row
    assert str(vmid) in " ".join(row[7:]), row
    as_json = cairn.run("vm", "templates", "--json").json()
    tpl = next(t for t in as_json if t["vmid"] == 9000)
    assert (tpl["os"], tpl["version"], tpl["state"], tpl["current"]) == (
        "debian",
        "12",
        "ready",
        True,
    )
    assert vmid in tpl["clones"]
    pruned = cairn.run("vm", "templates", "--prune")
    assert pruned.code == 0, pruned
    assert pruned.out.splitlines()[0] == "removed: none"
    assert "kept 9000: installs clone it" in pruned.out.splitlines()
    assert cli_vm.template_table([]) == "no templates"  # what a cairn that never cloned lists
