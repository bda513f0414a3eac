"""Talking to a guest over SSH with the key the service manages.

Guests are fresh cloud VMs whose host keys are generated at first boot, so there is nothing to
check them against yet: host-key checking is off for guests only (node transports check theirs).
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


def _options(user: str, key: Path, port: int, timeout: float) -> dict[str, object]:
    return dict(
        port=port,
        username=user,
        client_keys=[str(key)],
        known_hosts=None,
        connect_timeout=timeout,
        agent_path=None,
        config=None,
        password=None,
        kbdint_auth=False,
    )


async def wait_ready(
    ip: str, *, user: str, key: Path, port: int, timeout: float, interval: float
) -> float:
    """Poll until `echo ready` answers; seconds it took. Raises GuestError at the deadline."""
    start = time.monotonic()
    deadline = start + timeout
    last = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise GuestError(f"SSH to {user}@{ip} not ready after {timeout:g}s: {last}")
        try:
            async with asyncssh.connect(ip, **_options(user, key, port, min(5.0, remaining))) as c:
                result = await c.run("echo ready", check=False)
                if result.exit_status == 0 and str(result.stdout).strip() == "ready":
                    return time.monotonic() - start
                last = f"echo ready gave exit status {result.exit_status}"
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
    ip: str, *, user: str, key: Path, port: int, script: str, root_password: str
) -> None:
    try:
        async with asyncssh.connect(ip, **_options(user, key, port, 15.0)) as conn:
            result = await conn.run(
                "sudo -n bash -s", input=init_stdin(script, root_password).decode(), check=False
            )
    except (OSError, asyncssh.Error) as exc:
        raise GuestError(f"SSH to {user}@{ip} failed: {exc}") from None
    if result.exit_status != 0:
        detail = str(result.stderr or result.stdout or "").strip().splitlines()
        tail = detail[-1] if detail else "no output"
        raise GuestError(f"init script exited with status {result.exit_status}: {tail}")
