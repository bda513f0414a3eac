"""The proof a new guest gives (actors/vm/guest.py): the program cairn sends really computes what
cairn expects from a /etc/shadow line as cloud-init writes it, and the simulated guest answers
the same."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import asyncssh
import pytest
from pvesim import guest as sim_guest

from actors.vm.guest import PROOF_PROGRAM, challenge, proof, proof_command
from actors.vm.shacrypt import sha512_crypt

HASH = sha512_crypt("pw with spaces", salt="abcdefghijklmnop")


def run_on_guest(shadow: Path, user: str, stdin: str) -> subprocess.CompletedProcess[str]:
    """cairn's command as the guest's root runs it (sudo dropped), reading `shadow` in place
    of /etc/shadow."""
    words = shlex.split(proof_command(user))
    assert words[:4] == ["sudo", "-n", "sh", "-c"]
    assert words[5] == PROOF_PROGRAM and "/etc/shadow" in PROOF_PROGRAM
    words[5] = PROOF_PROGRAM.replace("/etc/shadow", str(shadow))
    return subprocess.run(words[2:], input=stdin, capture_output=True, text=True, timeout=30)


@pytest.fixture
def shadow(tmp_path: Path) -> Path:
    path = tmp_path / "shadow"
    path.write_text(
        "root:*:19700:0:99999:7:::\n"
        f"debian:{HASH}:19700:0:99999:7:::\n"
        "deploy:!:19700:0:99999:7:::\n"
    )
    return path


def test_the_guest_program_answers_what_cairn_expects(shadow: Path) -> None:
    message = challenge(120, asyncssh.generate_private_key("ssh-ed25519"))
    done = run_on_guest(shadow, "debian", message + "\n")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.strip() == proof(HASH, message)
    # Another hash (another VM's, or a guess) gives another answer.
    assert proof(sha512_crypt("pw with spaces"), message) != proof(HASH, message)


def test_a_user_with_no_password_or_no_entry_cannot_prove_anything(shadow: Path) -> None:
    message = "cairn-guest-proof:120:SHA256:x:00"
    locked = run_on_guest(shadow, "deploy", message + "\n")
    assert locked.returncode == 0 and locked.stdout.strip() != proof(HASH, message)
    missing = run_on_guest(shadow, "nobody", message + "\n")
    assert missing.returncode == 3 and "no entry for nobody" in missing.stderr


def test_a_user_name_cannot_break_out_of_the_command(shadow: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    done = run_on_guest(shadow, f"x; touch {marker}", "m\n")
    assert done.returncode == 3 and not marker.exists()


def test_the_simulated_guest_answers_like_the_program() -> None:
    message = challenge(121, asyncssh.generate_private_key("ssh-ed25519"))
    words = sim_guest.strip_sudo(shlex.split(proof_command("debian")))
    assert sim_guest.proof_user(words) == "debian"
    shadow = sim_guest.cloud_init_shadow({"user": "debian", "password_hash": HASH})
    got = sim_guest.shadow_proof(shadow, "debian", message + "\n")
    assert (got.exit_status, got.stdout.strip()) == (0, proof(HASH, message))
    assert sim_guest.shadow_proof(shadow, "root", message).stdout.strip() != proof(HASH, message)
    assert sim_guest.shadow_proof(shadow, "nobody", message).exit_status == 3
    assert sim_guest.proof_user(["sh", "-c", "echo", "x", "debian"]) is None
