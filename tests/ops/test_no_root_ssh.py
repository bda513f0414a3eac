"""ops/deploy/pve/cairn_allow.py, the forced command that narrows cairn's root SSH key on the
nodes to the command lines cairn runs: every one of them passes (built by actors/vm/cli/argv.py
itself), what would turn the key back into a root shell or a root file reader does not, and
cairn's real SSH transport reaches a program through it with every argument intact."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType

import asyncssh
import pytest

from actors.vm.cli import argv as qm
from actors.vm.cli.transport import SshTransport
from actors.vm.pve import Hardware, NewDisk
from actors.vm.shacrypt import sha512_crypt
from tests.ports import free_port
from tests.ssh_servers import AnyKeyServer

HELPER = Path(__file__).resolve().parents[2] / "ops" / "deploy" / "pve" / "cairn_allow.py"


def load_helper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cairn_allow", HELPER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


allow = load_helper()
VMIDS = range(100, 200)
HASH = sha512_crypt("pass word $(id) `é`")


@pytest.fixture
def images(tmp_path: Path) -> Path:
    folder = tmp_path / "vm" / "images"
    folder.mkdir(parents=True)
    (folder / "debian-12-debian-12-generic-amd64.qcow2").write_bytes(b"QFI\xfb")
    return folder


def cloud_init() -> qm.CloudInit:
    return qm.CloudInit("debian", HASH, "/dev/stdin", "10.0.0.120", "10.0.0.1", 24)


def cairns_commands(images: Path) -> list[list[str]]:
    """Every command line the CLI driver sends to a node, as actors/vm/cli/argv.py builds it."""
    image = str(images / "debian-12-debian-12-generic-amd64.qcow2")
    return [
        qm.create(
            120,
            Hardware("web 'one'; $(id)", 2, "x86-64-v2-AES", 2048, 1024, "debian12",
                     "cairn: task 7f3e\nline two", "vmbr0", vlan=20, mtu=1400,
                     disks=(NewDisk("local-lvm", 32),)).options(),
        ),
        qm.create(121, Hardware("x", 1, "host", 512, None, "ubuntu24", "d", "vmbr1").options()),
        qm.import_disk(120, image, "local-lvm"),
        qm.configure(120, "local-lvm:vm-120-disk-0", "local-lvm", cloud_init()),
        qm.configure(120, "local:120/vm-120-disk-0.raw", "local", cloud_init()),
        qm.resize_disk(120, "16G"),
        qm.resize_disk(120, "+4G"),
        qm.set_cores(120, 4),
        qm.set_memory(120, 4096, 2048),
        qm.set_memory(120, 4096, None),
        qm.migrate(120, "node2"),
        qm.start(120), qm.stop(120), qm.shutdown(120), qm.reboot(120), qm.destroy(120),
        qm.cleanup_stop(120), qm.cleanup_destroy(120), qm.status(120), qm.config(120),
        qm.storage_status("node1", "local-lvm"), qm.image_storages(),
        qm.cluster_resources("vm"), qm.cluster_resources("node"), qm.node_status("node1"),
        qm.api_get("/nodes/node1/tasks", "--source", "active", "--vmid", "120"),
        qm.network("node1"),
        qm.set_options(120, {"tags": "debian;web", "description": "notes\nline"}),
        qm.set_options(120, {"net0": "virtio=BC:24:11:00:00:01,bridge=vmbr1,tag=20,mtu=1400"}),
    ]  # fmt: skip


def test_every_command_cairn_runs_passes(images: Path) -> None:
    for argv in cairns_commands(images):
        allow.check(argv, images=str(images), vmids=VMIDS)


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        ([], "no command"),
        (["bash", "-c", "id"], "'bash' is not qm, pvesm or pvesh"),
        (["/usr/sbin/qm", "start", "120"], "is not qm, pvesm or pvesh"),
        (["qm", "set", "120", "--hookscript", "local:snippets/x.sh"], "'--hookscript'"),
        (["qm", "set", "120", "--args", "-monitor stdio"], "'--args'"),
        (["qm", "set", "120", "--cicustom", "user=local:snippets/u"], "'--cicustom'"),
        (["qm", "set", "120", "--sshkeys", "/etc/shadow"], "--sshkeys '/etc/shadow'"),
        (["qm", "set", "120", "--scsi0", "local-lvm:0,import-from=/etc/shadow"], "--scsi0"),
        (["qm", "set", "120", "--scsi0", "local-lvm:vm-121-disk-0"], "--scsi0"),
        (["qm", "set", "120", "--cipassword", "plain text"], "--cipassword"),
        (["qm", "set", "120", "--cores", "2", "--cores", "3"], "--cores given twice"),
        (["qm", "set", "120", "--cores"], "--cores needs a value"),
        (["qm", "create", "120", "--net0", "virtio,bridge=vmbr0,firewall=0"], "--net0"),
        (["qm", "create", "120", "--scsi1", "local-lvm:vm-121-disk-0"], "--scsi1"),
        (["qm", "create", "120", "--scsi1", "local-lvm:0,import-from=/etc/shadow"], "--scsi1"),
        (["qm", "create", "120", "--nameserver", "1.1.1.1,x"], "--nameserver"),
        (["qm", "start", "99"], "'99' is not a VM id"),
        (["qm", "start", "250"], "VM 250 is outside cairn's ids 100-199"),
        (["qm", "start", "120", "--skiplock"], "qm start with these arguments"),
        (["qm", "guest", "exec", "120", "id"], "'exec' is not a VM id"),
        (["qm", "terminal", "120"], "qm terminal with these arguments"),
        (["qm", "disk", "import", "120", "/etc/shadow", "local-lvm"], "is not an image in"),
        (["qm", "disk", "import", "120", "IMAGES/../../x", "local-lvm"], "is not an image in"),
        (["qm", "disk", "resize", "120", "efidisk0", "1G"], "only scsi0"),
        (["pvesm", "free", "local-lvm:vm-120-disk-0"], "pvesm: only"),
        (["pvesh", "create", "/access/users", "--userid", "x@pam"], "pvesh: only the reads"),
        (["pvesh", "get", "/nodes/node1/execute"], "pvesh: only the reads"),
        (["pvesm", "status", "--storage", "local-lvm"], "pvesm: only"),
        (
            ["pvesh", "get", "/nodes/node1/storage/../../access/users", "--output-format", "json"],
            "pvesh: only the reads",
        ),
        (
            ["pvesh", "get", "/nodes/node1/storage/local-lvm/content", "--output-format", "json"],
            "pvesh: only the reads",
        ),
        (["pvesh", "set", "/cluster/options", "--keyboard", "de"], "pvesh: only the reads"),
        (
            [
                "pvesh",
                "get",
                "/nodes/node1/tasks",
                "--source",
                "active",
                "--vmid",
                "250",
                "--output-format",
                "json",
            ],
            "VM 250 is outside cairn's ids 100-199",
        ),
        (
            [
                "pvesh",
                "get",
                "/nodes/node1/tasks",
                "--source",
                "all",
                "--vmid",
                "120",
                "--output-format",
                "json",
            ],
            "pvesh: only the reads",
        ),
        (
            [
                "pvesh",
                "get",
                "/nodes/../tasks",
                "--source",
                "active",
                "--vmid",
                "120",
                "--output-format",
                "json",
            ],
            "pvesh: only the reads",
        ),
    ],
)
def test_what_would_give_root_away_is_refused(argv: list[str], why: str, images: Path) -> None:
    argv = [a.replace("IMAGES", str(images)) for a in argv]
    with pytest.raises(allow.Refused) as refused:
        allow.check(argv, images=str(images), vmids=VMIDS)
    assert why in str(refused.value)


def test_no_image_through_a_symlink(images: Path, tmp_path: Path) -> None:
    secret = tmp_path / "root-only"
    secret.write_text("key\n")
    secret.chmod(0o600)
    (images / "evil.qcow2").symlink_to(secret)
    with pytest.raises(allow.Refused, match="through a symlink"):
        allow.check(
            ["qm", "disk", "import", "120", str(images / "evil.qcow2"), "local-lvm"],
            images=str(images),
            vmids=VMIDS,
        )
    # Nor a cache folder that is itself a link elsewhere.
    linked = tmp_path / "linked"
    linked.symlink_to(images)
    with pytest.raises(allow.Refused, match="through a symlink"):
        allow.check(
            [
                "qm",
                "disk",
                "import",
                "120",
                str(linked / "debian-12-debian-12-generic-amd64.qcow2"),
                "local-lvm",
            ],
            images=str(linked),
            vmids=VMIDS,
        )


QEMU_IMG = shutil.which("qemu-img")
needs_qemu_img = pytest.mark.skipif(
    QEMU_IMG is None, reason="qemu-img (Debian qemu-utils, in ops/apt-packages-dev.txt) is missing"
)


def make_image(path: Path, *options: str) -> bytes:
    assert QEMU_IMG is not None
    subprocess.run([QEMU_IMG, "create", "-q", *options, str(path), "1M"], check=True)
    return path.read_bytes()


@pytest.fixture
def node_bin(tmp_path: Path) -> Path:
    """A stand-in for /usr/sbin/qm that says which file it was given and prints that file; and a
    private folder for the helper's copies."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (tmp_path / "private").mkdir()
    fake = folder / "qm"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$4"\ncat "$4"\n')
    fake.chmod(0o755)
    return folder


def run_helper(
    command: list[str], images: Path, node_bin: Path
) -> subprocess.CompletedProcess[bytes]:
    """The helper as sshd runs it, asked for `command` (qemu-img from the system)."""
    assert QEMU_IMG is not None
    return subprocess.run(
        [
            sys.executable,
            str(HELPER),
            "--images",
            str(images),
            "--vmids",
            "100-199",
            "--bin",
            f"{node_bin}:{os.path.dirname(QEMU_IMG)}",
            "--tmp",
            str(node_bin.parent / "private"),
        ],
        env={**os.environ, "SSH_ORIGINAL_COMMAND": shlex.join(command)},
        capture_output=True,
        check=False,
        timeout=120,
    )


@needs_qemu_img
def test_import_reads_the_file_checked_even_if_swapped_before_qm_opens_it(
    images: Path, node_bin: Path, tmp_path: Path
) -> None:
    image = images / "debian-12-generic-amd64.qcow2"
    content = make_image(image, "-f", "qcow2")
    secret = tmp_path / "root-only"
    secret.write_text("root's secret\n")
    secret.chmod(0o600)
    # qm opens its file a moment after the helper's check: a process running as cairn swaps the
    # image for a link to a root-only file in between (here, qm itself does it first).
    (node_bin / "qm").write_text(
        f'#!/bin/sh\nrm "{image}" && ln -s "{secret}" "{image}"\n'
        + (node_bin / "qm").read_text().removeprefix("#!/bin/sh\n")
    )
    done = run_helper(qm.import_disk(120, str(image), "local-lvm"), images, node_bin)
    assert done.returncode == 0, done.stderr
    given, _, read = done.stdout.partition(b"\n")
    assert read == content
    assert b"secret" not in done.stdout
    # qm was handed the helper's private copy, which is gone once qm is done.
    assert not given.startswith(str(images).encode())
    assert given.endswith(b"/debian-12-generic-amd64.qcow2")
    assert list((tmp_path / "private").iterdir()) == []


@needs_qemu_img
@pytest.mark.parametrize("kind", ["qcow2", "raw", "vmdk"])
def test_import_of_a_self_contained_image_reaches_qm(
    kind: str, images: Path, node_bin: Path
) -> None:
    image = images / f"ubuntu-24.04-server-cloudimg-amd64.{kind}"
    content = make_image(image, "-f", kind)
    done = run_helper(qm.import_disk(120, str(image), "local-lvm"), images, node_bin)
    assert done.returncode == 0, done.stderr
    assert done.stdout.partition(b"\n")[2] == content


@needs_qemu_img
@pytest.mark.parametrize("kind", ["backing", "data-file", "vmdk-extent", "not-an-image"])
def test_import_of_an_image_naming_another_file_is_refused(
    kind: str, images: Path, node_bin: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "root-only"
    secret.write_bytes(b"root's secret\n".ljust(1 << 20, b"\0"))
    image = images / "debian-12-generic-amd64.qcow2"
    if kind == "backing":
        make_image(image, "-f", "qcow2", "-b", str(secret), "-F", "raw")
        why = f"the image names a backing file ('{secret}')"
    elif kind == "data-file":
        make_image(image, "-f", "qcow2", "-o", f"data_file={secret},data_file_raw=on")
        why = f"the image names an external data file ('{secret}')"
    elif kind == "vmdk-extent":
        # A descriptor VMDK whose one extent is a root-only file elsewhere.
        image.write_text(
            "# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=ffffffff\n"
            'createType="monolithicFlat"\n'
            f'RW 2048 FLAT "{secret}" 0\n'
            'ddb.virtualHWVersion = "4"\n'
        )
        why = f"the image names an extent outside itself ('{secret}')"
    else:
        image.write_bytes(b"QFI\xfb truncated")
        why = "qemu-img cannot read the image: "
    done = run_helper(qm.import_disk(120, str(image), "local-lvm"), images, node_bin)
    assert done.returncode == 126
    assert done.stdout == b""  # qm never ran
    assert done.stderr.decode().startswith(f"cairn_allow: refused: {why}")
    assert list((tmp_path / "private").iterdir()) == []


def test_an_image_is_opened_without_following_any_link(images: Path, tmp_path: Path) -> None:
    # The path is checked first; a folder of it turned into a link before the open is caught
    # by the open itself.
    secret = tmp_path / "elsewhere" / "debian.qcow2"
    secret.parent.mkdir()
    secret.write_bytes(b"QFI\xfb")
    linked = tmp_path / "vm" / "linked"
    linked.symlink_to(secret.parent)
    for path in (linked / "debian.qcow2", images / "evil.qcow2"):
        if path.parent == images:
            path.symlink_to(secret)
        with pytest.raises(allow.Refused, match="is reached through a symlink"):
            allow.open_image(str(path))
    os.link(secret, images / "hard.qcow2")
    with pytest.raises(allow.Refused, match="has other hard links"):
        allow.open_image(str(images / "hard.qcow2"))
    fifo = images / "fifo.qcow2"
    os.mkfifo(fifo)
    with pytest.raises(allow.Refused, match="is not a file"):
        allow.open_image(str(fifo))
    descriptor = allow.open_image(str(images / "debian-12-debian-12-generic-amd64.qcow2"))
    try:
        assert os.read(descriptor, 4) == b"QFI\xfb"
    finally:
        os.close(descriptor)


@asynccontextmanager
async def node(bin_dir: Path, images: Path) -> AsyncIterator[tuple[int, asyncssh.SSHKey]]:
    """A node's sshd with cairn's key bound to the forced command: whatever the client asks
    for arrives in SSH_ORIGINAL_COMMAND, and the helper runs instead (as sshd does it)."""

    async def handle(process: asyncssh.SSHServerProcess[bytes]) -> None:
        env = {**os.environ, "SSH_ORIGINAL_COMMAND": process.command or ""}
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HELPER),
            "--images",
            str(images),
            "--bin",
            str(bin_dir),
            "--vmids",
            "100-199",
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        given = await process.stdin.read()
        out, err = await child.communicate(given)
        process.stdout.write(out)
        process.stderr.write(err)
        process.exit(child.returncode or 0)

    key = asyncssh.generate_private_key("ssh-ed25519")
    port = free_port()
    server = await asyncssh.listen(
        "127.0.0.1",
        port,
        server_factory=AnyKeyServer,
        server_host_keys=[key],
        process_factory=handle,
        encoding=None,
    )
    try:
        yield port, key
    finally:
        server.close()
        await server.wait_closed()


async def test_cairns_transport_through_the_forced_command(tmp_path: Path, images: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # A stand-in for /usr/sbin/qm: its argv, one per line (NUL-separated), then its stdin.
    fake = bin_dir / "qm"
    fake.write_text('#!/bin/sh\nprintf "%s\\0" "$@"\necho ---\ncat\n')
    fake.chmod(0o755)
    client = asyncssh.generate_private_key("ssh-ed25519")
    (tmp_path / "id").write_bytes(client.export_private_key())
    async with node(bin_dir, images) as (port, host_key):
        known = tmp_path / "known_hosts"
        known.write_bytes(b"[127.0.0.1]:%d " % port + host_key.export_public_key())
        transport = SshTransport(
            "127.0.0.1",
            port=port,
            username="root",
            client_key=str(tmp_path / "id"),
            known_hosts=str(known),
        )
        try:
            create = cairns_commands(images)[0]
            done = await transport.run(create)
            assert done.rc == 0, done.stderr
            sent, _, _ = done.stdout.partition("---\n")
            assert sent.split("\0")[:-1] == create[1:]

            configure = qm.configure(120, "local-lvm:vm-120-disk-0", "local-lvm", cloud_init())
            done = await transport.run(configure, stdin=b"ssh-ed25519 AAAA user\n")
            assert done.rc == 0, done.stderr
            assert done.stdout.endswith("---\nssh-ed25519 AAAA user\n")

            refused = await transport.run(["qm", "set", "120", "--hookscript", "local:x"])
            assert refused.rc == 126
            assert refused.stderr == (
                "cairn_allow: refused: option '--hookscript' is not one cairn uses\n"
            )
            # A shell's syntax is only text here: no shell runs it.
            smuggled = await transport.run(["qm", "start", "120; id"])
            assert smuggled.rc == 126 and "is not a VM id" in smuggled.stderr
        finally:
            await transport.close()
