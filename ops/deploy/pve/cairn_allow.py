#!/usr/bin/python3
"""The one thing cairn's SSH key may do as root on a Proxmox VE node: the `qm`, `pvesm` and
`pvesh` command lines cairn itself runs (actors/vm/cli/argv.py), with their fixed options,
nothing else.

sshd runs it as the key's forced command (docs/deploy.md, "Over SSH"), in the node's
`/etc/pve/priv/authorized_keys`, which Proxmox shares across the cluster:

    restrict,command="/usr/bin/python3 /etc/pve/cairn/cairn_allow.py --vmids 100-199" \
        ssh-ed25519 AAAA... cairn      (one line)

It reads the command cairn asked for from SSH_ORIGINAL_COMMAND (cairn sends a shell-quoted
argv), splits it as a POSIX shell would quote it (no shell ever runs it), checks it, and execs
the program with exactly that argv; a refusal exits 126 naming the rule. Python 3 standard
library only, so it runs from /etc/pve on every node (`apt-get install python3-minimal` where
missing).

What it closes, besides any program but these three: options that run code or read files as
root (`qm set --hookscript`, `--args`, `--sshkeys <file>`, a disk `import-from=<path>`,
`--cicustom`), another VM's disks, `qm disk import` from outside cairn's image cache (and
through a symlink), VM ids outside cairn's range (`--vmids`, the env's
ASSIGN_IP_START-ASSIGN_IP_END), and every `pvesh` call but the reads cairn makes.

`qm disk import` never reads cairn's path itself: the cache folder is cairn's to write, so a
file checked there could be swapped for a symlink before qm opens it, and a qcow2 or VMDK image
can name other files (a backing file, an external data file, extents) that qemu would read as
root. So the helper opens the image once, component by component without following a symlink,
copies what it opened into a folder of its own (`--tmp`, root-only), checks that copy with
`qemu-img info` (qcow2, raw or VMDK naming no file but itself) and imports the copy, which it
removes after.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from types import FrameType

# The folder cairn's CLI driver downloads OS images to (CAIRN_DATA of the systemd unit).
DEFAULT_IMAGES = "/var/lib/cairn/vm/images"
DEFAULT_BIN = "/usr/sbin:/usr/bin"
# Where the private copy of an image being imported is made (a root-only folder inside it).
DEFAULT_TMP = "/var/tmp"
REFUSED = 126
# Formats qm may import; qcow2 is what cairn downloads.
FORMATS = ("qcow2", "raw", "vmdk")
QEMU_IMG_TIMEOUT = 60

ANY = re.compile(r"(?s).*")
INT = re.compile(r"[0-9]{1,9}")
WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}")
STORAGE = r"[A-Za-z][A-Za-z0-9_.-]{0,63}"
SIZE = re.compile(r"\+?[0-9]{1,6}[KMGT]?")

Rule = Callable[[str], bool]


def matches(pattern: re.Pattern[str]) -> Rule:
    return lambda value: pattern.fullmatch(value) is not None


def one_of(*values: str) -> Rule:
    return lambda value: value in values


class Refused(Exception):
    """The command breaks a rule; the message names it."""


def options(given: Sequence[str], allowed: dict[str, Rule], *, flags: Sequence[str] = ()) -> None:
    """``--name value`` pairs (and bare ``flags``), each known, each at most once, every value
    passing its rule."""
    seen: set[str] = set()
    i = 0
    while i < len(given):
        name = given[i]
        if name in seen:
            raise Refused(f"{name} given twice")
        seen.add(name)
        if name in flags:
            i += 1
            continue
        rule = allowed.get(name)
        if rule is None:
            raise Refused(f"option {name!r} is not one cairn uses")
        if i + 1 >= len(given):
            raise Refused(f"{name} needs a value")
        value = given[i + 1]
        if not rule(value):
            raise Refused(f"{name} {value!r} is not a value cairn sends")
        i += 2


def check(argv: Sequence[str], *, images: str, vmids: range | None) -> None:
    """Raises Refused unless `argv` is a command line cairn's CLI driver runs."""
    if not argv:
        raise Refused("no command")
    program, rest = argv[0], list(argv[1:])
    if program == "qm":
        _qm(rest, images=images, vmids=vmids)
    elif program == "pvesm":
        if rest != ["status", "--content", "images"]:
            raise Refused("pvesm: only `status --content images`")
    elif program == "pvesh":
        _pvesh(rest, vmids=vmids)
    else:
        raise Refused(f"{program!r} is not qm, pvesm or pvesh")


def _vmid(value: str, vmids: range | None) -> int:
    if INT.fullmatch(value) is None or int(value) < 100:
        raise Refused(f"{value!r} is not a VM id")
    if vmids is not None and int(value) not in vmids:
        raise Refused(f"VM {value} is outside cairn's ids {vmids.start}-{vmids.stop - 1}")
    return int(value)


def _qm(rest: list[str], *, images: str, vmids: range | None) -> None:
    if rest[:2] == ["disk", "import"] and len(rest) == 5:
        _vmid(rest[2], vmids)
        _image(rest[3], images)
        if re.fullmatch(STORAGE, rest[4]) is None:
            raise Refused(f"{rest[4]!r} is not a storage name")
        return
    if rest[:2] == ["disk", "resize"] and len(rest) == 5:
        _vmid(rest[2], vmids)
        if rest[3] != "scsi0" or SIZE.fullmatch(rest[4]) is None:
            raise Refused("qm disk resize: only scsi0, to a size like 16G or +4G")
        return
    if len(rest) < 2:
        raise Refused("qm: a subcommand and a VM id")
    sub, vmid = rest[0], _vmid(rest[1], vmids)
    more = rest[2:]
    if sub in ("start", "shutdown", "reboot", "status", "config") and not more:
        return
    if sub == "stop":
        return options(more, {"--timeout": matches(INT)}, flags=["--skiplock"])
    if sub == "destroy":
        return options(
            more, {"--destroy-unreferenced-disks": one_of("1")}, flags=["--purge", "--skiplock"]
        )
    if sub == "migrate" and len(more) == 2 and more[1] == "--with-local-disks":
        if NODE.fullmatch(more[0]) is None:
            raise Refused(f"{more[0]!r} is not a node name")
        return
    if sub == "create":
        return options(more, CREATE)
    if sub == "set":
        disk = re.compile(rf"{STORAGE}:(?:{vmid}/)?vm-{vmid}-disk-[0-9]{{1,3}}(?:\.(?:raw|qcow2))?")
        return options(more, {**SET, "--scsi0": matches(disk)})
    raise Refused(f"qm {sub} with these arguments is not a command cairn runs")


# The one NIC: virtio on a bridge, with a VLAN tag and an MTU if the caller asked.
NET0 = re.compile(r"virtio(?:=[0-9A-Fa-f:]{17})?,bridge=[A-Za-z0-9_.-]{1,15}(?:,tag=[0-9]{1,4})?"
                  r"(?:,mtu=[0-9]{1,5})?")  # fmt: skip
CREATE: dict[str, Rule] = {
    # Free text is safe as one argv element: qm receives it as a value, no shell runs.
    "--name": matches(ANY),
    "--description": matches(ANY),
    "--tags": matches(re.compile(r"[A-Za-z0-9_.;-]{1,128}")),
    "--cores": matches(INT),
    "--memory": matches(INT),
    "--balloon": matches(INT),
    "--cpu": matches(WORD),
    "--scsihw": one_of("virtio-scsi-pci"),
    "--ostype": one_of("l26"),
    "--agent": one_of("1"),
    "--net0": matches(NET0),
    "--serial0": one_of("socket"),
    "--vga": one_of("serial0"),
    "--nameserver": matches(re.compile(r"[0-9A-Fa-f.:]{2,45}(?: [0-9A-Fa-f.:]{2,45}){0,2}")),
    "--searchdomain": matches(re.compile(r"[A-Za-z0-9.-]{1,253}(?: [A-Za-z0-9.-]{1,253}){0,5}")),
    # Extra disks: a new, empty volume of N GiB (never an existing volume or a path).
    **{f"--scsi{i}": matches(re.compile(rf"{STORAGE}:[0-9]{{1,6}}")) for i in range(1, 9)},
}
SET: dict[str, Rule] = {
    "--tags": CREATE["--tags"],
    "--description": matches(ANY),
    "--net0": matches(NET0),
    "--cores": matches(INT),
    "--memory": matches(INT),
    "--balloon": matches(INT),
    "--ide2": matches(re.compile(rf"{STORAGE}:cloudinit")),
    "--boot": one_of("order=scsi0"),
    "--ciuser": matches(re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")),
    # A SHA-512 crypt hash, never a plain password.
    "--cipassword": matches(re.compile(r"\$6\$[A-Za-z0-9./]{1,16}\$[A-Za-z0-9./]{86}")),
    # qm reads this file as root: only the keys cairn writes on stdin.
    "--sshkeys": one_of("/dev/stdin"),
    "--ciupgrade": one_of("0", "1"),
    "--ipconfig0": matches(re.compile(r"ip=[0-9.]{7,15}/[0-9]{1,2},gw=[0-9.]{7,15}")),
}


def _image(path: str, images: str) -> None:
    """An OS image in cairn's cache: a plain file directly under `images`, reached without a
    symlink (qm reads it as root, so cairn must not point it at anything else)."""
    base = os.path.normpath(images)
    if os.path.normpath(path) != path or os.path.dirname(path) != base:
        raise Refused(f"{path!r} is not an image in {base}/")
    if os.path.realpath(path) != path or os.path.realpath(base) != base:
        raise Refused(f"{path!r} is reached through a symlink")
    if not os.path.isfile(path):
        raise Refused(f"{path!r} is not a file")


def _pvesh(rest: list[str], *, vmids: range | None) -> None:
    json_out = ["--output-format", "json"]
    if (
        len(rest) == 6
        and rest[:2] == ["get", "/cluster/resources"]
        and rest[2] == "--type"
        and rest[3] in ("vm", "node", "storage")
        and rest[4:] == json_out
    ):
        return
    if len(rest) == 4 and rest[0] == "get" and rest[2:] == json_out:
        found = re.fullmatch(r"/nodes/([A-Za-z0-9-]{1,63})/status", rest[1])
        if found:
            return
        # One storage's status: its `shared` flag, which `pvesm status` does not print.
        if re.fullmatch(rf"/nodes/[A-Za-z0-9-]{{1,63}}/storage/{STORAGE}/status", rest[1]):
            return
    # The bridges a NIC may name, checked before an install builds anything.
    if (
        len(rest) == 6
        and rest[0] == "get"
        and re.fullmatch(r"/nodes/[A-Za-z0-9-]{1,63}/network", rest[1])
        and rest[2:4] == ["--type", "any_bridge"]
        and rest[4:] == json_out
    ):
        return
    # Which tasks a node still runs for one of cairn's VMs: a restart asks it to tell a create
    # whose worker died from one still running.
    if (
        len(rest) == 8
        and rest[0] == "get"
        and re.fullmatch(r"/nodes/[A-Za-z0-9-]{1,63}/tasks", rest[1])
        and rest[2:5] == ["--source", "active", "--vmid"]
        and rest[6:] == json_out
    ):
        _vmid(rest[5], vmids)
        return
    raise Refused(
        "pvesh: only the reads cairn makes (cluster resources, a node's status and bridges, "
        "a storage's status, a VM's tasks)"
    )


def open_image(path: str) -> int:
    """A read-only descriptor of the file at `path` (absolute), opened one component at a time
    from `/` without following any symlink: whatever the path names after this call, the
    descriptor stays on the file that was checked."""
    directory = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    parts = [part for part in path.split("/") if part]
    if not parts:
        raise Refused(f"{path!r} is not a file")
    at = os.open("/", directory)
    try:
        for part in parts[:-1]:
            inner = os.open(part, directory, dir_fd=at)
            os.close(at)
            at = inner
        # O_NONBLOCK: a FIFO put there must not hang the open.
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        image = os.open(parts[-1], flags, dir_fd=at)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused(f"{path!r} is reached through a symlink") from exc
        raise Refused(f"{path!r} cannot be opened: {exc.strerror}") from exc
    finally:
        os.close(at)
    found = os.fstat(image)
    if not stat.S_ISREG(found.st_mode):
        os.close(image)
        raise Refused(f"{path!r} is not a file")
    if found.st_nlink != 1:
        # Another name of a file elsewhere (where fs.protected_hardlinks is off): a download
        # of cairn's has one name.
        os.close(image)
        raise Refused(f"{path!r} has other hard links")
    return image


def copy_image(image: int, folder: str, name: str) -> str:
    """Copy what descriptor `image` reads into `folder`/`name` (a new file); its path."""
    target = os.path.join(folder, name)
    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        offset = 0
        while sent := os.sendfile(out, image, offset, 1 << 30):
            offset += sent
    finally:
        os.close(out)
    return target


def check_format(path: str, qemu_img: str) -> None:
    """Raises Refused unless `qemu-img info` reads `path` as an image that names no file but
    itself (qm would read such a file as root, and put its bytes in a VM's disk)."""
    try:
        done = subprocess.run(
            [qemu_img, "info", "--output=json", path],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=QEMU_IMG_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise Refused(f"qemu-img info took more than {QEMU_IMG_TIMEOUT} s on the image") from exc
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise Refused(f"qemu-img cannot read the image: {why[0]}")
    try:
        info = json.loads(done.stdout)
    except ValueError as exc:
        raise Refused("qemu-img info did not answer JSON") from exc
    kind = info.get("format")
    if kind not in FORMATS:
        raise Refused(f"the image is {kind!r}, not one of {', '.join(FORMATS)}")
    backing = info.get("full-backing-filename") or info.get("backing-filename")
    if backing is not None:
        raise Refused(f"the image names a backing file ({backing!r})")
    data = (info.get("format-specific") or {}).get("data") or {}
    if "data-file" in data:
        raise Refused(f"the image names an external data file ({data['data-file']!r})")
    for extent in data.get("extents") or []:
        if extent.get("filename") != path:
            raise Refused(f"the image names an extent outside itself ({extent.get('filename')!r})")


class _Stopped(Exception):
    """A signal ended the import: the private copy is removed on the way out."""


def _stop(signum: int, _frame: FrameType | None) -> None:
    raise _Stopped(signal.Signals(signum).name)


def import_disk(command: list[str], *, bin_path: str, tmp: str, environ: dict[str, str]) -> int:
    """Run `qm disk import VMID IMAGE STORAGE` on a checked private copy of IMAGE."""
    qm, qemu_img = shutil.which("qm", path=bin_path), shutil.which("qemu-img", path=bin_path)
    if qm is None or qemu_img is None:
        print(f"cairn_allow: qm or qemu-img not found in {bin_path}", file=sys.stderr)
        return 127
    for signum in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop)
    image = open_image(command[4])
    folder = None
    try:
        try:
            folder = tempfile.mkdtemp(prefix="cairn-import-", dir=tmp)  # mode 0700, root's
            copy = copy_image(image, folder, os.path.basename(command[4]))
        except OSError as exc:
            print(f"cairn_allow: cannot copy the image to {tmp}: {exc.strerror}", file=sys.stderr)
            return 1
        finally:
            os.close(image)
        check_format(copy, qemu_img)
        argv = [*command[:4], copy, *command[5:]]
        return subprocess.run(argv, env=environ, executable=qm, check=False).returncode
    except _Stopped as exc:
        print(f"cairn_allow: stopped by {exc}", file=sys.stderr)
        return 130
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def parse_vmids(text: str) -> range:
    low, _, high = text.partition("-")
    if not (low.isdigit() and high.isdigit() and 100 <= int(low) <= int(high)):
        raise SystemExit(f"cairn_allow: --vmids takes FIRST-LAST, not {text!r}")
    return range(int(low), int(high) + 1)


def main(argv: Sequence[str], environ: dict[str, str]) -> int:
    images, bin_path, tmp, vmids = DEFAULT_IMAGES, DEFAULT_BIN, DEFAULT_TMP, None
    args = list(argv)
    while args:
        flag = args.pop(0)
        if flag in ("--images", "--bin", "--tmp", "--vmids") and args:
            value = args.pop(0)
            if flag == "--images":
                images = value
            elif flag == "--bin":
                bin_path = value
            elif flag == "--tmp":
                tmp = value
            else:
                vmids = parse_vmids(value)
        else:
            print(f"cairn_allow: unknown option {flag}", file=sys.stderr)
            return 2
    asked = environ.get("SSH_ORIGINAL_COMMAND", "")
    try:
        command = shlex.split(asked)
        check(command, images=images, vmids=vmids)
        if command[:3] == ["qm", "disk", "import"]:
            return import_disk(command, bin_path=bin_path, tmp=tmp, environ=environ)
    except (ValueError, Refused) as exc:
        print(f"cairn_allow: refused: {exc}", file=sys.stderr)
        return REFUSED
    program = shutil.which(command[0], path=bin_path)
    if program is None:
        print(f"cairn_allow: {command[0]} not found in {bin_path}", file=sys.stderr)
        return 127
    os.execv(program, command)  # sshd's environment, as for any root command
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], dict(os.environ)))
