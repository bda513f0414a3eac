"""Talking to a guest over SSH with the key the service manages.

Guests are fresh cloud VMs whose host keys are generated at first boot, so the first answer
cannot be checked against anything: its host key is trusted on first use and pinned for the
rest of the install. The init script (which may carry the root password) and the check after
the reboot only talk to a guest that shows that same key; another key at the VM's address fails
the install at once. Node transports check their hosts against a known-hosts file.
Secrets never travel on a command line: the init script and the root password go on stdin.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from pathlib import Path

import asyncssh


class GuestError(Exception):
    pass


def ensure_key(path: Path) -> tuple[bool, str]:
    """The service's key pair at `path` (created if missing); (created?, public key line)."""
    pub = path.with_name(path.name + ".pub")
    if path.is_file() and pub.is_file():
        return False, pub.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = asyncssh.generate_private_key("ssh-ed25519", comment="cairn-vm")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(key.export_private_key())
    tmp.chmod(0o600)
    tmp.replace(path)
    line = key.export_public_key().decode().strip()
    pub.write_text(line + "\n")
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
    """Run the init script on the guest that showed `host_key` (the password goes with it)."""
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
