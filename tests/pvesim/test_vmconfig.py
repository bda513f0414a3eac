"""Config rules: boot order, volume names, cloud-init user and address (pure)."""

from __future__ import annotations

import pvesim.vmconfig as vc


def test_default_boot_order_disk_cdrom_net() -> None:
    assert vc.default_boot_order({"net0": "virtio=X,bridge=vmbr0"}) == "order=net0"
    conf = {"net0": "virtio", "ide2": "local-lvm:vm-1-cloudinit,media=cdrom",
            "scsi0": "local-lvm:vm-1-disk-0,size=2G", "scsi1": "local-lvm:vm-1-disk-1"}  # fmt: skip
    assert vc.default_boot_order(conf) == "order=scsi0;ide2;net0"


def test_first_boot_disk_new_and_legacy_syntax() -> None:
    disk = "local-lvm:vm-120-disk-0,size=32G"
    assert vc.first_boot_disk({"boot": "order=net0;ide2", "net0": "v", "scsi0": disk}) is None
    assert vc.first_boot_disk({"boot": "order=net0;scsi0", "net0": "v", "scsi0": disk}) == "scsi0"
    assert vc.first_boot_disk({"boot": "c", "bootdisk": "scsi0", "scsi0": disk}) == "scsi0"
    assert vc.boot_disk_size({"boot": "c", "bootdisk": "scsi0", "scsi0": disk}) == 32 * 1024**3
    assert vc.boot_disk_size({"boot": "order=net0", "net0": "v", "scsi0": disk}) == 0


def test_volume_names_per_storage_type() -> None:
    assert vc.new_volname("lvmthin", 120, set(), None) == "vm-120-disk-0"
    assert vc.new_volname("lvmthin", 120, {"vm-120-disk-0"}, None) == "vm-120-disk-1"
    assert vc.new_volname("dir", 120, set(), None) == "120/vm-120-disk-0.raw"
    assert vc.new_volname("dir", 120, set(), "qcow2") == "120/vm-120-disk-0.qcow2"
    assert vc.cloudinit_volname("dir", 120) == "120/vm-120-cloudinit.qcow2"
    assert vc.cloudinit_volname("lvmthin", 120) == "vm-120-cloudinit"
    assert vc.parse_volname("dir", "vm-120-disk-0") == (
        "unable to parse directory volume name 'vm-120-disk-0'"
    )
    assert vc.parse_volname("dir", "120/vm-120-disk-0.raw") == (120, "120/vm-120-disk-0.raw")
    assert vc.parse_volname("lvmthin", "vm-120-disk-0") == (120, "vm-120-disk-0")


def test_cloud_user_prefers_ciuser_then_tags_then_image() -> None:
    assert vc.cloud_user({"ciuser": "alice", "tags": "debian"}, None) == "alice"
    assert vc.cloud_user({"tags": "rockylinux"}, None) == "rocky"
    assert vc.cloud_user({}, "ubuntu-24.04-server-cloudimg-amd64.img") == "ubuntu"
    assert vc.cloud_user({}, "mystery.qcow2") is None


def test_static_ip_only_for_a_static_cidr() -> None:
    assert vc.static_ip({"ipconfig0": "ip=127.0.0.120/24,gw=127.0.0.1"}) == "127.0.0.120"
    assert vc.static_ip({"ipconfig0": "ip=dhcp"}) is None
    assert vc.static_ip({}) is None


def test_sshkeys_decoded_from_config() -> None:
    conf = {"sshkeys": "ssh-ed25519%20AAAA%20a%40b%0Assh-rsa%20BBBB%0A"}
    assert vc.decode_sshkeys(conf) == ["ssh-ed25519 AAAA a@b", "ssh-rsa BBBB"]
