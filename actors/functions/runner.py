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
from collections.abc import Callable
from pathlib import Path

import attrs

from actors.functions.cgroups import CgroupSlot
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
    LAUNCH_FAILED,
    Runtimes,
    runtime_of,
    sandbox_argv,
)

log = logging.getLogger(__name__)

WRAPPERS = Path(__file__).resolve().parent / "sandboxed"
CHUNK = 65536
# After a kill, how long the pipes may take to close before we stop waiting for them.
DRAIN_AFTER_KILL_S = 2.0

LineSink = Callable[[str], None]


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
    result_read: int  # our end of the result pipe
    result_fd: int  # the number of its write end in the sandbox
    slot: CgroupSlot | None
    runtime: str

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None


class Sandbox:
    """Starts sandboxes and runs jobs in them with fixed limits and runtimes; safe to use from
    many tasks at once (each brings its own cgroup slot)."""

    def __init__(
        self,
        limits: SandboxLimits,
        runtimes: Runtimes | None = None,
        wrappers: Path = WRAPPERS,
    ) -> None:
        self.limits = limits
        self.runtimes = runtimes or Runtimes()
        self.wrappers = wrappers

    def argv(self, language: Language, slot: CgroupSlot | None) -> list[str]:
        return sandbox_argv(
            language,
            self.runtimes,
            self.limits,
            wrappers_host_dir=str(self.wrappers),
            cgroup_procs=slot.procs_files() if slot else [],
            memory_cgroup=bool(slot and slot.memory),
            pids_cgroup=bool(slot and slot.pids),
        )

    async def start(self, language: Language, slot: CgroupSlot | None = None) -> Started:
        """Start a sandbox for ``language``'s runtime that waits for its run. Raises OSError
        when it cannot."""
        read_fd, write_fd = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv(language, slot),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(write_fd,),
                # Its own process group: the sandbox's pid 1 (bwrap's reaper) stays in it, and
                # when that dies the kernel ends everything in the pid namespace.
                start_new_session=True,
                cwd="/",
                env={},  # bwrap's own reaper (pid 1 inside) shows its environment in /proc
            )
        except OSError:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        return Started(proc, read_fd, write_fd, slot, runtime_of(language))

    async def discard(self, started: Started) -> None:
        """Kill a started sandbox that will not run anything."""
        _kill_tree(started.proc, started.slot)
        await started.proc.wait()
        os.close(started.result_read)
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
            payload = stdin_payload(job, started.result_fd)
        except (ValueError, RecursionError):
            await self.discard(started)
            return RunFailure("input is not valid JSON")
        slot = started.slot
        oom_before = slot.oom_kills() if slot else 0
        run = _Run(started.proc, started.result_read, payload, self.limits, on_line, slot)
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


def _kill_tree(proc: asyncio.subprocess.Process, slot: CgroupSlot | None) -> None:
    """Kill a sandbox's whole tree at once. bwrap's --die-with-parent is not enough on its
    own: the sandbox's reaper can outlive the outer bwrap (the death signal is reset when it
    changes uid), and then it holds the pipes open."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGKILL)
    if slot is not None:
        slot.kill_all()


class _Run:
    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        result_fd: int,
        payload: bytes,
        limits: SandboxLimits,
        on_line: LineSink | None,
        slot: CgroupSlot | None,
    ) -> None:
        self.proc = proc
        self.slot = slot
        self.result_fd = result_fd
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

    async def wait(self) -> None:
        loop = asyncio.get_running_loop()
        result_reader = asyncio.StreamReader(limit=CHUNK)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(result_reader),
            os.fdopen(self.result_fd, "rb", buffering=0),
        )
        feeder = asyncio.create_task(self._feed())
        assert self.proc.stdout is not None and self.proc.stderr is not None
        work = [
            asyncio.create_task(self._pump(self.proc.stdout, keep=True)),
            asyncio.create_task(self._pump(self.proc.stderr, keep=False)),
            asyncio.create_task(self._collect(result_reader)),
            asyncio.create_task(self.proc.wait()),
        ]
        try:
            _, pending = await asyncio.wait(work, timeout=self.limits.timeout_s)
            if pending:
                self.timed_out = not self.output.exceeded
        finally:
            # Also on cancellation (the caller went away): nothing of the run may outlive it.
            feeder.cancel()
            if self.proc.returncode is None or not all(task.done() for task in work):
                self.kill()
                # Read the pipes to their end: asyncio only finishes a process (and closes
                # its pipes) once every pipe is at EOF.
                await asyncio.wait(work, timeout=DRAIN_AFTER_KILL_S)
            for task in work:
                task.cancel()
            transport.close()

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
        if oom_killed or "JavaScript heap out of memory" in stderr:
            return RunFailure(f"memory limit of {limits.memory_mib} MiB exceeded")
        stdout = b"".join(self.stdout).decode("utf-8", "replace")
        reported = from_channel(bytes(self.result), stdout)
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
