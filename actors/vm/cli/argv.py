"""The CLI adapter's Proxmox command lines, as argv lists (never shell strings).

Each function returns exactly what runs on the node, so the golden tests in tests/vm pin the
wire format. Differences from the original service, on purpose (each fixes a guest that
would not work):
- the cloud-init user is set (`--ciuser`), so the requested user exists in the guest;
- the disk is attached by the volid that `qm disk import` reported, which is right on dir/nfs
  storage (`local:120/vm-120-disk-0.raw`) as well as lvm-thin/zfs (`local-lvm:vm-120-disk-0`);
- the boot order names the disk (`--boot order=scsi0`), so the VM does not PXE-boot;
- the password is passed pre-hashed, so no plain secret is on a command line.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

Argv = list[str]


@attrs.frozen
class CloudInit:
    user: str
    password_hash: str  # SHA-512 crypt; qemu-server stores a hash as it is
    sshkeys_file: str  # read by qm on the node; `/dev/stdin` with the keys on stdin
    ip: str
    gateway: str
    prefix_len: int  # VM_NETMASK: the mask of the VMs' network, as a prefix length

    def options(self) -> Argv:
        return [
            "--ciuser", self.user,
            "--cipassword", self.password_hash,
            "--sshkeys", self.sshkeys_file,
            "--ciupgrade", "0",
            "--ipconfig0", f"ip={self.ip}/{self.prefix_len},gw={self.gateway}",
        ]  # fmt: skip


def create(vmid: int, options: Mapping[str, str]) -> Argv:
    """The VM with its hardware profile and cairn's mark (`pve.Hardware.options`, in its
    order; the description is the line every destructive step looks for); the boot disk comes
    after the import."""
    argv = ["qm", "create", str(vmid)]
    for key, value in options.items():
        argv += [f"--{key}", value]
    return argv


def network(node: str) -> Argv:
    """The node's bridges, as JSON."""
    return api_get(f"/nodes/{node}/network", "--type", "any_bridge")


def clone(vmid: int, newid: int, options: dict[str, str]) -> Argv:
    argv = ["qm", "clone", str(vmid), str(newid)]
    for key, value in options.items():
        argv += [f"--{key}", value]
    return argv


def template(vmid: int) -> Argv:
    return ["qm", "template", str(vmid)]


def snapshot(vmid: int, name: str, description: str, vmstate: bool) -> Argv:
    argv = ["qm", "snapshot", str(vmid), name]
    if description:
        argv += ["--description", description]
    if vmstate:
        argv += ["--vmstate", "1"]
    return argv


def rollback(vmid: int, name: str, start: bool) -> Argv:
    return ["qm", "rollback", str(vmid), name, *(["--start", "1"] if start else [])]


def delsnapshot(vmid: int, name: str) -> Argv:
    return ["qm", "delsnapshot", str(vmid), name]


def snapshot_list(node: str, vmid: int) -> Argv:
    return api_get(f"/nodes/{node}/qemu/{vmid}/snapshot")


def import_disk(vmid: int, image_path: str, storage: str) -> Argv:
    return ["qm", "disk", "import", str(vmid), image_path, storage]


def configure(vmid: int, disk_volid: str, storage: str, cloud_init: CloudInit) -> Argv:
    """One `qm set` after the import: the disk, the cloud-init drive and its settings, and a
    boot order naming the disk. qemu-server applies drives before it checks the order, and
    accepts devices given in the same call."""
    options = {"scsi0": disk_volid, "ide2": f"{storage}:cloudinit", "boot": "order=scsi0"}
    ci = cloud_init.options()
    for key, value in zip(ci[::2], ci[1::2], strict=True):
        options[key[2:]] = value
    sshkeys = options.pop("sshkeys")
    return set_options(vmid, options, sshkeys)


def set_options(vmid: int, options: dict[str, str], sshkeys_file: str | None = None) -> Argv:
    """`qm set` with `options` in their order; `--sshkeys FILE` (qm reads the file) right after
    the password, as qm's own usage lists them."""
    argv = ["qm", "set", str(vmid)]
    for key, value in options.items():
        argv += [f"--{key}", value]
        if key == "cipassword" and sshkeys_file:
            argv += ["--sshkeys", sshkeys_file]
    if sshkeys_file and "cipassword" not in options:
        argv += ["--sshkeys", sshkeys_file]
    return argv


def resize_disk(vmid: int, size: str) -> Argv:
    """`size` is absolute (`16G`) or relative (`+4G`), as `qm disk resize` takes it."""
    return ["qm", "disk", "resize", str(vmid), "scsi0", size]


def set_cores(vmid: int, cores: int) -> Argv:
    return ["qm", "set", str(vmid), "--cores", str(cores)]


def set_memory(vmid: int, memory: int, balloon: int | None) -> Argv:
    argv = ["qm", "set", str(vmid), "--memory", str(memory)]
    if balloon is not None:
        argv += ["--balloon", str(balloon)]
    return argv


def migrate(vmid: int, target: str) -> Argv:
    # Offline migration always copies local disks; the flag keeps it working if a VM is ever
    # migrated online and says what we mean.
    return ["qm", "migrate", str(vmid), target, "--with-local-disks"]


def start(vmid: int) -> Argv:
    return ["qm", "start", str(vmid)]


def stop(vmid: int) -> Argv:
    return ["qm", "stop", str(vmid)]


def shutdown(vmid: int) -> Argv:
    return ["qm", "shutdown", str(vmid)]


def reboot(vmid: int) -> Argv:
    return ["qm", "reboot", str(vmid)]


def destroy(vmid: int) -> Argv:
    return ["qm", "destroy", str(vmid), "--purge"]


def cleanup_stop(vmid: int) -> Argv:
    return ["qm", "stop", str(vmid), "--skiplock", "--timeout", "1"]


def cleanup_destroy(vmid: int) -> Argv:
    # An import that died after allocating leaves a volume no config references; only this
    # flag removes it.
    return [
        "qm", "destroy", str(vmid), "--purge", "--skiplock",
        "--destroy-unreferenced-disks", "1",
    ]  # fmt: skip


def status(vmid: int) -> Argv:
    return ["qm", "status", str(vmid)]


def config(vmid: int) -> Argv:
    return ["qm", "config", str(vmid)]


def storage_status(node: str, storage: str) -> Argv:
    """One storage's status as the API's object (`pvesm status` prints no `shared` flag)."""
    return api_get(f"/nodes/{node}/storage/{storage}/status")


def storage_by_pvesm(storage: str) -> Argv:
    """One storage's row of `pvesm status` (no `shared` flag): what a node's older command
    helper allows instead of `storage_status`."""
    return ["pvesm", "status", "--storage", storage]


def image_storages() -> Argv:
    """The storages that may hold VM disks (content type `images`), with their state."""
    return ["pvesm", "status", "--content", "images"]


def api_get(path: str, *options: str) -> Argv:
    """`pvesh get` of an API path, printed as JSON."""
    return ["pvesh", "get", path, *options, "--output-format", "json"]


def download_url(node: str, storage: str, params: dict[str, str]) -> Argv:
    argv = ["pvesh", "create", f"/nodes/{node}/storage/{storage}/download-url"]
    for key, value in params.items():
        argv += [f"--{key}", value]
    return argv


def cluster_resources(kind: str) -> Argv:
    return ["pvesh", "get", "/cluster/resources", "--type", kind, "--output-format", "json"]


def node_status(node: str) -> Argv:
    return ["pvesh", "get", f"/nodes/{node}/status", "--output-format", "json"]
