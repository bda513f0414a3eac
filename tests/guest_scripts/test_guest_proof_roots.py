"""The proof a new guest gives cairn (actors/vm/guest.py, docs/vm.md "Guests: what is
verified"), run for real inside debootstrapped Debian 11, 12 and 13: the user made and its
password hash set the way cloud-init does it (`chpasswd -e` of the hash as given, NOPASSWD sudo
for the default user), Debian's own python3 and sudo, the command cairn sends over SSH run as
that user with the challenge on stdin.

Slow and networked (apt-get installs python3 and sudo, which cloud images carry and minbase
lacks): run with `ops/test --install`.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import asyncssh
import pytest

from actors.vm.guest import challenge, proof, proof_command
from actors.vm.shacrypt import sha512_crypt
from tests.debian_root import CODENAMES, DebianRoot, unpack
from tests.debian_root import skip_reason as root_skip_reason

pytestmark = [
    pytest.mark.skipif(root_skip_reason() is not None, reason=str(root_skip_reason())),
    pytest.mark.timeout(900),
]

HASH = sha512_crypt("p w 'q\" $(id) é")


def as_user(root: DebianRoot, user: str, message: str) -> tuple[int, str, str]:
    """cairn's command as sshd runs it for `user` (`sh -c <command>`), the challenge on stdin."""
    done = root.run(
        ["runuser", "-u", user, "--", "sh", "-c", proof_command(user)],
        input=(message + "\n").encode(),
        timeout=120,
    )
    return done.returncode, done.stdout.decode().strip(), done.stderr.decode()


@pytest.mark.parametrize("version", sorted(CODENAMES))
def test_a_debian_guest_proves_it_holds_its_cloud_init_hash(version: str, tmp_path: Path) -> None:
    root = unpack(version, tmp_path / "root")
    root.sh(
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "--no-install-recommends python3 sudo >/dev/null 2>&1",
        timeout=800,
    )
    # What cloud-init makes of PVE's user-data: the default user, its hash as given, sudo.
    root.sh(
        "useradd -m -s /bin/bash debian && useradd -m -s /bin/bash locked && "
        f"printf '%s\\n' {shlex.quote('debian:' + HASH)} | chpasswd -e && "
        "printf 'debian ALL=(ALL) NOPASSWD:ALL\\nlocked ALL=(ALL) NOPASSWD:ALL\\n' "
        "> /etc/sudoers.d/90-cloud-init-users && useradd -m -s /bin/bash nosudo"
    )
    assert root.sh("getent shadow debian").split(":")[1] == HASH

    message = challenge(120, asyncssh.generate_private_key("ssh-ed25519"))
    code, out, err = as_user(root, "debian", message)
    assert code == 0, err
    assert out == proof(HASH, message)
    # A fresh challenge gets a fresh answer; a user without the hash cannot give the right one.
    again = challenge(120, asyncssh.generate_private_key("ssh-ed25519"))
    assert as_user(root, "debian", again)[1] == proof(HASH, again) != out
    code, out, _ = as_user(root, "locked", message)
    assert code == 0 and out != proof(HASH, message)
    # Without passwordless sudo nothing is read, and the reason comes back.
    code, out, err = as_user(root, "nosudo", message)
    assert code != 0 and out == "" and "password is required" in err
