#!/usr/bin/python3
"""The one thing cairn's SSH key may do as root on a Proxmox VE node: the `qm`, `pvesm` and
`pvesh` command lines cairn itself runs (actors/vm/qm.py), with their fixed options, nothing else.

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
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Sequence

# The folder cairn's CLI driver downloads OS images to (CAIRN_DATA of the systemd unit).
DEFAULT_IMAGES = "/var/lib/cairn/vm/images"
DEFAULT_BIN = "/usr/sbin:/usr/bin"
REFUSED = 126

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
        if rest not in (["status", "--content", "images"],) and not (
            len(rest) == 3
            and rest[:2] == ["status", "--storage"]
            and re.fullmatch(STORAGE, rest[2])
        ):
            raise Refused("pvesm: only `status --storage NAME` and `status --content images`")
    elif program == "pvesh":
        _pvesh(rest)
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
    "--net0": matches(re.compile(r"virtio,bridge=[A-Za-z0-9_.-]{1,15}")),
    "--serial0": one_of("socket"),
    "--vga": one_of("serial0"),
}
SET: dict[str, Rule] = {
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


def _pvesh(rest: list[str]) -> None:
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
    raise Refused("pvesh: only the reads cairn makes (cluster resources, a node's status)")


def parse_vmids(text: str) -> range:
    low, _, high = text.partition("-")
    if not (low.isdigit() and high.isdigit() and 100 <= int(low) <= int(high)):
        raise SystemExit(f"cairn_allow: --vmids takes FIRST-LAST, not {text!r}")
    return range(int(low), int(high) + 1)


def main(argv: Sequence[str], environ: dict[str, str]) -> int:
    images, bin_path, vmids = DEFAULT_IMAGES, DEFAULT_BIN, None
    args = list(argv)
    while args:
        flag = args.pop(0)
        if flag in ("--images", "--bin", "--vmids") and args:
            value = args.pop(0)
            if flag == "--images":
                images = value
            elif flag == "--bin":
                bin_path = value
            else:
                vmids = parse_vmids(value)
        else:
            print(f"cairn_allow: unknown option {flag}", file=sys.stderr)
            return 2
    asked = environ.get("SSH_ORIGINAL_COMMAND", "")
    try:
        command = shlex.split(asked)
        check(command, images=images, vmids=vmids)
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
