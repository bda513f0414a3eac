"""The VM service's journal lines (actors/journal.py): a task's end says what ended, how and
after how long; an install, a reconfiguration, an adoption and a disowning get a line each."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from actors.journal import JournalLines
from actors.vm.events import Adopted, Disowned, Installed, Reconfigured, TaskEnded, TaskStarted

if TYPE_CHECKING:
    from events.store import Recorded

_OPEN_TASKS_KEPT = 10_000


class TaskLines:
    """Remembers when each task started, so its end line says how long it took."""

    def __init__(self) -> None:
        # task id -> (command, started at). Bounded: a task whose start this process never
        # saw still gets a line.
        self._tasks: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def started(self, record: Recorded, event: TaskStarted) -> str | None:
        self._tasks[event.task] = (event.command, record.recorded_at)
        while len(self._tasks) > _OPEN_TASKS_KEPT:
            self._tasks.popitem(last=False)
        if event.command == "install":
            return None  # the install's end says it all; its start is the request's log line
        return f"{_vm(record)}: {event.command} started (task {event.task})"

    def ended(self, record: Recorded, event: TaskEnded) -> str:
        command, started = self._tasks.pop(event.task, ("task", record.recorded_at))
        took = _seconds(record.recorded_at - started)
        if event.ok:
            return f"{_vm(record)}: {command} done in {took}, now {event.state}"
        return f"{_vm(record)}: {command} failed after {took}, left {event.state}: {event.error}"


def journal_lines() -> JournalLines:
    """A fresh set of lines (each journal keeps its own open tasks)."""
    tasks = TaskLines()
    return JournalLines(
        {
            TaskStarted: tasks.started,
            TaskEnded: tasks.ended,
            Installed: _installed,
            Reconfigured: _reconfigured,
            Adopted: _adopted,
            Disowned: _disowned,
        }
    )


def _vm(record: Recorded) -> str:
    return "vm " + record.stream.partition(":")[2]


def _seconds(value: float) -> str:
    return f"{max(value, 0.0):.1f} s"


def _installed(record: Recorded, event: Installed) -> str:
    return (
        f"{_vm(record)}: installed {event.name!r} ({event.os} {event.version}) on {event.node}, "
        f"{event.cpu} vCPU, {event.ram} MiB, {event.disk_gb} GB, ip {event.ip}, user {event.user}"
    )


def _reconfigured(record: Recorded, event: Reconfigured) -> str:
    changes = [
        f"{name} {value}"
        for name, value in (
            ("cpu", event.cpu),
            ("memory", event.ram),
            ("disk GB", event.disk_gb),
            ("node", event.node),
        )
        if value is not None
    ]
    return f"{_vm(record)}: now {', '.join(changes) or 'unchanged'}"


def _adopted(record: Recorded, event: Adopted) -> str:
    return f"{_vm(record)}: found {event.name!r} on {event.node} (not installed by this cairn)"


def _disowned(record: Recorded, event: Disowned) -> str:
    return f"{_vm(record)}: not cairn's VM, left untouched: {event.reason}"
