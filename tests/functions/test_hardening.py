"""Escapes from issue 10, in every language they apply to: sandboxed code is never host root,
reads nothing root-only, writes no sysctl, makes none of the denied syscalls or sockets, sees
no host path, and esbuild cannot be used to burn the host. Each case ends with the service
still running code (``healthy``)."""

import contextlib
import json
import os
import platform
import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyseccomp
import pytest

import actors
from actors.functions import seccomp
from actors.functions.limits import MIB
from actors.platform import Runtime
from tests.conftest import wait_for
from tests.functions.conftest import HOST_USER, Service, start_service
from tests.functions.test_exploits import failure, healthy

CHECKOUT = str(Path(actors.__file__).resolve().parents[1])
LANGUAGES = ["python", "javascript", "typescript"]


@pytest.fixture
async def hostile(runtime: Runtime) -> AsyncIterator[Service]:
    async with start_service(runtime) as service:
        yield service


async def data(service: Service, language: str, code: str) -> Any:
    reply = await service.run_now(language, code)
    assert reply.status == 200, reply
    return reply.json()["data"]


# -- host uid, and the cgroups the sandbox user's processes are in -----------------------------

# Names the code's own process, prints "ready" and waits; the test looks at it from the host.
MARKED = {
    "python": "import ctypes, time\n"
    "ctypes.CDLL(None).prctl(15, b'{mark}', 0, 0, 0)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)",
    "javascript": "process.title = '{mark}'; console.log('ready');"
    " await new Promise((r) => setTimeout(r, 60000))",
    "typescript": "process.title = '{mark}' as string; console.log('ready');"
    " await new Promise<void>((r) => setTimeout(r, 60000))",
}


def processes_named(mark: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == mark:
                found.append(int(pid))
        except OSError:
            pass
    return found


def ids(pid: int) -> dict[str, list[int]]:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status if line.startswith(("Uid", "Gid")))
    return {key: [int(v) for v in value.split()] for key, value in fields.items()}


def group_limits(pid: int, service: Service) -> dict[str, str]:
    """The limits of the slot groups ``pid`` is in, read on the host."""
    runner = service.host.runner
    assert runner is not None
    files = {"memory": "memory.limit_in_bytes", "pids": "pids.max", "cpu": "cpu.cfs_quota_us"}
    [slot] = [slot for slot in list(runner._slots) if pid in slot.members()]
    return {
        controller: (directory / files[controller]).read_text().strip()
        for controller, directory in slot.dirs.items()
        if controller in files
    }


@pytest.mark.parametrize("language", LANGUAGES)
async def test_sandboxed_code_is_never_host_root(hostile: Service, language: str) -> None:
    mark = f"cairn-uid-{secrets.token_hex(2)}"
    body = {"language": language, "code": MARKED[language].format(mark=mark), "stream": True}
    async with hostile.session.post("/run-now", json=body) as response:
        assert response.status == 200
        async for raw in response.content:
            if raw.startswith(b"data: ") and json.loads(raw[6:])["data"] == "ready":
                break
        [pid] = processes_named(mark)
        seen = ids(pid)
        if HOST_USER is not None:  # cairn runs as root: the sandbox user, never root
            assert seen == {"Uid": [HOST_USER.uid] * 4, "Gid": [HOST_USER.gid] * 4}
        else:  # cairn is not root: its own user
            assert seen["Uid"] == [os.geteuid()] * 4
        assert 0 not in seen["Uid"] + seen["Gid"]
        # Every other process of every sandbox of the service, waiting ones included. A sandbox
        # being started (the run just took one, so the pool refills) is root for a moment: that
        # is cairn's own launcher, entering the groups before it drops to the sandbox user. A
        # process that stays root fails.
        runner = hostile.host.runner
        assert runner is not None

        def root_in_sandboxes() -> list[int]:
            found = []
            for slot in list(runner._slots):
                for member in slot.members():
                    with contextlib.suppress(FileNotFoundError):  # gone in between
                        if 0 in ids(member)["Uid"]:
                            found.append(member)
            return found

        await wait_for(lambda: not root_in_sandboxes(), timeout=10, what="no root in sandboxes")
        # The limits still hold for it: it is in its slot's groups, as the sandbox user.
        if runner.cgroups is not None:
            limits = group_limits(pid, hostile)
            expected = {"memory": str(128 * MIB), "pids": "32", "cpu": "100000"}
            assert limits == {k: v for k, v in expected.items() if k in runner.cgroups.parents}
    # The client left: the run is cancelled and its process goes.
    await wait_for(lambda: not processes_named(mark), what="the marked process to end")
    await healthy(hostile)


# -- files -----------------------------------------------------------------------------------

READ = {
    "python": "try:\n    return open(PATH).read()\nexcept OSError as e:\n    return str(e)",
    "javascript": "try { return require('fs').readFileSync(PATH, 'utf8') }"
    " catch (e) { return e.code }",
    "typescript": "try { return require('fs').readFileSync(PATH as string, 'utf8') }"
    " catch (e: any) { return e.code }",
}


@pytest.mark.parametrize("language", LANGUAGES)
async def test_a_root_only_file_in_the_sandbox_tree_is_unreadable(
    hostile: Service, language: str
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can place a root-owned file (and cairn then is not root)")
    # /usr is the host tree the sandbox sees (read-only).
    path = Path("/usr/local/share") / f"cairn-exploit-{secrets.token_hex(4)}"
    path.write_text("root only")
    try:
        path.chmod(0o600)
        assert path.stat().st_uid == 0
        code = READ[language].replace("PATH", json.dumps(str(path)))
        got = await data(hostile, language, code)
        expected = f"[Errno 13] Permission denied: '{path}'" if language == "python" else "EACCES"
        assert got == expected
    finally:
        path.unlink()
    await healthy(hostile)


# Every file under /proc/sys with a write bit, opened for writing; and /sys must not exist.
PROC_SYS = {
    "python": """
import os, stat
tried, opened, errors = 0, [], set()
for top, dirs, files in os.walk('/proc/sys'):
    for name in files:
        path = os.path.join(top, name)
        try:
            if not os.stat(path).st_mode & 0o222:
                continue
        except OSError:
            continue
        tried += 1
        try:
            os.close(os.open(path, os.O_WRONLY))
            opened.append(path)
        except OSError as e:
            errors.add(e.errno)
return [tried, opened, sorted(errors), os.path.exists('/sys')]
""",
    "javascript": """
const fs = require('fs'), path = require('path');
let tried = 0; const opened = [], errors = new Set();
const walk = (dir) => {
  let entries; try { entries = fs.readdirSync(dir, {withFileTypes: true}) } catch (e) { return }
  for (const e of entries) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) { walk(p); continue }
    let st; try { st = fs.statSync(p) } catch (err) { continue }
    if (!(st.mode & 0o222)) continue;
    tried++;
    try { fs.closeSync(fs.openSync(p, 'w')); opened.push(p) } catch (err) { errors.add(err.code) }
  }
};
walk('/proc/sys');
return [tried, opened, [...errors].sort(), fs.existsSync('/sys')];
""",
}
PROC_SYS["typescript"] = PROC_SYS["javascript"].replace("let st;", "let st: any;")


WHO_AM_I = {
    "python": """
import getpass, os, pwd
me = pwd.getpwuid(os.getuid())
try:
    open('/etc/passwd', 'a').close()
    wrote = True
except OSError:
    wrote = False
return [me.pw_name, getpass.getuser(), me.pw_dir, os.path.expanduser('~'), wrote]
""",
    "javascript": """
const os = require('os'), fs = require('fs');
const me = os.userInfo();
let wrote = true;
try { fs.appendFileSync('/etc/passwd', '') } catch (e) { wrote = false }
return [me.username, me.username, me.homedir, os.homedir(), wrote];
""",
}
WHO_AM_I["typescript"] = WHO_AM_I["javascript"].replace("let wrote", "let wrote: boolean")


@pytest.mark.parametrize("language", LANGUAGES)
async def test_the_sandbox_user_has_a_name_and_a_home(hostile: Service, language: str) -> None:
    """Libraries that ask who they run as (getpass, os.userInfo, ~ expansion) get an answer
    instead of an exception; the account files are read-only like the rest of the tree."""
    assert await data(hostile, language, WHO_AM_I[language]) == [
        "nobody",
        "nobody",
        "/home/sandbox",
        "/home/sandbox",
        False,
    ]


@pytest.mark.parametrize("language", LANGUAGES)
async def test_no_sysctl_can_be_opened_for_writing(hostile: Service, language: str) -> None:
    tried, opened, errors, sys_exists = await data(hostile, language, PROC_SYS[language])
    # As many writable-looking files as the host has (hundreds), and not one opens.
    writable = sum(
        1
        for top, _, files in os.walk("/proc/sys")
        for name in files
        if _mode(os.path.join(top, name)) & 0o222
    )
    assert tried > 100 and tried >= writable // 2, (tried, writable)
    assert opened == []
    # Read-only file system; permission denied first where the sandbox user has no right.
    assert errors and set(errors) <= {13, 30, "EACCES", "EROFS"}
    assert sys_exists is False
    await healthy(hostile)


def _mode(path: str) -> int:
    try:
        return os.stat(path).st_mode
    except OSError:
        return 0


async def test_nothing_in_proc_is_writable(hostile: Service) -> None:
    # The rest of /proc too, the code's own entries included (read-only mount).
    code = """
import os
opened = []
for top, dirs, files in os.walk('/proc'):
    dirs[:] = [d for d in dirs if d not in ('self', 'thread-self')]
    for name in files:
        path = os.path.join(top, name)
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            opened.append(path)
        except OSError:
            pass
return opened
"""
    opened = await data(hostile, "python", code)
    # Only descriptor links open, and they lead to the sandbox's own pipes (every pid in its
    # /proc is its own: a pid namespace of its own).
    assert opened and all(re.fullmatch(r"/proc/\d+/(task/\d+/)?fd/\d+", p) for p in opened)
    await healthy(hostile)


# -- syscalls and sockets --------------------------------------------------------------------


def numbers(names: list[str]) -> dict[str, int]:
    return {name: pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) for name in names}


async def test_every_denied_syscall_fails_with_eperm(hostile: Service) -> None:
    # Zero arguments: the filter answers before the kernel looks at them. Some would succeed
    # unfiltered (ptrace(PTRACE_TRACEME), keyctl, personality), so EPERM is the filter's.
    code = f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
out = {{}}
for name, nr in {numbers(seccomp.denied_syscalls())!r}.items():
    ctypes.set_errno(0)
    result = libc.syscall(nr, 0, 0, 0, 0, 0, 0)
    out[name] = [result, ctypes.get_errno()]
status = [l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp:')]
return [out, status]
"""
    out, status = await data(hostile, "python", code)
    assert status == ["2"]  # filter mode
    assert out == {name: [-1, 1] for name in seccomp.denied_syscalls()}
    await healthy(hostile)


async def test_what_is_denied_only_with_some_arguments(hostile: Service) -> None:
    numbers_ = numbers(["personality", "clone", "clone3", "unshare", "io_uring_setup"])
    code = f"""
import ctypes, os, threading, subprocess
libc = ctypes.CDLL(None, use_errno=True)
nr = {numbers_!r}
def call(name, *args):
    ctypes.set_errno(0)
    result = libc.syscall(nr[name], *args)
    return [result, ctypes.get_errno()]
params = ctypes.create_string_buffer(120)
out = {{
    'personality ADDR_NO_RANDOMIZE': call('personality', 0x0040000),
    'personality query': call('personality', ctypes.c_ulong(0xffffffff)),
    'clone CLONE_NEWUSER': call('clone', 0x10000000 | 17, 0, 0, 0, 0),
    'clone CLONE_NEWNET': call('clone', 0x40000000 | 17, 0, 0, 0, 0),
    'clone3': call('clone3', 0, 0),
    'io_uring_setup': call('io_uring_setup', 8, params),
}}
# Threads and processes are not namespaces: they still work (clone3 falls back to clone).
seen = []
thread = threading.Thread(target=lambda: seen.append('thread'))
thread.start(); thread.join()
out['thread'] = seen
out['process'] = subprocess.run(['/usr/bin/python3', '-c', 'print(6 * 7)'],
                                capture_output=True, text=True).stdout.strip()
return out
"""
    got = await data(hostile, "python", code)
    assert got == {
        "personality ADDR_NO_RANDOMIZE": [-1, 1],
        "personality query": [0, 0],  # PER_LINUX: reading it is allowed
        "clone CLONE_NEWUSER": [-1, 1],
        "clone CLONE_NEWNET": [-1, 1],
        "clone3": [-1, 38],  # ENOSYS: the C library falls back to clone
        "io_uring_setup": [-1, 1],
        "thread": ["thread"],
        "process": "42",
    }
    await healthy(hostile)


async def test_no_socket_family_but_unix(hostile: Service) -> None:
    code = """
import socket
denied, other = [], {}
for family in range(1, 46):
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW):
        try:
            socket.socket(family, kind).close()
            other[f'{family}/{kind}'] = 'opened'
        except OSError as e:
            if e.errno == 1:
                denied.append(family)
            else:
                other[f'{family}/{kind}'] = e.errno
a, b = socket.socketpair()
a.sendall(b'unix works')
pair = b.recv(100).decode()
try:
    socket.socketpair(socket.AF_INET)
    inet_pair = 'opened'
except OSError as e:
    inet_pair = e.errno
return [sorted(set(denied)), other, pair, inet_pair]
"""
    denied, other, pair, inet_pair = await data(hostile, "python", code)
    # AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK (40)... every family but AF_UNIX.
    assert denied == [f for f in range(2, 46)]
    # AF_UNIX: whatever the kernel says of each kind, never EPERM.
    assert set(other) == {"1/1", "1/2", "1/3"} and other["1/3"] != 1
    assert (pair, inet_pair) == ("unix works", 1)
    await healthy(hostile)


SOCKETS_JS = """
const net = require('net'), dgram = require('dgram');
const tcp = (host) => new Promise((ok) => {
  const s = net.connect(80, host);
  s.on('connect', () => ok('connected')); s.on('error', (e) => ok(e.code));
});
const udp = (kind) => new Promise((ok) => {
  try {
    const s = dgram.createSocket(kind);
    s.on('error', (e) => ok(e.code));
    s.bind(0, () => { ok('bound'); s.close() });
  } catch (e) { ok(e.code) }
});
const unix = await new Promise((ok) => {
  const server = net.createServer((c) => c.end('unix works'));
  server.listen('/tmp/s.sock', () => {
    const c = net.connect('/tmp/s.sock');
    let got = ''; c.on('data', (d) => { got += d }); c.on('end', () => { server.close(); ok(got) });
  });
});
return [await tcp('127.0.0.1'), await tcp('::1'), await udp('udp4'), await udp('udp6'), unix];
"""


@pytest.mark.parametrize("language", ["javascript", "typescript"])
async def test_node_gets_no_inet_socket_but_unix_ones_work(hostile: Service, language: str) -> None:
    assert await data(hostile, language, SOCKETS_JS) == ["EPERM"] * 4 + ["unix works"]
    await healthy(hostile)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the i386 and x32 ABIs of x86_64")
async def test_another_abi_on_the_same_cpu_is_denied_everything(hostile: Service) -> None:
    # getpid through int 0x80 (i386, call 20) and through the x32 numbering (39 | 1 << 30):
    # a filter written for x86_64's numbers must not be skipped this way.
    code = """
import ctypes, mmap
def run(machine_code):
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(machine_code)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    return ctypes.CFUNCTYPE(ctypes.c_int)(address)()
i386 = run(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))
x32 = run(bytes([0xb8, 39, 0, 0, 0x40, 0x0f, 0x05, 0xc3]))
import os
return [i386, x32, os.getpid() > 0]
"""
    assert await data(hostile, "python", code) == [-1, -1, True]  # -EPERM from both
    await healthy(hostile)


# -- no host path ----------------------------------------------------------------------------

LOOK = {
    "python": """
out = {}
for path in ('/proc/1/cmdline', '/proc/self/cmdline', '/proc/self/mountinfo',
             '/proc/1/mountinfo', '/proc/self/environ'):
    try:
        out[path] = open(path, 'rb').read().decode('latin-1')
    except OSError as e:
        out[path] = str(e)
import os
out['cwd'] = os.getcwd()
return out
""",
    "javascript": """
const fs = require('fs'), out = {};
for (const p of ['/proc/1/cmdline', '/proc/self/cmdline', '/proc/self/mountinfo',
                 '/proc/1/mountinfo', '/proc/self/environ']) {
  try { out[p] = fs.readFileSync(p, 'latin1') } catch (e) { out[p] = e.code }
}
out.cwd = process.cwd(); out.argv = process.argv.join(' '); out.execPath = process.execPath;
return out;
""",
}
LOOK["typescript"] = LOOK["javascript"].replace("out = {}", "out: any = {}")


@pytest.mark.parametrize("language", LANGUAGES)
async def test_no_host_path_is_visible(hostile: Service, runtime: Runtime, language: str) -> None:
    seen = await data(hostile, language, LOOK[language])
    assert "/proc/self/mountinfo" in seen and "/proc/1/cmdline" in seen
    text = json.dumps(seen)
    for host_path in (CHECKOUT, str(runtime.data_dir), str(Path.cwd())):
        assert host_path not in text, host_path
    assert "/cairn/run." in seen["/proc/1/cmdline"]  # the wrapper, by its path inside
    await healthy(hostile)


# -- esbuild ---------------------------------------------------------------------------------


@pytest.fixture
async def roomy(runtime: Runtime) -> AsyncIterator[Service]:
    """Large bodies allowed, little memory: what a transpile bomb needs."""
    async with start_service(runtime, CODE_MAX_SIZE="262144", RUN_MEMORY_MB="64") as service:
        yield service


async def test_an_esbuild_memory_bomb_is_stopped_at_the_run_memory_limit(roomy: Service) -> None:
    # Nested array literals: ~3.8 KB of esbuild memory per byte (250 KB reached 892 MiB).
    bomb = "[" * 40000 + "]" * 40000
    assert await failure(roomy, "typescript", bomb) == (
        "failed to run: TypeScript: memory limit of 64 MiB exceeded"
    )
    assert await data(roomy, "typescript", "return 'after' as string") == "after"
    await healthy(roomy)


async def test_an_esbuild_cpu_bomb_is_stopped_at_the_run_time_limit(runtime: Runtime) -> None:
    # Nested arrow functions: esbuild's time grows exponentially with the depth.
    async with start_service(runtime, RUN_TIMEOUT="1") as service:
        assert await failure(service, "typescript", "x=>" * 2000 + "1") == (
            "failed to run: TypeScript: timed out after 1 s"
        )
        await healthy(service)


async def test_typescript_over_the_size_cap_never_reaches_esbuild(hostile: Service) -> None:
    runner = hostile.host.runner
    assert runner is not None
    cap = runner.transpiler.max_bytes
    assert cap == 8192  # CODE_MAX_SIZE: the gateway refuses such a body first
    reply = await hostile.run_now("typescript", "x" * (cap + 1))
    assert (reply.status, reply.text) == (
        400,
        "request body is larger than CODE_MAX_SIZE (8192 bytes)",
    )
    # A runner host also refuses it, whoever sends it.
    with pytest.raises(Exception, match=r"^TypeScript: the code is larger than 8192 bytes$"):
        await runner.transpiler.transpile("x" * (cap + 1))
    await healthy(hostile)


async def test_run_now_bodies_leave_nothing_on_disk_and_stored_versions_do(
    hostile: Service, runtime: Runtime
) -> None:
    runner = hostile.host.runner
    assert runner is not None
    for n in range(5):
        assert await data(hostile, "typescript", f"return {n} as number") == n
    cache = runtime.data_dir / "functions" / "ts-cache"
    assert not list(cache.rglob("*.js"))
    await hostile.upload("kept", "typescript", "return 'kept' as string")
    reply = await hostile.post("/run/kept", {})
    assert reply.json()["data"] == "kept"
    assert len(list(cache.rglob("*.js"))) == 1
    await healthy(hostile)
