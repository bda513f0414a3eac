"""Golden outputs of a real Proxmox's qm, pvesh and pvesm through the parsers."""

from __future__ import annotations

import pytest

from actors.vm.cli.output import (
    CommandResult,
    OutputError,
    disk_size_bytes,
    parse_config,
    parse_imported_volid,
    parse_node_cpu_flags,
    parse_node_resources,
    parse_pvesm_status,
    parse_status,
    parse_vm_resources,
    resize_error,
)
from actors.vm.cputype import cpu_model_for_flags, lowest_cpu_model

PVESM_NEW = """\
Name             Type     Status     Total (KiB)      Used (KiB) Available (KiB)        %
local             dir     active        98497780         9858012        83591584   10.01%
local-lvm     lvmthin     active       832888832        25468216       807420616    3.06%
nfs-iso           nfs   inactive               0               0               0    0.00%
backup2           pbs   disabled               0               0               0      N/A
"""
PVESM_OLD_HEADER = (
    "Name             Type     Status           Total            Used       Available        %\n"
    "local-lvm     lvmthin     active       832888832        25468216       807420616    3.06%\n"
)


def test_qm_status() -> None:
    assert parse_status("status: running\n") == "running"
    assert parse_status("status: stopped\n") == "stopped"
    with pytest.raises(OutputError):
        parse_status("")


def test_pvesm_status_both_header_versions() -> None:
    rows = parse_pvesm_status(PVESM_NEW)
    assert [(r.name, r.type, r.status) for r in rows] == [
        ("local", "dir", "active"),
        ("local-lvm", "lvmthin", "active"),
        ("nfs-iso", "nfs", "inactive"),
        ("backup2", "pbs", "disabled"),
    ]
    assert rows[1].total_kib == 832888832 and rows[1].usable
    assert not rows[2].usable and not rows[3].usable
    old = parse_pvesm_status(PVESM_OLD_HEADER)
    assert old[0].name == "local-lvm" and old[0].available_kib == 807420616


def test_imported_volid_new_and_old_wording_and_dir_storage() -> None:
    lvm = (
        "importing disk '/tmp/debian-12-generic-amd64.qcow2' to VM 120 ...\n"
        '  Logical volume "vm-120-disk-0" created.\n'
        "transferred 0.0 B of 2.0 GiB (0.00%)\n"
        "transferred 2.0 GiB of 2.0 GiB (100.00%)\n"
        "unused0: successfully imported disk 'local-lvm:vm-120-disk-0'\n"
    )
    assert parse_imported_volid(lvm) == "local-lvm:vm-120-disk-0"
    directory = "unused0: successfully imported disk 'local:120/vm-120-disk-0.raw'\n"
    assert parse_imported_volid(directory) == "local:120/vm-120-disk-0.raw"
    old = "Successfully imported disk as 'unused1:local-zfs:vm-120-disk-1'\n"
    assert parse_imported_volid(old) == "local-zfs:vm-120-disk-1"
    with pytest.raises(OutputError):
        parse_imported_volid("transferred 2.0 GiB of 2.0 GiB (100.00%)\n")


def test_resize_failure_is_seen_even_with_exit_status_zero() -> None:
    assert resize_error(CommandResult(0, "Image resized.\n", "")) is None
    assert resize_error(CommandResult(0, "", "  WARNING: Sum of all thin volume sizes\n")) is None
    assert resize_error(CommandResult(0, "", "shrinking disks is not supported\n")) == (
        "shrinking disks is not supported"
    )
    assert resize_error(CommandResult(255, "", "VM is locked (migrate)\n")) == (
        "VM is locked (migrate)"
    )
    assert resize_error(CommandResult(2, "", "")) == "exit status 2"


def test_config_and_drive_sizes() -> None:
    text = (
        "boot: order=scsi0\ncores: 2\nname: web-120\n"
        "scsi0: local-lvm:vm-120-disk-0,size=32G\n"
        "sshkeys: ssh-ed25519%20AAAA%0A\n[PENDING]\ncores: 4\n"
    )
    config = parse_config(text)
    assert config["cores"] == "2" and config["name"] == "web-120"
    assert disk_size_bytes(config["scsi0"]) == 32 * 1024**3
    assert disk_size_bytes("local:120/vm-120-disk-0.raw,size=2252M") == 2252 * 1024**2
    assert disk_size_bytes("local-lvm:vm-120-cloudinit,media=cdrom") is None


RESOURCES_VM = (
    '[{"cpu":0.0123,"disk":0,"diskread":254803968,"diskwrite":101376000,"id":"qemu/120",'
    '"maxcpu":2,"maxdisk":34359738368,"maxmem":4294967296,"mem":1073741824,"memhost":1181116006,'
    '"name":"web-120","netin":1843200,"netout":204800,"node":"pve1","status":"running",'
    '"tags":"debian","template":0,"type":"qemu","uptime":3600,"vmid":120},'
    '{"cpu":0,"disk":0,"diskread":0,"diskwrite":0,"id":"qemu/121","maxcpu":2,'
    '"maxdisk":17179869184,"maxmem":2147483648,"mem":0,"name":"121","netin":0,"netout":0,'
    '"node":"pve2","status":"stopped","tags":"ubuntu","template":0,"type":"qemu","uptime":0,'
    '"vmid":121},'
    '{"id":"qemu/122","node":"pve1","status":"unknown","type":"qemu","vmid":122},'
    '{"id":"lxc/300","node":"pve1","status":"running","type":"lxc","vmid":300}]\n'
)


def test_cluster_resources_tolerate_a_fresh_vm_with_status_unknown() -> None:
    vms = parse_vm_resources(RESOURCES_VM)
    assert [v.vmid for v in vms] == [120, 121, 122]  # the LXC guest is not ours
    web = vms[0]
    assert (web.name, web.node, web.status, web.maxcpu, web.maxmem, web.tags) == (
        "web-120", "pve1", "running", 2, 4294967296, "debian",
    )  # fmt: skip
    fresh = vms[2]
    assert fresh.status == "unknown"
    assert fresh.name is None and fresh.maxcpu is None and fresh.maxmem is None
    assert parse_vm_resources("[]\n") == []
    with pytest.raises(OutputError):
        parse_vm_resources("not json")


def test_node_resources_online_and_offline() -> None:
    text = (
        '[{"cgroup-mode":2,"cpu":0.0213,"disk":9858012160,"id":"node/pve1","level":"",'
        '"maxcpu":16,"maxdisk":100861726720,"maxmem":67324936192,"mem":6851395584,'
        '"node":"pve1","status":"online","type":"node","uptime":1234567},'
        '{"id":"node/pve3","level":"","maxcpu":8,"maxdisk":100861726720,"maxmem":33662468096,'
        '"node":"pve3","status":"offline","type":"node"}]'
    )
    nodes = parse_node_resources(text)
    assert [(n.node, n.status, n.maxcpu) for n in nodes] == [
        ("pve1", "online", 16),
        ("pve3", "offline", 8),
    ]
    assert nodes[1].mem is None
    assert (nodes[0].uptime, nodes[0].cpu, nodes[0].disk) == (1234567, 0.0213, 9858012160)
    assert nodes[1].uptime is None


def test_cpu_model_never_the_invalid_x86_64_v1() -> None:
    v2 = "fpu cx16 lahf_lm popcnt pni sse4_1 sse4_2 ssse3"
    v3 = v2 + " avx avx2 bmi1 bmi2 f16c fma abm movbe xsave"
    v4 = v3 + " avx512f avx512bw avx512cd avx512dq avx512vl"
    assert cpu_model_for_flags("fpu sse sse2") == "kvm64"
    assert cpu_model_for_flags(v2) == "x86-64-v2"
    assert cpu_model_for_flags(v2 + " aes") == "x86-64-v2-AES"
    assert cpu_model_for_flags(v3) == "x86-64-v3"
    assert cpu_model_for_flags(v4) == "x86-64-v4"
    assert lowest_cpu_model(["x86-64-v4", "x86-64-v2-AES", "x86-64-v3"]) == "x86-64-v2-AES"
    assert lowest_cpu_model([]) == "kvm64"
    assert parse_node_cpu_flags('{"cpuinfo":{"flags":"fpu aes"}}') == "fpu aes"
    with pytest.raises(OutputError):
        parse_node_cpu_flags("{}")


def test_error_text_prefers_stderr() -> None:
    text = "unable to create VM 120 - VM 120 already exists on node 'pve2'"
    assert CommandResult(255, "", text + "\n").error_text() == text
    assert CommandResult(1, "a\nlast\n", "").error_text() == "last"
