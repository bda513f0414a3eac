"""`cairn vm install` and `cairn vm set` options that shape the guest, against a running
cairn (the simulated cluster): what reaches the VM's config, the script's output on the
terminal, and what the command line refuses itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pvesim.state import Store

from tests.cli.conftest import Cairn


def config(cairn: Cairn, vmid: int) -> dict[str, Any]:
    with Store(cairn.data / "pvesim").locked() as txn:
        found = txn.find_vm(vmid)
    assert found is not None
    return dict(found[1]["config"])


def test_install_options_reach_the_vm_and_the_scripts_output_is_printed(
    cairn: Cairn, tmp_path: Path
) -> None:
    script = tmp_path / "setup.sh"
    script.write_text("echo configured by the caller\n")
    result = cairn.run(
        "vm", "install", "--os", "debian", "--version", "12", "--script-file", str(script),
        "--package", "nginx", "--package", "curl", "--vlan", "30", "--mtu", "1400",
        "--nameserver", "10.0.0.53", "--nameserver", "10.0.0.54", "--searchdomain", "lab.org",
        "--disk", "20G", "--disk", "8G@local-lvm", "--tag", "web", "--tag", "cli",
        "--description", "made from the command line",
    )  # fmt: skip
    assert result.code == 0, result
    assert "  [*] script: configured by the caller (" in result.out
    vmid = int(result.out.split("[*] VMID: ")[1].split()[0])
    conf = config(cairn, vmid)
    assert str(conf["net0"]).endswith(",bridge=vmbr0,tag=30,mtu=1400")
    assert conf["nameserver"] == "10.0.0.53 10.0.0.54" and conf["searchdomain"] == "lab.org"
    assert str(conf["scsi0"]).endswith(",size=20G") and str(conf["scsi1"]).endswith(",size=8G")
    assert conf["tags"] == "debian;web;cli"
    assert str(conf["description"]).startswith("made from the command line\ncreated by cairn")

    said = cairn.run("vm", "set", str(vmid), "--tag", "db", "--description", "now a db")
    assert said.code == 0, said
    assert said.out.splitlines() == [f"VM {vmid}: tags set to db", f"VM {vmid}: notes set"]
    conf = config(cairn, vmid)
    assert conf["tags"] == "debian;db" and str(conf["description"]).startswith("now a db\n")
    running = cairn.run("vm", "set", str(vmid), "--vlan", "0")
    assert (running.code, running.err) == (1, "cairn: VM is running\n")
    assert cairn.run("vm", "stop", str(vmid)).code == 0
    moved = cairn.run("vm", "set", str(vmid), "--vlan", "0", "--mtu", "1500")
    assert moved.out == f"VM {vmid}: network set: vlan removed, mtu 1500\n", moved
    assert str(config(cairn, vmid)["net0"]).endswith(",bridge=vmbr0,mtu=1500")
    grown = cairn.run("vm", "set", str(vmid), "--disk", "2G", "--drive", "scsi1")
    assert (grown.code, grown.out) == (0, f"VM {vmid}: disk scsi1 grown by 2G\n"), grown
    conf = config(cairn, vmid)
    assert str(conf["scsi1"]).endswith(",size=10G") and str(conf["scsi0"]).endswith(",size=20G")
    lacking = cairn.run("vm", "set", str(vmid), "--disk", "2G", "--drive", "scsi2")
    assert (lacking.code, lacking.err) == (
        1,
        f"cairn: drive: VM {vmid} has no disk scsi2; its disks: scsi0, scsi1\n",
    )
    alone = cairn.run("vm", "set", str(vmid), "--drive", "scsi1")
    assert alone.code == 2 and "--drive names the disk --disk grows; give --disk too" in alone.err


def test_bad_options_are_refused(cairn: Cairn) -> None:
    base = ("vm", "install", "--os", "debian", "--version", "12")
    two = cairn.run(*base, "--disk", "20G", "--disk", "30G")
    assert two.code == 2 and "--disk: one size for the boot disk" in two.err
    half = cairn.run(*base, "--disk", "8G@")
    assert half.code == 2 and "an extra disk is SIZE@STORAGE" in half.err
    bad = cairn.run(*base, "--package=-o")
    assert (bad.code, bad.err.splitlines()[0][:47]) == (
        1,
        "cairn: packages: invalid package name '-o': let",
    )
    missing = cairn.run(*base, "--script-file", "/nonexistent/x.sh")
    assert missing.code == 2 and "cannot read the script /nonexistent/x.sh" in missing.err
