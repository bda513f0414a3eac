"""Waiting for a PVE task (UPID) to end: its status polled, as PVE's own clients do.

The status is polled on the node the UPID names (a migration's task lives on its source node);
the log is read along the way so its lines can be streamed. While waiting, a `no such task`
(the log file not there yet), a 5xx and a 59x are retried: the task runs on regardless, and
the operation is never dispatched again because a poll failed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import attrs

from actors.vm.pveapi import errors
from actors.vm.pveapi.client import PveClient
from actors.vm.pveapi.wire import parse_upid, task_ok, task_warnings

# Poll quickly at first (most tasks of a simulator or a small VM end within a second), then
# settle at BPG's and proxmoxer's 1 s.
DEFAULT_SCHEDULE: tuple[float, ...] = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.7, 1.0)
MAX_POLL_ERRORS = 30  # consecutive failed polls before giving up on the task's fate


@attrs.frozen
class TaskOutcome:
    upid: str
    exitstatus: str
    log: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return task_ok(self.exitstatus)

    @property
    def warnings(self) -> int:
        return task_warnings(self.exitstatus)


class TaskLost(errors.ApiError):
    """The task's fate could not be learnt: it may still run, or have ended either way."""


async def wait_task(
    client: PveClient,
    upid: str,
    *,
    on_line: Callable[[str], None] | None = None,
    timeout: float = 3600.0,
    schedule: Sequence[float] = DEFAULT_SCHEDULE,
) -> TaskOutcome:
    node = parse_upid(upid).node
    base = f"/nodes/{node}/tasks/{upid}"
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    failures = 0
    poll = 0
    while True:
        try:
            status = await client.get(f"{base}/status")
            if on_line is not None:
                await _read_log(client, base, lines, on_line)
            failures = 0
        except errors.ApiError as exc:
            transient = exc.retryable or exc.status >= 500 or "no such task" in exc.detail
            failures += 1
            if not transient or isinstance(exc, errors.FingerprintMismatch):
                raise
            if failures > MAX_POLL_ERRORS:
                raise TaskLost(exc.status, f"lost track of task {upid}: {exc.text}") from None
            status = None
        if status is not None and status.get("status") == "stopped":
            await _read_log(client, base, lines, on_line)
            exitstatus = str(status.get("exitstatus") or "unexpected status")
            # The last line is PVE's own `TASK OK`/`TASK ERROR: ...`; callers want the work's.
            body = [
                ln for ln in lines if not ln.startswith(("TASK OK", "TASK ERROR", "TASK WARNINGS"))
            ]
            return TaskOutcome(upid, exitstatus, tuple(body))
        if time.monotonic() > deadline:
            raise TaskLost(0, f"task {upid} did not end within {timeout:g}s")
        await asyncio.sleep(schedule[min(poll, len(schedule) - 1)])
        poll += 1


async def _read_log(
    client: PveClient, base: str, lines: list[str], on_line: Callable[[str], None] | None
) -> None:
    """Append the log lines not read yet (`start` is 0-based, `limit=0` means all)."""
    got = await client.get(f"{base}/log", {"start": len(lines), "limit": 0})
    for entry in got or []:
        text = str(entry.get("t", ""))
        if int(entry.get("n", 0)) <= len(lines) or (text == "no content" and not lines):
            continue
        lines.append(text)
        if on_line is not None and not text.startswith(("TASK OK", "TASK ERROR", "TASK WARN")):
            on_line(text)
