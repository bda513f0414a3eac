"""Golden command lines: exactly what runs on a Proxmox node."""

from __future__ import annotations

from actors.vm.cli import argv as qm
from actors.vm.pve import Hardware, NewDisk

CI = qm.CloudInit(
    user="deploy",
    password_hash="$6$salt$hash",
    sshkeys_file="/dev/stdin",
    ip="192.168.0.120",
    gateway="192.168.0.1",
    prefix_len=24,
)


def test_create_has_the_cloud_image_hardware_profile() -> None:
    mark = "created by cairn, install task 0f1e"
    argv = qm.create(120, Hardware("web", 2, "x86-64-v2-AES", 2048, None, "debian", mark,
                                   "vmbr0").options())  # fmt: skip
    assert argv == [
        "qm", "create", "120", "--name", "web", "--cores", "2", "--cpu", "x86-64-v2-AES",
        "--memory", "2048", "--scsihw", "virtio-scsi-pci", "--ostype", "l26", "--agent", "1",
        "--net0", "virtio,bridge=vmbr0", "--serial0", "socket", "--vga", "serial0",
        "--tags", "debian",
        # cairn's mark: what clean-up, destroy and migrate look for before they touch a VM.
        "--description", "created by cairn, install task 0f1e",
    ]  # fmt: skip


def test_configure_attaches_disk_cloud_init_and_boot_order_at_once() -> None:
    assert qm.configure(120, "local-lvm:vm-120-disk-0", "local-lvm", CI) == [
        "qm", "set", "120",
        "--scsi0", "local-lvm:vm-120-disk-0", "--ide2", "local-lvm:cloudinit",
        # The boot order names the disk (the original left it PXE-booting on some setups).
        "--boot", "order=scsi0",
        # The requested user becomes the cloud-init user (the original never set --ciuser).
        "--ciuser", "deploy", "--cipassword", "$6$salt$hash", "--sshkeys", "/dev/stdin",
        "--ciupgrade", "0", "--ipconfig0", "ip=192.168.0.120/24,gw=192.168.0.1",
    ]  # fmt: skip


def test_create_passes_the_balloon_minimum_when_given() -> None:
    mark = "created by cairn, install task 0f1e"
    argv = qm.create(120, Hardware("120", 1, "kvm64", 4096, 1024, "ubuntu", mark,
                                   "vmbr0").options())  # fmt: skip
    assert argv[argv.index("--balloon") + 1] == "1024"
    assert argv.index("--balloon") == argv.index("--memory") + 2


def test_create_carries_the_callers_network_dns_tags_and_extra_disks() -> None:
    hardware = Hardware(
        "db", 2, "kvm64", 2048, None, "debian", "notes\ncreated by cairn, install task 0f1e",
        "vmbr1", vlan=20, mtu=9000, tags=("db", "debian", "prod"), nameserver="10.0.0.53",
        searchdomain="example.org", disks=(NewDisk("local-lvm", 32), NewDisk("fast", 8)),
    )  # fmt: skip
    argv = qm.create(121, hardware.options())
    assert argv[argv.index("--net0") + 1] == "virtio,bridge=vmbr1,tag=20,mtu=9000"
    assert argv[argv.index("--tags") + 1] == "debian;db;prod"
    assert argv[-8:] == [
        "--nameserver", "10.0.0.53", "--searchdomain", "example.org",
        "--scsi1", "local-lvm:32", "--scsi2", "fast:8",
    ]  # fmt: skip


def test_disk_is_attached_by_the_volid_import_reported_on_dir_storage_too() -> None:
    argv = qm.configure(120, "local:120/vm-120-disk-0.raw", "local", CI)
    assert argv[3:7] == ["--scsi0", "local:120/vm-120-disk-0.raw", "--ide2", "local:cloudinit"]


def test_lifecycle_command_lines() -> None:
    assert qm.import_disk(5, "/data/img.qcow2", "local-lvm") == [
        "qm", "disk", "import", "5", "/data/img.qcow2", "local-lvm",
    ]  # fmt: skip
    assert qm.resize_disk(5, "16G") == ["qm", "disk", "resize", "5", "scsi0", "16G"]
    assert qm.resize_disk(5, "+4G")[-1] == "+4G"
    assert qm.set_cores(5, 4) == ["qm", "set", "5", "--cores", "4"]
    assert qm.set_memory(5, 4096, None) == ["qm", "set", "5", "--memory", "4096"]
    assert qm.set_memory(5, 4096, 2048)[-2:] == ["--balloon", "2048"]
    assert qm.migrate(5, "pve2") == ["qm", "migrate", "5", "pve2", "--with-local-disks"]
    assert qm.start(5) == ["qm", "start", "5"]
    assert qm.stop(5) == ["qm", "stop", "5"]
    assert qm.shutdown(5) == ["qm", "shutdown", "5"]
    assert qm.reboot(5) == ["qm", "reboot", "5"]
    assert qm.destroy(5) == ["qm", "destroy", "5", "--purge"]
    assert qm.cleanup_stop(5) == ["qm", "stop", "5", "--skiplock", "--timeout", "1"]
    assert qm.cleanup_destroy(5) == [
        "qm", "destroy", "5", "--purge", "--skiplock", "--destroy-unreferenced-disks", "1",
    ]  # fmt: skip
    assert qm.status(5) == ["qm", "status", "5"]
    # The API's object, which carries Proxmox's `shared` flag (`pvesm status` prints none).
    status = qm.api_get("/nodes/pve2/storage/san/status")
    assert status == ["pvesh", "get", "/nodes/pve2/storage/san/status", "--output-format", "json"]
    assert qm.storage_status("pve2", "san") == status
    # Only storages that may hold VM disks (a stock `local` may not).
    assert qm.image_storages() == ["pvesm", "status", "--content", "images"]
    assert qm.cluster_resources("vm") == [
        "pvesh", "get", "/cluster/resources", "--type", "vm", "--output-format", "json",
    ]  # fmt: skip
    assert qm.node_status("pve2") == [
        "pvesh", "get", "/nodes/pve2/status", "--output-format", "json",
    ]  # fmt: skip


def test_clone_and_template_command_lines() -> None:
    from actors.vm.pve import Clone

    spec = Clone(name="web-2", target="pve2", full=True, description="created by cairn, x")
    head = ["qm", "clone", "120", "121", "--name", "web-2", "--target", "pve2"]
    assert qm.clone(120, 121, spec.params()) == [
        *head,
        *("--full", "1", "--description", "created by cairn, x"),
    ]
    assert qm.clone(120, 122, Clone().params()) == ["qm", "clone", "120", "122"]  # linked
    assert qm.template(120) == ["qm", "template", "120"]


def test_snapshot_command_lines() -> None:
    head = ["qm", "snapshot", "120", "pre"]
    assert qm.snapshot(120, "pre", "before the upgrade", True) == [
        *head,
        *("--description", "before the upgrade", "--vmstate", "1"),
    ]
    assert qm.snapshot(120, "pre", "", False) == head
    assert qm.rollback(120, "pre", False) == ["qm", "rollback", "120", "pre"]
    assert qm.rollback(120, "pre", True) == ["qm", "rollback", "120", "pre", "--start", "1"]
    assert qm.delsnapshot(120, "pre") == ["qm", "delsnapshot", "120", "pre"]
    listing = "pvesh get /nodes/pve2/qemu/120/snapshot --output-format json"
    assert qm.snapshot_list("pve2", 120) == listing.split()
