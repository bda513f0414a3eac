"""`qm` behaviours: outputs, exit codes and stderr texts on happy and wrong-state paths."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pvesim import qm
from pvesim.context import Ctx
from pvesim.state import Store

from .helpers import ED25519_PUB, installed_vm, new_store, qcow2_image, run


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return new_store(tmp_path / "pve")


def test_create_then_config_shows_defaults_and_boot_order(store: Store) -> None:
    r = run(store, "qm", "create", "120", "--name", "web-120", "--memory", "2048",
            "--net0", "virtio,bridge=vmbr0")  # fmt: skip
    assert (r.code, r.out, r.err) == (0, "", "")
    cfg = run(store, "qm", "config", "120").out
    lines = dict(line.split(": ", 1) for line in cfg.splitlines())
    assert lines["boot"] == "order=net0"
    assert lines["net0"].startswith("virtio=BC:24:11:") and lines["net0"].endswith(",bridge=vmbr0")
    assert lines["meta"].startswith("creation-qemu=")
    assert "smbios1" in lines and "vmgenid" in lines
    assert list(lines) == sorted(lines)


def test_create_duplicate_anywhere_in_cluster(store: Store) -> None:
    assert run(store, "qm", "create", "120", node="pve2").code == 0
    r = run(store, "qm", "create", "120")
    assert r.code == 255
    assert r.err == "unable to create VM 120 - VM 120 already exists on node 'pve2'\n"


def test_create_parameter_errors(store: Store) -> None:
    r = run(store, "qm", "create", "99", "--name", "web_1", "--cpu", "x86-64-v1")
    assert r.code == 255
    assert r.err == (
        "400 Parameter verification failed.\n"
        "cpu: Built-in cputype 'x86-64-v1' is not defined (missing 'custom-' prefix?)\n"
        "name: value does not look like a valid DNS name\n"
        "vmid: value must have a minimum value of 100\n"
        "qm create <vmid> [OPTIONS]\n"
    )
    # qemu-server checks balloon <= memory in `qm set` only, as a plain die before the
    # `update VM` line; `qm create` takes it.
    r = run(store, "qm", "create", "120", "--memory", "1024", "--balloon", "2048")
    assert (r.code, r.err) == (0, "")
    r = run(store, "qm", "set", "120", "--memory", "1024", "--balloon", "2048")
    assert (r.code, r.out, r.err) == (
        255, "", "balloon value too large (must be smaller than assigned memory)\n",
    )  # fmt: skip
    assert run(store, "qm", "set", "120", "--memory", "2048").code == 0


def test_unknown_subcommand(store: Store) -> None:
    r = run(store, "qm", "frobnicate", "120")
    assert r.code == 255
    assert r.err.startswith(
        "ERROR: unknown command 'qm frobnicate'\nUSAGE: qm <COMMAND> [ARGS] [OPTIONS]\n"
    )


def test_status_config_of_missing_vm_exit_2(store: Store) -> None:
    for sub in ("status", "config"):
        r = run(store, "qm", sub, "120")
        assert r.code == 2
        assert r.err == "Configuration file 'nodes/pve1/qemu-server/120.conf' does not exist\n"


def test_qm_is_node_local(store: Store) -> None:
    assert run(store, "qm", "create", "130", node="pve2").code == 0
    r = run(store, "qm", "status", "130")
    assert r.err == "Configuration file 'nodes/pve1/qemu-server/130.conf' does not exist\n"
    assert run(store, "qm", "status", "130", node="pve2").out == "status: stopped\n"


def test_importdisk_adds_unused_and_prints_progress(store: Store, tmp_path: Path) -> None:
    assert run(store, "qm", "create", "120").code == 0
    image = qcow2_image(tmp_path / "debian-12-generic-amd64.qcow2")
    r = run(store, "qm", "importdisk", "120", str(image), "local-lvm")
    lines = r.out.splitlines()
    assert r.code == 0
    assert lines[0] == f"importing disk '{image}' to VM 120 ..."
    assert lines[1] == '  Logical volume "vm-120-disk-0" created.'
    assert lines[2] == "transferred 0.0 B of 2.0 GiB (0.00%)"
    assert lines[3] == "transferred 20.5 MiB of 2.0 GiB (1.00%)"
    assert lines[-2] == "transferred 2.0 GiB of 2.0 GiB (100.00%)"
    assert lines[-1] == "unused0: successfully imported disk 'local-lvm:vm-120-disk-0'"
    assert "unused0: local-lvm:vm-120-disk-0\n" in run(store, "qm", "config", "120").out
    r = run(store, "qm", "disk", "import", "120", str(image), "vmfiles")
    assert r.out.splitlines()[1] == (
        f"Formatting '/srv/vmfiles/images/120/vm-120-disk-0.raw', fmt=raw size={2 * 1024**3}"
    )
    assert (
        r.out.splitlines()[-1]
        == "unused1: successfully imported disk 'vmfiles:120/vm-120-disk-0.raw'"
    )
    r = run(store, "qm", "disk", "import", "120", str(image), "vmfiles", "--format", "qcow2")
    # The disk number is shared by every format on a file storage.
    assert r.out.splitlines()[-1].endswith("'vmfiles:120/vm-120-disk-1.qcow2'")


def test_a_stock_local_storage_takes_no_vm_disks(store: Store, tmp_path: Path) -> None:
    run(store, "qm", "create", "120")
    image = qcow2_image(tmp_path / "debian-12-generic-amd64.qcow2")
    r = run(store, "qm", "disk", "import", "120", str(image), "local")
    assert (r.code, r.err) == (255, "storage local does not support vm images\n")
    r = run(store, "qm", "set", "120", "--ide2", "local:cloudinit")
    assert (r.code, r.err) == (255, "storage local does not support vm images\n")


def test_importdisk_errors(store: Store, tmp_path: Path) -> None:
    image = qcow2_image(tmp_path / "img.qcow2")
    r = run(store, "qm", "importdisk", "120", str(image), "local-lvm")
    assert (r.code, r.err) == (
        2,
        "Configuration file 'nodes/pve1/qemu-server/120.conf' does not exist\n",
    )
    run(store, "qm", "create", "120")
    r = run(store, "qm", "importdisk", "120", str(tmp_path / "nope.qcow2"), "local-lvm")
    assert (r.code, r.err) == (
        255,
        f"{tmp_path / 'nope.qcow2'}: non-existent or non-regular file\n",
    )
    r = run(store, "qm", "importdisk", "120", str(image), "nosuch")
    assert (r.code, r.err) == (255, "storage 'nosuch' does not exist\n")


def test_dir_storage_needs_the_reported_volid(store: Store, tmp_path: Path) -> None:
    run(store, "qm", "create", "120")
    run(store, "qm", "importdisk", "120", str(qcow2_image(tmp_path / "i.qcow2")), "vmfiles")
    r = run(store, "qm", "set", "120", "--scsi0", "vmfiles:vm-120-disk-0")
    assert (r.code, r.err) == (255, "unable to parse directory volume name 'vm-120-disk-0'\n")
    r = run(store, "qm", "set", "120", "--scsi0", "vmfiles:120/vm-120-disk-0.raw")
    assert r.code == 0
    cfg = run(store, "qm", "config", "120").out
    assert "scsi0: vmfiles:120/vm-120-disk-0.raw,size=2G\n" in cfg
    assert "unused0" not in cfg


def test_set_attaches_disk_without_boot_order_and_only_a_real_cdrom_is_appended(
    store: Store, tmp_path: Path
) -> None:
    run(store, "qm", "create", "120", "--net0", "virtio,bridge=vmbr0")
    run(store, "qm", "importdisk", "120", str(qcow2_image(tmp_path / "i.qcow2")), "local-lvm")
    assert run(store, "qm", "set", "120", "--scsi0", "local-lvm:vm-120-disk-0").out == (
        "update VM 120: -scsi0 local-lvm:vm-120-disk-0\n"
    )
    r = run(store, "qm", "set", "120", "--ide2", "local-lvm:cloudinit")
    assert r.out == (
        "update VM 120: -ide2 local-lvm:cloudinit\n"
        '  Logical volume "vm-120-cloudinit" created.\n'
        "ide2: successfully created disk 'local-lvm:vm-120-cloudinit,media=cdrom'\n"
    )
    cfg = run(store, "qm", "config", "120").out
    assert "boot: order=net0\n" in cfg  # a cloud-init drive is not appended
    assert run(store, "qm", "set", "120", "--ide0", "none,media=cdrom").code == 0
    assert "boot: order=net0;ide0\n" in run(store, "qm", "config", "120").out
    assert "VM 120" in run(store, "qm", "list").out and "0.00" in run(store, "qm", "list").out
    r = run(store, "qm", "set", "120", "--ide3", "local-lvm:cloudinit")
    assert r.err == "ide3 - cloud-init drive is already attached at 'ide2'\n"
    r = run(store, "qm", "set", "120", "--boot", "order=scsi1")
    assert r.err == "invalid bootorder: device 'scsi1' does not exist'\n"
    assert run(store, "qm", "set", "120", "--boot", "order=scsi0").code == 0
    assert "16.00" not in run(store, "qm", "list").out
    assert "2.00" in run(store, "qm", "list").out


def test_set_sshkeys_file_and_validation(store: Store, tmp_path: Path) -> None:
    run(store, "qm", "create", "120")
    keyfile = tmp_path / "key.pub"
    keyfile.write_text(ED25519_PUB + "\n")
    r = run(store, "qm", "set", "120", "--sshkey", str(keyfile))
    assert r.code == 0
    assert (
        "sshkeys: ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIH3HfEOVaQCnlCpuRJ50vo%2B%2F3c9oEJSjElKg"
        "wsbIcdQK"
        "%20root%40vm%0A\n" in run(store, "qm", "config", "120").out
    )
    r = run(store, "qm", "set", "120", "--sshkeys", str(tmp_path / "missing.pub"))
    assert (r.code, r.err) == (
        255,
        f"can't open '{tmp_path / 'missing.pub'}' - No such file or directory\n",
    )
    r = run(store, "qm", "set", "120", "--sshkeys", "/dev/stdin", stdin="not a key\n")
    assert (r.code, r.err) == (255, "SSH public key validation error\n")
    r = run(
        store,
        "qm",
        "set",
        "120",
        "--sshkeys",
        "/dev/stdin",
        stdin="ssh-ed25519 AAAAB3NzaC1yc2E= x\n",
    )
    assert r.err == "SSH public key validation error\n"


def test_set_password_hidden_and_masked(store: Store) -> None:
    run(store, "qm", "create", "120")
    r = run(store, "qm", "set", "120", "--cipassword", "hunter2")
    assert r.out == "update VM 120: -cipassword <hidden>\n"
    cfg = run(store, "qm", "config", "120").out
    assert "cipassword: **********\n" in cfg and "hunter2" not in cfg
    run(store, "qm", "set", "120", "--cipassword=hunter3")
    run(store, "qm", "set", "120", "-cipassword", "hunter4")
    log = (store.root / "commands.log").read_text()
    assert "hunter2" not in log and "hunter3" not in log and "hunter4" not in log
    assert log.count("<hidden>") == 3
    assert "hunter2" not in (store.root / "nodes/pve1/qemu-server/120.json").read_text()


def test_set_no_options_and_ipconfig_without_mask(store: Store) -> None:
    run(store, "qm", "create", "120")
    assert run(store, "qm", "set", "120").err == "no options specified\n"
    r = run(store, "qm", "set", "120", "--ipconfig0", "ip=192.168.0.120")
    assert r.code == 255
    assert r.err == (
        "400 Parameter verification failed.\n"
        "ipconfig0: invalid format - format error\n"
        "ipconfig0.ip: invalid format - "
        "value does not look like a valid ipv4 network configuration\n"
        "qm set <vmid> [OPTIONS]\n"
    )


def test_running_vm_set_goes_pending(store: Store, tmp_path: Path) -> None:
    installed_vm(store, tmp_path)
    assert run(store, "qm", "start", "120").code == 0
    assert run(store, "qm", "set", "120", "--cores", "4", "--name", "renamed").code == 0
    assert "cores: 4\n" in run(store, "qm", "config", "120").out
    current = run(store, "qm", "config", "120", "--current").out
    assert "cores: 2\n" in current and "name: renamed\n" in current
    run(store, "qm", "stop", "120")
    run(store, "qm", "start", "120")
    assert "cores: 4\n" in run(store, "qm", "config", "120", "--current").out


def test_resize_absolute_relative_and_failures_exit_0(store: Store, tmp_path: Path) -> None:
    installed_vm(store, tmp_path)
    r = run(store, "qm", "resize", "120", "scsi0", "16G")
    assert r.code == 0
    assert r.out == (
        "  Size of logical volume pve/vm-120-disk-0 changed from 2.00 GiB (512 extents) to "
        "16.00 GiB (4096 extents).\n"
        "  Logical volume pve/vm-120-disk-0 successfully resized.\n"
    )
    assert run(store, "qm", "disk", "resize", "120", "scsi0", "+2G").code == 0
    assert "scsi0: local-lvm:vm-120-disk-0,size=18G\n" in run(store, "qm", "config", "120").out
    for args, err in [
        (("scsi0", "10G"), "shrinking disks is not supported\n"),
        (("scsi5", "+1G"), "disk 'scsi5' does not exist\n"),
        (("ide2", "+1G"), "you can't resize a cdrom\n"),
    ]:
        r = run(store, "qm", "resize", "120", *args)
        assert (r.code, r.err) == (0, err)
    r = run(store, "qm", "resize", "999", "scsi0", "+1G")
    assert (r.code, r.err) == (
        0,
        "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist\n",
    )
    r = run(store, "qm", "resize", "120", "scsi0", "lots")
    assert r.code == 255 and "size: value does not match the regex pattern" in r.err


def test_power_commands_wrong_states(store: Store, tmp_path: Path) -> None:
    installed_vm(store, tmp_path)
    assert run(store, "qm", "stop", "120") == run(store, "qm", "stop", "120")
    r = run(store, "qm", "stop", "120")
    assert (r.code, r.out, r.err) == (0, "", "")
    r = run(store, "qm", "shutdown", "120")
    assert (r.code, r.err) == (0, "VM 120 not running\n\n")
    r = run(store, "qm", "reboot", "120")
    assert (r.code, r.err) == (255, "VM 120 not running\n\nVM 120 not running\n")
    r = run(store, "qm", "start", "120")
    assert (r.code, r.out) == (0, "generating cloud-init ISO\n")
    assert run(store, "qm", "status", "120").out == "status: running\n"
    r = run(store, "qm", "start", "120")
    assert (r.code, r.err) == (255, "VM 120 already running\n")
    r = run(store, "qm", "destroy", "120")
    assert (r.code, r.err) == (255, "VM 120 is running - destroy failed\n")
    r = run(store, "qm", "migrate", "120", "pve2")
    assert (r.code, r.err) == (255, "can't migrate running VM without --online\n")
    assert run(store, "qm", "reboot", "120").code == 0
    assert run(store, "qm", "status", "120").out == "status: running\n"
    assert run(store, "qm", "shutdown", "120").code == 0
    assert run(store, "qm", "status", "120").out == "status: stopped\n"


def test_power_commands_on_missing_vm(store: Store) -> None:
    missing = "unable to find configuration file for VM 999 on node 'pve1'\n"
    assert run(store, "qm", "stop", "999").err == missing
    assert run(store, "qm", "stop", "999").code == 255
    # vm_is_paused warns (with a blank line) before the error itself.
    assert run(store, "qm", "reboot", "999").err == missing + "\n" + missing
    assert run(store, "qm", "shutdown", "999").err == missing + "\n" + missing
    r = run(store, "qm", "start", "999")
    assert (r.code, r.err) == (
        255,
        "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist\n",
    )
    r = run(store, "qm", "destroy", "999")
    assert r.code == 2


def test_destroy_removes_all_owned_volumes(store: Store, tmp_path: Path) -> None:
    installed_vm(store, tmp_path)
    r = run(store, "qm", "destroy", "120", "--purge", "--skiplock")
    assert r.code == 0
    assert r.out == (
        '  Logical volume "vm-120-cloudinit" successfully removed.\n'
        '  Logical volume "vm-120-disk-0" successfully removed.\n'
        "purging VM 120 from related configurations..\n"
    )
    assert run(store, "qm", "status", "120").code == 2
    assert run(store, "qm", "list").out == ""
    with store.locked() as txn:
        assert txn.volumes("pve1") == {"local-lvm": {}}


def test_migrate_moves_config_and_disks(store: Store, tmp_path: Path) -> None:
    installed_vm(store, tmp_path)
    r = run(store, "qm", "migrate", "120", "pve2", "--with-local-disks")
    assert r.code == 0
    lines = [line[20:] for line in r.out.splitlines()]
    assert lines[0] == "starting migration of VM 120 to node 'pve2' (127.0.0.2)"
    assert lines[1] == "found generated disk 'local-lvm:vm-120-cloudinit' (in current VM config)"
    assert lines[2] == "found local disk 'local-lvm:vm-120-disk-0' (attached)"
    assert "successfully imported 'local-lvm:vm-120-disk-0'" in lines
    assert lines[-1] == "migration finished successfully (duration 00:00:00)"
    assert run(store, "qm", "status", "120").code == 2
    assert run(store, "qm", "status", "120", node="pve2").out == "status: stopped\n"
    with store.locked() as txn:
        assert set(txn.volumes("pve2")["local-lvm"]) == {"vm-120-disk-0", "vm-120-cloudinit"}


def test_migrate_errors(store: Store, tmp_path: Path) -> None:
    installed_vm(store, tmp_path)
    r = run(store, "qm", "migrate", "120", "pve1")
    assert r.err == (
        "400 Parameter verification failed.\ntarget: target is local node.\n"
        "qm migrate <vmid> <target> [OPTIONS]\n"
    )
    r = run(store, "qm", "migrate", "120", "pve9")
    assert (r.code, r.err) == (255, "no such cluster node 'pve9'\n")


def test_list_rows(store: Store, tmp_path: Path) -> None:
    installed_vm(store, tmp_path)
    run(store, "qm", "create", "121")
    out = run(store, "qm", "list").out.splitlines()
    assert out[1] == "       120 web-120              stopped    2048               2.00 0         "
    assert out[2] == "       121 VM 121               stopped    512                0.00 0         "


def test_lock_create_blocks_other_commands(store: Store) -> None:
    run(store, "qm", "create", "120")
    with store.locked() as txn:
        rec = txn.vm_on("pve1", 120)
        assert rec is not None
        rec["config"]["lock"] = "migrate"
        txn.save_vm("pve1", rec)
    assert run(store, "qm", "start", "120").err == "VM is locked (migrate)\n"
    assert run(store, "qm", "set", "120", "--cores", "2").err == "VM is locked (migrate)\n"
    assert run(store, "qm", "status", "120").out == "status: stopped\n"
    assert run(store, "qm", "set", "120", "--cores", "2", "--skiplock").code == 0
    assert run(store, "qm", "destroy", "120").err == "VM is locked (migrate)\n"


def test_create_holds_lock_create_while_it_runs(store: Store) -> None:
    """A delayed create keeps `lock: create`; other commands see `VM is locked (create)`."""
    inside = threading.Event()
    release = threading.Event()

    def sleep(_seconds: float) -> None:
        inside.set()
        assert release.wait(10)

    out: list[str] = []
    ctx = Ctx(store, "pve1", out.append, out.append, lambda: "", sleep=sleep, scale=1.0)
    worker = threading.Thread(target=lambda: out.append(str(qm.run(ctx, ["create", "129"]))))
    worker.start()
    try:
        assert inside.wait(10)
        assert run(store, "qm", "set", "129", "--cores", "2").err == "VM is locked (create)\n"
        assert run(store, "qm", "start", "129").err == "VM is locked (create)\n"
        assert run(store, "qm", "status", "129").out == "status: stopped\n"
        assert "lock: create" in run(store, "qm", "status", "129", "--verbose").out
    finally:
        release.set()
        worker.join(10)
    assert out == ["0"]
    assert run(store, "qm", "set", "129", "--cores", "2").code == 0


def test_create_reads_sshkeys_file_too(store: Store) -> None:
    r = run(store, "qm", "create", "120", "--sshkeys", "/dev/stdin", stdin=ED25519_PUB + "\n")
    assert r.code == 0
    assert "sshkeys: ssh-ed25519%20AAAAC3" in run(store, "qm", "config", "120").out
    r = run(store, "qm", "create", "121", "--sshkeys", "/dev/stdin", stdin="garbage\n")
    assert (r.code, r.err) == (255, "SSH public key validation error\n")
    assert run(store, "qm", "status", "121").code == 2


def test_an_already_hashed_password_is_stored_as_given(store: Store) -> None:
    crypt = "$6$saltsalt$" + "h" * 86
    run(store, "qm", "create", "120")
    run(store, "qm", "set", "120", "--cipassword", crypt)
    stored = (store.root / "nodes/pve1/qemu-server/120.json").read_text()
    assert crypt in stored
    run(store, "qm", "set", "120", "--cipassword", "plain")
    stored = (store.root / "nodes/pve1/qemu-server/120.json").read_text()
    assert crypt not in stored and "plain" not in stored
