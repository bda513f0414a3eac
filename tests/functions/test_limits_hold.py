"""The run's limits hold the way cairn really runs: the attacks on memory, processes and tmpfs
end at the run's limit with the documented error, three ways: with cgroups (here v1, as root),
with ``RUN_CGROUPS=0``, and as an unprivileged user without cgroups (what the shipped unit is
on a host that delegates none). The service runs as its own process (``cairn serve
functions``); the test watches its sandboxes from outside, two attacks at once, and checks
that together they never held more than twice ``RUN_MEMORY_MB`` of memory nor
twice ``RUN_PROCESSES`` tasks (``RUN_CONCURRENCY=2``, no sandbox kept waiting)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import attrs
import pytest
import pytest_asyncio

from actors.functions import cgroups
from actors.functions.limits import MIB, SandboxLimits
from tests.conftest import wait_for
from tests.ports import free_port
from tests.processes import until_ready

MEMORY_MB = 128
PROCESSES = 24
CONCURRENCY = 2
TMPFS_MB = 4
PAGE = os.sysconf("SC_PAGE_SIZE")
ENV = {
    # Room for a memory cgroup at its limit, which evicts node's own code pages before its OOM
    # killer acts (no swap), on a loaded machine.
    "RUN_TIMEOUT": "5",
    "RUN_MEMORY_MB": str(MEMORY_MB),
    "RUN_PROCESSES": str(PROCESSES),
    "RUN_TMPFS_MB": str(TMPFS_MB),
    "RUN_CONCURRENCY": str(CONCURRENCY),
    "RUN_WARM": "0",  # every sandbox below the service is a run's
    "RUN_OUTPUT_BYTES": "65536",
}
MEMORY = f"failed to run: memory limit of {MEMORY_MB} MiB exceeded"
FILES = f"failed to run: tmpfs limit of {TMPFS_MB * 1024} files exceeded"


def _cgroups_writable() -> bool:
    made = cgroups.create(SandboxLimits(memory_bytes=64 * MIB))
    try:
        return {"memory", "pids"} <= set(made.parents)
    finally:
        made.remove()


def _unprivileged_user() -> pwd.struct_passwd | None:
    for name in ("cairn", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    return None


@attrs.define
class Service:
    mode: str
    proc: asyncio.subprocess.Process
    port: int
    session: aiohttp.ClientSession
    output: list[bytes]

    async def run_now(self, language: str, code: str) -> tuple[int, str]:
        body = {"language": language, "code": code}
        async with self.session.post(f"http://127.0.0.1:{self.port}/run-now", json=body) as r:
            return r.status, await r.text()


@attrs.define
class Peak:
    """The most memory and tasks the service's sandboxes held at once, seen from outside."""

    memory: int = 0
    tasks: int = 0


def sandboxes(root: int) -> set[int]:
    """Every process below the service but its nats-server: each belongs to a run."""
    return {
        pid for pid in cgroups.process_tree(root) - {root} if _comm(pid) not in ("nats-server", "")
    }


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _sample(root: int, peak: Peak) -> None:
    memory = tasks = 0
    for pid in sandboxes(root):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{pid}/statm").read_text().split()
            memory += (int(fields[1]) - int(fields[2])) * PAGE
            tasks += len(os.listdir(f"/proc/{pid}/task"))
    peak.memory = max(peak.memory, memory)
    peak.tasks = max(peak.tasks, tasks)


async def _watch(root: int, peak: Peak) -> None:
    while True:
        _sample(root, peak)
        await asyncio.sleep(0.005)


MODES = ["cgroups", "RUN_CGROUPS=0", "unprivileged"]
# cairn by Debian's interpreter with this venv's packages: the venv's own interpreter may lie
# where the unprivileged user cannot reach it (a developer's home).
LAUNCH = (
    "import site, sys; site.addsitedir(sys.argv.pop(1)); "
    "from gateway.launcher import main; sys.exit(main())"
)
CAIRN = ["/usr/bin/python3", "-c", LAUNCH, sysconfig.get_paths()["purelib"]]


# One service per way, for all the attacks (its start is most of the time).
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=MODES)
async def service(request: pytest.FixtureRequest) -> AsyncIterator[Service]:
    mode: str = request.param
    prefix: list[str] = []
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "CAIRN_", "RUN_"))}
    env.update(ENV)
    owner: tuple[int, int] | None = None
    if mode == "cgroups" and not _cgroups_writable():
        pytest.skip("no writable memory and pids cgroups on this machine")
    if mode == "RUN_CGROUPS=0":
        env["RUN_CGROUPS"] = "0"
    if mode == "unprivileged":
        user = _unprivileged_user()
        if os.geteuid() != 0 or user is None:
            pytest.skip("dropping to an unprivileged user needs root")
        owner = (user.pw_uid, user.pw_gid)
        prefix = [
            "setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
        ]  # fmt: skip
    data = Path(tempfile.mkdtemp(prefix="cairn-limits-"))
    if owner is not None:
        os.chown(data, *owner)
    port = free_port()
    env.update(CAIRN_DATA=str(data), PORT=str(port), HOME=str(data), TMPDIR=str(data))
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"  # nats
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
    try:
        argv = [*prefix, *CAIRN, "serve", "functions"]
        what = f"cairn serve functions ({mode})"
        async with until_ready(*argv, what=what, env=env, cwd=data) as cairn:
            yield Service(mode, cairn.proc, port, session, cairn.output)
    finally:
        await session.close()
        shutil.rmtree(data, ignore_errors=True)
    assert "Traceback" not in cairn.text(), cairn.text()


ATTACKS = {
    "Buffer.alloc 4 GiB": (
        "javascript",
        "const b = Buffer.alloc(4 * 2 ** 30 - 1, 1); return b.length",
        MEMORY,
    ),
    "ArrayBuffer": (
        "javascript",
        "const a = []; for (;;) { const x = new ArrayBuffer(16 << 20);"
        " new Uint8Array(x).fill(1); a.push(x) }",
        MEMORY,
    ),
    "WebAssembly.Memory": (
        "javascript",
        "const m = new WebAssembly.Memory({ initial: 1, maximum: 65536 });"
        " for (;;) { m.grow(256); new Uint8Array(m.buffer).fill(1) }",
        MEMORY,
    ),
    "bytearray bomb": (
        "python",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))",
        MEMORY,
    ),
    "300 MB string in Python": ("python", "s = 'x' * (300 << 20)\nreturn len(s)", MEMORY),
    "300 MB string in JavaScript": (
        "javascript",
        "const s = 'x'.repeat(300 * 2 ** 20); return s.charCodeAt(s.length - 1) + s.length",
        MEMORY,
    ),
    "inode bomb": (
        "python",
        "i = 0\nwhile True:\n    open(f'/tmp/{i}', 'w').close()\n    i += 1",
        FILES,
    ),
    "fork bomb": (
        "python",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        "failed to run: timed out after 5 s",
    ),
    "thread bomb": (
        "python",
        "import threading\nstop = threading.Event()\n"
        "while True:\n    threading.Thread(target=stop.wait).start()",
        "failed to run: RuntimeError: can't start new thread",
    ),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_two_attacks_at_once_end_at_the_runs_limits(service: Service, attack: str) -> None:
    language, code, expected = ATTACKS[attack]
    peak = Peak()
    watcher = asyncio.create_task(_watch(service.proc.pid, peak))
    try:
        replies = await asyncio.gather(*(service.run_now(language, code) for _ in range(2)))
    finally:
        watcher.cancel()
    assert replies == [(500, expected)] * 2, (replies, _tail(service))
    assert peak.memory <= CONCURRENCY * MEMORY_MB * MIB, peak
    assert peak.tasks <= CONCURRENCY * PROCESSES, peak
    # Nothing of either run is left, and the next run is answered.
    await wait_for(lambda: not sandboxes(service.proc.pid), what="the attacks' processes to end")
    status, text = await service.run_now("python", "import os\nreturn os.listdir('/tmp')")
    assert (status, json.loads(text)["data"]) == (200, [])


def _tail(service: Service) -> str:
    return b"".join(service.output[-20:]).decode(errors="replace")


START_LINE = {
    "cgroups": "runner: sandbox limits on cgroup v1: memory by cgroup v1 memory.limit_in_bytes; "
    "processes by cgroup v1 pids.max; CPU share cgroup v1 cpu.cfs_quota_us;",
    "RUN_CGROUPS=0": "runner: sandbox limits on no cgroups (RUN_CGROUPS=0): memory by "
    "RLIMIT_AS (Python) / RLIMIT_DATA (node) per process, summed every 20 ms; processes by "
    "RLIMIT_NPROC in the sandbox's own user namespace; CPU share not held (no cgroup);",
    "unprivileged": "runner: sandbox limits on no cgroups (cgroup v1 controllers are not "
    "writable): memory by RLIMIT_AS (Python) / RLIMIT_DATA (node) per process",
}


async def test_the_start_says_which_limits_hold(service: Service) -> None:
    log = b"".join(service.output).decode()
    assert START_LINE[service.mode] in log, log


async def test_the_memory_of_all_a_runs_processes_counts(service: Service) -> None:
    # Five processes of 48 MiB each: every one within any per-process limit, the run over its
    # 128 MiB. A cgroup holds it at once; without one the supervisor adds them up and kills
    # the run at its next look (between two looks the run may briefly hold more).
    code = (
        "import os, time\n"
        "for _ in range(5):\n"
        "    if os.fork() == 0:\n"
        "        block = bytearray(48 << 20)\n"
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
        "os.wait()  # the first to die (an OOM kill, or the supervisor's)"
    )
    assert await service.run_now("python", code) == (500, MEMORY), _tail(service)
    await wait_for(lambda: not sandboxes(service.proc.pid), what="the run's processes to end")
