"""Read models the console needs and no service route offers yet, projected from the stored
events on each request (the console keeps nothing between requests).

* the stored functions: ``[{path, language, versions, latest}]`` from the registry's stream;
* one VM's details: what was installed or adopted, its changes since and its last task, from
  the VM's stream (the live power state comes from ``/api/vm/list``);
* a search database's documents: each file of its inbox that was indexed (with its chunks) or
  dismissed (with the reason), from the database's stream.

Each is a pure function over the records, so what it shows is tested without a server. They are
shaped like the service routes planned for the same data (``GET /functions``,
``GET /api/vm/<id>``), so the console's client module can switch to those when they exist.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from actors.functions.events import FunctionVersionStored
from actors.search.events import DocumentDismissed, DocumentIndexed, DocumentRemoved
from actors.vm.events import (
    Adopted,
    Disowned,
    Installed,
    Observed,
    Progress,
    Reconfigured,
    TaskEnded,
    TaskStarted,
)
from events.store import Recorded


def project_functions(records: Iterable[Recorded]) -> list[dict[str, Any]]:
    """Every stored function, by path: its versions oldest first, the latest one's language."""
    paths: dict[str, dict[str, Any]] = {}
    for record in records:
        event = record.event
        if not isinstance(event, FunctionVersionStored):
            continue
        entry = paths.setdefault(event.path, {"path": event.path, "versions": []})
        entry["versions"].append(event.version)
        entry.update(language=event.language, latest=event.version, size=event.size)
        entry["updated_at"] = record.recorded_at
    return [paths[path] for path in sorted(paths)]


def _task_summary(task: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in task.items() if v is not None}


def project_vm(vmid: int, records: Iterable[Recorded]) -> dict[str, Any] | None:
    """One VM as its events tell it, or None when there is none at this id (never one, or
    destroyed). The stream outlives a destroy: an id reused starts a new life at its install."""
    vm: dict[str, Any] | None = None
    task: dict[str, Any] | None = None
    for record in records:
        event = record.event
        if isinstance(event, TaskStarted):
            task = {
                "task": event.task,
                "command": event.command,
                "status": "running",
                "started_at": record.recorded_at,
            }
            if event.command == "install":
                vm = {"vmid": vmid, "state": event.working, "created_at": record.recorded_at}
            elif vm is not None:
                vm["state"] = event.working
        elif isinstance(event, Progress) and task is not None and task["task"] == event.task:
            task["last_message"] = event.message
        elif isinstance(event, TaskEnded):
            if task is not None and task["task"] == event.task:
                task.update(
                    status="done" if event.ok else "failed",
                    error=event.error,
                    ended_at=record.recorded_at,
                )
            if vm is not None:
                vm["state"] = event.state
        elif isinstance(event, Installed):
            vm = {
                **(vm or {"vmid": vmid, "created_at": record.recorded_at}),
                "name": event.name,
                "os": event.os,
                "version": event.version,
                "node": event.node,
                "user": event.user,
                "ip": event.ip,
                "cpu": event.cpu,
                "memory": event.ram,
                "disk": event.disk_gb,
                "created_by_cairn": True,
            }
        elif isinstance(event, Adopted):
            vm = {
                "vmid": vmid,
                "name": event.name,
                "os": event.os,
                "node": event.node,
                "ip": event.ip,
                "cpu": event.cpu,
                "memory": event.ram,
                "disk": event.disk_gb,
                "state": "running" if event.running else "stopped",
                "created_by_cairn": False,
                "created_at": None,
            }
        elif vm is not None and isinstance(event, Reconfigured):
            changed = {"cpu": event.cpu, "memory": event.ram, "disk": event.disk_gb}
            vm.update({k: v for k, v in changed.items() if v is not None})
            if event.node is not None:
                vm["node"] = event.node
        elif vm is not None and isinstance(event, Disowned):
            vm["created_by_cairn"] = False
        elif vm is not None and isinstance(event, Observed):
            vm["state"] = event.state
    if vm is None or vm.get("state") == "absent":
        return None
    return {**vm, "last_task": _task_summary(task) if task is not None else None}


def project_documents(records: Iterable[Recorded]) -> list[dict[str, Any]]:
    """The files of a database's inbox as indexing last left them, by name."""
    documents: dict[str, dict[str, Any]] = {}
    for record in records:
        event = record.event
        if isinstance(event, DocumentIndexed):
            documents[event.source] = {
                "source": event.source,
                "status": "indexed",
                "chunks": event.chunks,
                "at": record.recorded_at,
            }
        elif isinstance(event, DocumentDismissed):
            documents[event.source] = {
                "source": event.source,
                "status": "dismissed",
                "reason": event.reason,
                "at": record.recorded_at,
            }
        elif isinstance(event, DocumentRemoved):
            documents.pop(event.source, None)
    return [documents[source] for source in sorted(documents)]
