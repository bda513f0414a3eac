"""Talking to a guest over SSH with the key the service manages.

Guests are fresh cloud VMs whose host keys are generated at first boot, so cairn cannot know
the key before the first answer. It verifies it instead (docs/vm.md, "Guests: what is
verified"):
1. `wait_ready` polls `echo ready` and takes the host key the guest shows (nothing secret goes
   to it: only cairn's public key and a signature bound to that one session);
2. `verify` asks the machine behind that key to prove it holds the secret Proxmox handed the
   new VM through cloud-init: the crypt hash of the login user's password (`cipassword`), which
   cloud-init writes to /etc/shadow as given. It computes HMAC-SHA256 keyed with that hash over
   a fresh challenge; a machine that merely answers at the VM's address does not have the hash
   (random salt, never sent anywhere but to Proxmox), so it cannot answer, and cairn stops;
3. only then is the key pinned, and the init script (which may carry the root password), the
   check after the reboot and every later readiness check talk only to a guest showing it.
Node transports check their hosts against a known-hosts file.
Secrets never travel on a command line: the init script and the root password go on stdin.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import shlex
import time
from pathlib import Path

import asyncssh

from events.files import SECRET, write_atomically


class GuestError(Exception):
    pass


def ensure_key(path: Path) -> tuple[bool, str]:
    """The service's key pair at `path` (created if missing); (created?, public key line)."""
    pub = path.with_name(path.name + ".pub")
    if path.is_file() and pub.is_file():
        return False, pub.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = asyncssh.generate_private_key("ssh-ed25519", comment="cairn-vm")
    # Owner-only from its first byte: a key written, then chmod-ed, is readable by anyone
    # who opens it in between (and stays so for them).
    write_atomically(path, key.export_private_key(), mode=SECRET)
    line = key.export_public_key().decode().strip()
    write_atomically(pub, line + "\n")
    return True, line


def _options(
    user: str, key: Path, port: int, timeout: float, host_key: asyncssh.SSHKey | None
) -> dict[str, object]:
    return dict(
        port=port,
        username=user,
        client_keys=[str(key)],
        # (trusted host keys, trusted CA keys, revoked keys); None: first contact, trust it.
        known_hosts=([host_key], [], []) if host_key is not None else None,
        connect_timeout=timeout,
        agent_path=None,
        config=None,
        password=None,
        kbdint_auth=False,
    )


def changed_key(ip: str, pinned: asyncssh.SSHKey) -> GuestError:
    return GuestError(
        f"SSH to {ip}: the host key is not the one it showed first "
        f"({pinned.get_fingerprint()}); not talking to it"
    )


async def wait_ready(
    ip: str,
    *,
    user: str,
    key: Path,
    port: int,
    timeout: float,
    interval: float,
    host_key: asyncssh.SSHKey | None = None,
) -> asyncssh.SSHKey:
    """Poll until `echo ready` answers; the guest's host key. With `host_key`, only a guest
    showing that key counts, and another key fails at once. GuestError at the deadline."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise GuestError(f"SSH to {user}@{ip} not ready after {timeout:g}s: {last}")
        options = _options(user, key, port, min(5.0, remaining), host_key)
        try:
            async with asyncssh.connect(ip, **options) as conn:
                result = await conn.run("echo ready", check=False)
                if result.exit_status == 0 and str(result.stdout).strip() == "ready":
                    shown = conn.get_server_host_key()
                    assert shown is not None  # asyncssh has it once the handshake is done
                    return shown
                last = f"echo ready gave exit status {result.exit_status}"
        except asyncssh.HostKeyNotVerifiable:
            assert host_key is not None  # nothing is verified on first contact
            raise changed_key(ip, host_key) from None
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            last = str(exc) or type(exc).__name__
        await asyncio.sleep(min(interval, max(0.0, deadline - time.monotonic())))


# Run as root on the guest: waits for cloud-init to finish (the password is set in one of its
# later stages on older releases), then prints HMAC-SHA256 of the first stdin line keyed with
# the user's /etc/shadow hash. Python is there on every cloud-init image (cloud-init is
# written in it); RHEL 8's is /usr/libexec/platform-python.
PROOF_PROGRAM = """\
import hashlib, hmac, sys
user = sys.argv[1]
message = sys.stdin.readline().rstrip("\\n").encode()
with open("/etc/shadow") as shadow:
    for line in shadow:
        fields = line.rstrip("\\n").split(":")
        if fields[0] == user and len(fields) > 1:
            print(hmac.new(fields[1].encode(), message, hashlib.sha256).hexdigest())
            sys.exit(0)
sys.stderr.write("no entry for %s in /etc/shadow\\n" % user)
sys.exit(3)
"""
_PROOF_SHELL = (
    "if command -v cloud-init >/dev/null 2>&1; then cloud-init status --wait >/dev/null 2>&1"
    " || true; fi; for p in python3 /usr/libexec/platform-python; do"
    ' if command -v "$p" >/dev/null 2>&1; then exec "$p" -c "$0" "$1"; fi; done;'
    " echo 'cairn: no python3 on the guest' >&2; exit 127"
)


def proof_command(user: str) -> str:
    """The command that makes the guest prove it holds `user`'s cloud-init password hash;
    the challenge goes on stdin."""
    return "sudo -n sh -c " + " ".join(
        shlex.quote(part) for part in (_PROOF_SHELL, PROOF_PROGRAM, user)
    )


def challenge(vmid: int, shown: asyncssh.SSHKey) -> str:
    """A fresh one-line challenge, naming the VM and the key it is asked of."""
    return f"cairn-guest-proof:{vmid}:{shown.get_fingerprint()}:{secrets.token_hex(16)}"


def proof(password_hash: str, message: str) -> str:
    """What a guest holding `password_hash` answers to `message`."""
    return hmac.new(password_hash.encode(), message.encode(), hashlib.sha256).hexdigest()


async def verify(
    ip: str,
    *,
    vmid: int,
    user: str,
    key: Path,
    port: int,
    host_key: asyncssh.SSHKey,
    password_hash: str,
    timeout: float,
) -> None:
    """GuestError unless the machine showing `host_key` at `ip` proves it holds the password
    hash Proxmox gave VM `vmid` through cloud-init. Nothing secret is sent to it."""
    fingerprint = host_key.get_fingerprint()
    message = challenge(vmid, host_key)
    try:
        async with (
            asyncio.timeout(timeout),
            asyncssh.connect(ip, **_options(user, key, port, min(15.0, timeout), host_key)) as conn,
        ):
            result = await conn.run(proof_command(user), input=message + "\n", check=False)
    except asyncssh.HostKeyNotVerifiable:
        raise changed_key(ip, host_key) from None
    except TimeoutError:
        raise GuestError(
            f"SSH to {user}@{ip}: no proof of identity from host key {fingerprint} after "
            f"{timeout:g}s; the init script was not sent"
        ) from None
    except (OSError, asyncssh.Error) as exc:
        raise GuestError(f"SSH to {user}@{ip} failed: {exc}") from None
    answer = str(result.stdout or "").strip()
    if result.exit_status == 0 and hmac.compare_digest(answer, proof(password_hash, message)):
        return
    detail = str(result.stderr or "").strip().splitlines()
    why = f" ({detail[-1][:200]})" if result.exit_status != 0 and detail else ""
    raise GuestError(
        f"the machine at {ip} with host key {fingerprint} could not prove it is VM {vmid}: it "
        f"does not hold the password hash Proxmox gave the VM through cloud-init{why}; it may "
        "be another machine answering at the VM's address. Nothing secret was sent to it"
    )


def init_stdin(script: str, root_password: str) -> bytes:
    """The shell input for the init script: the password as a variable, then the script.

    The variable is set only if a root password is configured; the script treats its absence
    as "leave root alone".
    """
    head = ""
    if root_password:
        head = f"VM_ROOT_PASSWORD={shlex.quote(root_password)}\nexport VM_ROOT_PASSWORD\n"
    return (head + script).encode()


async def run_init(
    ip: str,
    *,
    user: str,
    key: Path,
    port: int,
    host_key: asyncssh.SSHKey,
    script: str,
    root_password: str,
) -> None:
    """Run the init script on the guest that showed `host_key`, verified by `verify` (the
    password goes with it)."""
    try:
        async with asyncssh.connect(ip, **_options(user, key, port, 15.0, host_key)) as conn:
            result = await conn.run(
                "sudo -n bash -s", input=init_stdin(script, root_password).decode(), check=False
            )
    except asyncssh.HostKeyNotVerifiable:
        raise changed_key(ip, host_key) from None
    except (OSError, asyncssh.Error) as exc:
        raise GuestError(f"SSH to {user}@{ip} failed: {exc}") from None
    if result.exit_status != 0:
        detail = str(result.stderr or result.stdout or "").strip().splitlines()
        tail = detail[-1] if detail else "no output"
        raise GuestError(f"init script exited with status {result.exit_status}: {tail}")
