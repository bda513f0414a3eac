"""One run of one function in the sandbox: spawn, feed, stream, cap, time out, kill, type.

The code and input go in on stdin; stdout and stderr come back line by line (each line can be
forwarded as it is printed); the return value comes back on fd 3. The run ends when the process
and every pipe are done, or when a limit is hit: then the whole tree is killed (bwrap dies, the
pid namespace goes with it, and the cgroup is swept).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import marshal
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs

from actors.functions import seccomp, supervise
from actors.functions.cgroups import Cgroups, CgroupSlot
from actors.functions.languages import Language
from actors.functions.limits import SandboxLimits
from actors.functions.results import (
    Outcome,
    RunFailure,
    from_channel,
    from_stdout,
    loads_strict,
)
from actors.functions.sandbox import (
    ACCOUNT_FILES,
    LAUNCH_FAILED,
    WRAPPER_DIR,
    WRAPPER_FILE,
    Descriptors,
    HostUser,
    Program,
    Runtimes,
    program_for,
    runtime_of,
    sandbox_argv,
)
from events.children import kill_child

log = logging.getLogger(__name__)

WRAPPERS = Path(__file__).resolve().parent / "sandboxed"
CHUNK = 65536
# After a kill, how long the pipes may take to close before we stop waiting for them.
DRAIN_AFTER_KILL_S = 2.0

LineSink = Callable[[str], None]
# V8's last words when its heap, or the memory under it, runs out.
V8_OOM = ("JavaScript heap out of memory", "Fatal process out of memory")
# The errors a runtime raises when the memory rlimit refuses an allocation.
REFUSED_MEMORY = (
    "MemoryError",
    "RangeError: Array buffer allocation failed",
    "RangeError: WebAssembly.Memory.grow(): Unable to grow instance memory",
    "RangeError: WebAssembly.Memory(): could not allocate memory",
)


@attrs.frozen
class RunJob:
    language: Language
    # Python or JavaScript source; for TypeScript the transpiled function expression.
    code: str
    input_json: str = "{}"


def stdin_payload(job: RunJob, result_fd: int) -> bytes:
    """What the wrapper reads on stdin: the code, the input and the descriptor of the result
    pipe. Raises ValueError when the input is not JSON."""
    if job.language is Language.PYTHON:
        # marshal is builtin in the sandbox (json would cost an import per run); the data is
        # ours, produced here from a value json parsed.
        return marshal.dumps((job.code, loads_strict(job.input_json), result_fd))
    loads_strict(job.input_json)
    transpiled = "true" if job.language is Language.TYPESCRIPT else "false"
    code = json.dumps(job.code)
    return (
        f'{{"fd":{result_fd},"transpiled":{transpiled},"code":{code},"input":{job.input_json}}}'
    ).encode()


@attrs.frozen
class ToolOutcome:
    """How a program other than a runtime (esbuild) ended in its sandbox."""

    returncode: int | None
    stdout: bytes
    stderr: str  # its last 4 KiB
    timed_out: bool
    output_exceeded: bool
    oom_killed: bool


class _Output:
    """Counts every byte the run produces against one cap."""

    def __init__(self, cap: int, over: Callable[[], None]) -> None:
        self.cap = cap
        self.total = 0
        self.exceeded = False
        self._over = over

    def take(self, size: int) -> bool:
        self.total += size
        if self.total > self.cap and not self.exceeded:
            self.exceeded = True
            self._over()
        return not self.exceeded


@attrs.define
class Started:
    """A sandbox started ahead of its run: its runtime has booted and waits on stdin."""

    proc: asyncio.subprocess.Process
    streams: _Streams
    slot: CgroupSlot | None
    runtime: str

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None


@attrs.define
class _Streams:
    """Our ends of a sandbox's stdout, stderr and (for a runtime) result pipes, read from the
    moment it starts (so nothing of this is left to do when its run is asked for), and the
    number the result pipe's write end has inside (the wrapper learns it on stdin)."""

    readers: list[asyncio.StreamReader]
    transports: list[asyncio.BaseTransport]
    result_fd: int = -1

    def close(self) -> None:
        for transport in self.transports:
            transport.close()


class Sandbox:
    """Starts sandboxes and runs jobs in them with fixed limits and runtimes; safe to use from
    many tasks at once (each brings its own cgroup slot)."""

    def __init__(
        self,
        limits: SandboxLimits,
        user: HostUser | None,
        runtimes: Runtimes | None = None,
        wrappers: Path = WRAPPERS,
    ) -> None:
        if user is None and os.geteuid() == 0:
            raise ValueError("a sandbox never runs as root: give it the host user to run as")
        self.limits = limits
        self.user = user
        self.runtimes = runtimes or Runtimes()
        # Read once: every sandbox gets the wrappers and the filter by content.
        self.files = {
            **{
                f"{WRAPPER_DIR}/{name}": (wrappers / name).read_bytes()
                for name in WRAPPER_FILE.values()
            },
            **{dest: text.encode() for dest, text in ACCOUNT_FILES.items()},
        }
        self.seccomp = seccomp.program()

    async def _spawn(
        self, program: Program, slot: CgroupSlot | None, *, result: bool
    ) -> tuple[asyncio.subprocess.Process, _Streams]:
        """Start ``program`` in a sandbox with fresh pipes, every one of them owned by the
        sandbox's user (so ``/dev/stdout`` and the like open inside). Raises OSError."""
        ours: list[int] = []
        theirs: list[int] = []
        passed: list[int] = []
        try:
            files = tuple(_data_fd(self.files[dest], passed) for dest in program.files)
            executable = None
            if program.executable is not None:
                executable = os.open(program.executable, os.O_RDONLY | os.O_CLOEXEC)
                passed.append(executable)
            given = Descriptors(files, executable, _data_fd(self.seccomp, passed))
            for _ in range(3 if result else 2):
                read_fd, write_fd = os.pipe()
                ours.append(read_fd)
                theirs.append(write_fd)
                if self.user is not None:
                    os.fchown(read_fd, self.user.uid, self.user.gid)
            argv = sandbox_argv(
                program,
                self.runtimes,
                self.limits,
                user=self.user,
                given=given,
                cgroup_procs=slot.procs_files() if slot else [],
                memory_cgroup=bool(slot and slot.memory),
                pids_cgroup=bool(slot and slot.pids),
            )
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=theirs[0],
                stderr=theirs[1],
                pass_fds=(*theirs[2:], *passed),
                # Its own process group: the sandbox's pid 1 (bwrap's reaper) stays in it, and
                # when that dies the kernel ends everything in the pid namespace.
                start_new_session=True,
                cwd="/",
                env={},  # bwrap's own reaper (pid 1 inside) shows its environment in /proc
            )
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in (*theirs, *passed):
                os.close(fd)
        assert proc.stdin is not None
        if self.user is not None:
            # Before anything is written: the code only runs once its stdin has arrived.
            stdin = proc.stdin.transport.get_extra_info("pipe")
            os.fchown(stdin.fileno(), self.user.uid, self.user.gid)
        streams = _Streams([], [], theirs[2] if result else -1)
        try:
            for fd in ours:
                reader, transport = await _reader(fd)  # the transport owns the pipe now
                streams.readers.append(reader)
                streams.transports.append(transport)
        except BaseException:
            for fd in ours[len(streams.transports) :]:
                os.close(fd)
            streams.close()
            _kill_tree(proc, slot)
            raise
        return proc, streams

    async def start(self, language: Language, slot: CgroupSlot | None = None) -> Started:
        """Start a sandbox for ``language``'s runtime that waits for its run. Raises OSError
        when it cannot."""
        program = program_for(language, self.runtimes, self.limits)
        proc, streams = await self._spawn(program, slot, result=True)
        return Started(proc, streams, slot, runtime_of(language))

    async def discard(self, started: Started) -> None:
        """Kill a started sandbox that will not run anything."""
        _kill_tree(started.proc, started.slot)
        await started.proc.wait()
        started.streams.close()
        if started.slot is not None:
            await started.slot.empty()

    async def run(
        self,
        job: RunJob,
        *,
        slot: CgroupSlot | None = None,
        on_line: LineSink | None = None,
        started: Started | None = None,
        empty_slot: bool = True,
    ) -> Outcome:
        """Run ``job`` in ``started`` (or in a sandbox started now), then empty the slot
        (unless the caller will before reusing it)."""
        if started is not None and (
            not started.alive or started.runtime != runtime_of(job.language)
        ):
            await self.discard(started)
            slot, started = started.slot, None
        if started is None:
            try:
                started = await self.start(job.language, slot)
            except OSError as exc:
                return RunFailure(f"sandbox failed to start: {exc}")
        try:
            payload = stdin_payload(job, started.streams.result_fd)
        except (ValueError, RecursionError):
            await self.discard(started)
            return RunFailure("input is not valid JSON")
        slot = started.slot
        oom_before = slot.oom_kills() if slot else 0
        watch = supervise.Watch.of(self.limits, memory_cgroup=bool(slot and slot.memory))
        run = _Run(started.proc, started.streams, payload, self.limits, on_line, slot, watch)
        try:
            await run.wait()
        finally:
            # The run's tree is dead once its pipes are closed (its pid namespace went with
            # it); the sweep that makes sure of it may come after the answer when the
            # caller empties the slot before its next use (the runner host does).
            if slot is not None and empty_slot:
                await slot.empty()
        oom_killed = slot is not None and slot.oom_kills() > oom_before
        return run.outcome(oom_killed=oom_killed, limits=self.limits)

    async def run_tool(
        self, program: Program, stdin: bytes, *, slot: CgroupSlot | None, output_cap: int
    ) -> ToolOutcome:
        """Run a program other than a runtime under the same sandbox and limits as a run,
        with its own cap on what it prints. Raises OSError when it cannot start."""
        proc, streams = await self._spawn(program, slot, result=False)
        oom_before = slot.oom_kills() if slot else 0
        limits = attrs.evolve(self.limits, output_bytes=output_cap)
        watch = supervise.Watch.of(limits, memory_cgroup=bool(slot and slot.memory))
        run = _Run(proc, streams, stdin, limits, None, slot, watch)
        try:
            await run.wait()
        finally:
            if slot is not None:
                await slot.empty()
        return ToolOutcome(
            returncode=proc.returncode,
            stdout=b"".join(run.stdout),
            stderr=run.stderr_tail.decode("utf-8", "replace"),
            timed_out=run.timed_out,
            output_exceeded=run.output.exceeded,
            oom_killed=run.limit == supervise.MEMORY
            or (slot is not None and slot.oom_kills() > oom_before),
        )


# Runs a program in a sandbox of its own: (program, stdin, output cap) -> how it ended.
ToolRunner = Callable[[Program, bytes, int], Awaitable[ToolOutcome]]


def tool_runner(sandbox: Sandbox, cgroups: Callable[[], Cgroups | None]) -> ToolRunner:
    """Runs programs in ``sandbox``, each in fresh groups of ``cgroups()`` (when there are
    any), removed after it."""

    async def run(program: Program, stdin: bytes, output_cap: int) -> ToolOutcome:
        groups = cgroups()
        slot = groups.new_slot() if groups is not None else None
        try:
            return await sandbox.run_tool(program, stdin, slot=slot, output_cap=output_cap)
        finally:
            if groups is not None and slot is not None:
                groups.retire(slot)

    return run


async def _reader(fd: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=CHUNK)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    return reader, transport


def _data_fd(data: bytes, opened: list[int]) -> int:
    """A descriptor to read ``data`` from, once, from its start (bwrap reads it to its end);
    added to ``opened``, which the caller closes."""
    fd = os.memfd_create("cairn-data")
    opened.append(fd)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _kill_tree(proc: asyncio.subprocess.Process, slot: CgroupSlot | None) -> None:
    """Kill a sandbox's whole tree at once. bwrap's --die-with-parent is not enough on its
    own: the sandbox's reaper can outlive the outer bwrap (the death signal is reset when it
    changes uid), and then it holds the pipes open."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    kill_child(proc)  # not proc.send_signal: its poll would reap the child (events/children.py)
    if slot is not None:
        slot.kill_all()
    _reap(proc)


# Waits for killed sandboxes nobody else waits for (a cancelled spawn or run, a stop).
_REAPING: set[asyncio.Task[int]] = set()


def _reap(proc: asyncio.subprocess.Process) -> None:
    """Keep ``proc`` until asyncio's child watcher has seen it exit. A process object dropped
    before that is closed by the garbage collector, whose ``poll()`` reaps the child behind the
    watcher's back (asyncio then logs "Unknown child process pid …, will report returncode
    255"). Signals go by pid for the same reason (events/children.py)."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(RuntimeError):  # no running loop: nothing to keep it for
        task = asyncio.get_running_loop().create_task(proc.wait())
        _REAPING.add(task)
        task.add_done_callback(_REAPING.discard)


class _Run:
    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        streams: _Streams,
        payload: bytes,
        limits: SandboxLimits,
        on_line: LineSink | None,
        slot: CgroupSlot | None,
        watch: supervise.Watch | None = None,
    ) -> None:
        self.proc = proc
        self.slot = slot
        self.watch = watch
        # The limit the supervisor killed the run at (supervise.MEMORY or FILES), if any.
        self.limit: str | None = None
        self.streams = streams
        self.payload = payload
        self.limits = limits
        self.on_line = on_line
        self.output = _Output(limits.output_bytes, self.kill)
        self.stdout: list[bytes] = []
        self.stderr_tail = b""
        self.result = bytearray()
        self.timed_out = False

    def kill(self) -> None:
        _kill_tree(self.proc, self.slot)

    def _over(self, reason: str) -> None:
        self.limit = reason
        self.kill()

    async def wait(self) -> None:
        readers = self.streams.readers
        feeder = asyncio.create_task(self._feed())
        watcher = None
        if self.watch is not None:
            watching = supervise.supervise(self.proc.pid, self.watch, self._over)
            watcher = asyncio.create_task(watching)
        work = [
            asyncio.create_task(self._pump(readers[0], keep=True)),
            asyncio.create_task(self._pump(readers[1], keep=False)),
            *[asyncio.create_task(self._collect(reader)) for reader in readers[2:]],
            asyncio.create_task(self.proc.wait()),
        ]
        try:
            _, pending = await asyncio.wait(work, timeout=self.limits.timeout_s)
            if pending:
                self.timed_out = not self.output.exceeded
        finally:
            # Also on cancellation (the caller went away): nothing of the run may outlive it.
            feeder.cancel()
            if watcher is not None:
                watcher.cancel()
            if self.proc.returncode is None or not all(task.done() for task in work):
                self.kill()
                # Read the pipes to their end: what the tree printed before it died still
                # counts, and a pipe whose writers are all dead ends at once.
                await asyncio.wait(work, timeout=DRAIN_AFTER_KILL_S)
            for task in work:
                task.cancel()
            self.streams.close()

    async def _feed(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            with contextlib.suppress(ConnectionError):
                stdin.write(self.payload)
                await stdin.drain()
        finally:
            stdin.close()  # the wrapper reads to EOF: it must come whatever happened

    async def _pump(self, stream: asyncio.StreamReader, *, keep: bool) -> None:
        pending = b""
        while chunk := await stream.read(CHUNK):
            if not self.output.take(len(chunk)):
                continue  # over the cap: the run is being killed; drain to EOF
            if keep:
                self.stdout.append(chunk)
            else:
                self.stderr_tail = (self.stderr_tail + chunk)[-4096:]
            if self.on_line is not None:
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    self.on_line(line.decode("utf-8", "replace"))
        if self.on_line is not None and pending:
            self.on_line(pending.decode("utf-8", "replace"))

    async def _collect(self, reader: asyncio.StreamReader) -> None:
        while chunk := await reader.read(CHUNK):
            if self.output.take(len(chunk)):
                self.result += chunk

    def _last_stderr_line(self) -> str:
        for line in reversed(self.stderr_tail.decode("utf-8", "replace").splitlines()):
            if line.strip():
                return line.strip()
        return ""

    def outcome(self, *, oom_killed: bool, limits: SandboxLimits) -> Outcome:
        code = self.proc.returncode
        if self.timed_out:
            return RunFailure(f"timed out after {limits.timeout_s:g} s")
        if self.output.exceeded:
            return RunFailure(f"output limit of {limits.output_bytes} bytes exceeded")
        stderr = self.stderr_tail.decode("utf-8", "replace")
        memory = RunFailure(f"memory limit of {limits.memory_mib} MiB exceeded")
        if self.limit == supervise.FILES:
            return RunFailure(f"tmpfs limit of {limits.tmpfs_files} files exceeded")
        if oom_killed or self.limit == supervise.MEMORY or any(m in stderr for m in V8_OOM):
            return memory
        stdout = b"".join(self.stdout).decode("utf-8", "replace")
        reported = from_channel(bytes(self.result), stdout)
        if isinstance(reported, RunFailure) and reported.message.startswith(REFUSED_MEMORY):
            # The code did not catch a refused allocation: it ended at the memory limit (an
            # rlimit refuses where a cgroup's OOM killer kills; one message either way).
            return memory
        if reported is not None:
            return reported
        if code == 0:
            return from_stdout(stdout)
        if code == LAUNCH_FAILED and not stdout:
            return RunFailure(f"sandbox failed to start: {self._last_stderr_line()}")
        return RunFailure(_exit_message(code, self._last_stderr_line()))


def _exit_message(code: int | None, last_line: str) -> str:
    # bwrap reports a child killed by signal N as status 128 + N.
    signum = -code if code is not None and code < 0 else (code - 128 if code and code > 128 else 0)
    if signum == signal.SIGXCPU:
        text = "CPU time limit exceeded"
    elif signum == signal.SIGXFSZ:
        text = "file size limit exceeded"
    elif signum:
        name = signal.Signals(signum).name if signum in signal.valid_signals() else str(signum)
        text = f"killed by signal {name}"
    else:
        text = f"exited with status {code}"
    return f"{text}: {last_line}" if last_line else text
