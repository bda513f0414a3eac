"""What a simulated guest answers to an SSH exec request (pure, except the syntax check)."""

from __future__ import annotations

import hashlib
import hmac
import shlex
from collections.abc import Mapping

import attrs

SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/bash", "/usr/bin/sh"}


@attrs.frozen
class GuestRun:
    user: str
    command: str
    stdin: str
    exit_status: int
    stdout: str = ""
    stderr: str = ""


@attrs.frozen
class Answer:
    stdout: str = ""
    stderr: str = ""
    exit_status: int = 0
    reads_script: bool = False  # the command is a shell that runs what arrives on stdin
    proof_user: str | None = None  # the command proves it holds this user's shadow hash


def strip_sudo(words: list[str]) -> list[str]:
    while words and words[0] == "sudo":
        words = words[1:]
        while words and words[0].startswith("-"):
            flag = words[0]
            words = words[1:]
            # sudo options that take an argument
            if flag in ("-u", "-g", "-C", "-h", "-p", "-U") and words:
                words = words[1:]
    return words


def is_script_shell(words: list[str]) -> bool:
    """`sh`, `bash -s -- ARGS`, `bash -`: a shell reading its script from stdin."""
    if not words or words[0] not in SHELLS:
        return False
    rest = words[1:]
    while rest and rest[0] in ("-e", "-x", "-eu", "-eux", "-u", "-o", "pipefail", "-l"):
        rest = rest[1:]
    return not rest or rest[0] in ("-s", "-", "--")


def proof_user(words: list[str]) -> str | None:
    """The user of `sh -c SCRIPT PROGRAM USER` when PROGRAM is a Python program that reads
    /etc/shadow and prints HMAC-SHA256 of stdin's first line keyed with USER's hash (cairn's
    check that a guest is the VM Proxmox gave that password through cloud-init; docs/vm.md);
    None for any other command."""
    if len(words) == 5 and words[0] in SHELLS and words[1] == "-c":
        program = words[3]
        if "/etc/shadow" in program and "hmac" in program:
            return words[4]
    return None


def shadow_proof(shadow: Mapping[str, str], user: str, stdin: str) -> Answer:
    """What that program prints on a guest whose /etc/shadow holds `shadow` (user -> hash)."""
    hashed = shadow.get(user)
    if hashed is None:
        return Answer(stderr=f"no entry for {user} in /etc/shadow\n", exit_status=3)
    message = stdin.split("\n", 1)[0].encode()
    return Answer(stdout=hmac.new(hashed.encode(), message, hashlib.sha256).hexdigest() + "\n")


def cloud_init_shadow(boot: Mapping[str, object]) -> dict[str, str]:
    """/etc/shadow after cloud-init's first boot: the login user gets the `password:` of the
    user-data as given when it is a crypt hash (PVE writes the stored, hashed `cipassword`
    there: QS Cloudinit.pm cloudinit_userdata; cloud-init cc_set_passwords `chpasswd -e`),
    else stays locked; root is locked as the images ship it."""
    shadow = {"root": "*"}
    user = str(boot.get("user") or "")
    if user:
        shadow[user] = str(boot.get("password_hash") or "!")
    return shadow


def answer(command: str, user: str, hostname: str) -> Answer:
    try:
        words = shlex.split(command)
    except ValueError:
        return Answer(
            stderr="bash: -c: line 1: unexpected EOF while looking for matching quote\n",
            exit_status=2,
        )
    words = strip_sudo(words)
    if not words:
        return Answer()
    head = words[0]
    if head == "echo":
        return Answer(stdout=" ".join(words[1:]) + "\n")
    if head == "true":
        return Answer()
    if head == "false":
        return Answer(exit_status=1)
    if head == "hostname":
        return Answer(stdout=hostname + "\n")
    if head == "whoami" or words[:2] == ["id", "-un"]:
        return Answer(stdout=("root" if command.lstrip().startswith("sudo") else user) + "\n")
    if words[:2] == ["cloud-init", "status"]:
        return Answer(stdout="status: done\n")
    if is_script_shell(words):
        return Answer(reads_script=True)
    proving = proof_user(words)
    if proving is not None:
        return Answer(proof_user=proving)
    return Answer(stderr=f"bash: line 1: {head}: command not found\n", exit_status=127)
