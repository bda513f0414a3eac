"""The console's read models, from event histories as the actors record them."""

from __future__ import annotations

from actors.functions.events import version_stored
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
from events.model import Event
from events.store import Recorded
from gateway.console.readmodels import project_documents, project_functions, project_vm


def history(*events: Event, stream: str = "vm:150") -> list[Recorded]:
    return [Recorded(i, stream, i, e, 1000.0 + i) for i, e in enumerate(events, start=1)]


INSTALL = (
    TaskStarted(task="t1", command="install", working="installing"),
    Progress(task="t1", step="preparation > checking VMID", status="success", message="[+] ok"),
    Installed(
        task="t1", node="pve1", name="web", os="debian", version="12", user="deploy",
        ip="10.0.0.150", cpu=2, ram=2048, disk_gb=16, marked=True,
    ),
    TaskEnded(task="t1", ok=True, state="running"),
)  # fmt: skip


def test_an_installed_vm_then_stopped_and_resized() -> None:
    vm = project_vm(
        150,
        history(
            *INSTALL,
            TaskStarted(task="t2", command="stop", working="stopping"),
            TaskEnded(task="t2", ok=True, state="stopped"),
            TaskStarted(task="t3", command="set/cpu", working="resizing"),
            Reconfigured(task="t3", cpu=4, ram=4096),
            TaskEnded(task="t3", ok=True, state="stopped"),
        ),
    )
    assert vm == {
        "vmid": 150,
        "state": "stopped",
        "created_at": 1001.0,
        "name": "web",
        "os": "debian",
        "version": "12",
        "node": "pve1",
        "user": "deploy",
        "ip": "10.0.0.150",
        "cpu": 4,
        "memory": 4096,
        "disk": 16,
        "created_by_cairn": True,
        "last_task": {
            "task": "t3",
            "command": "set/cpu",
            "status": "done",
            "started_at": 1007.0,
            "ended_at": 1009.0,
        },
    }


def test_a_task_in_progress_shows_its_latest_record() -> None:
    vm = project_vm(
        150,
        history(
            *INSTALL,
            TaskStarted(task="t2", command="reboot", working="rebooting"),
            Progress(task="t2", step="reboot > rebooting VM", status="processing", message="[*] x"),
        ),
    )
    assert vm is not None
    assert vm["state"] == "rebooting"
    assert vm["last_task"] == {
        "task": "t2",
        "command": "reboot",
        "status": "running",
        "started_at": 1005.0,
        "last_message": "[*] x",
    }


def test_a_destroyed_vm_is_gone_and_its_id_starts_a_new_life() -> None:
    destroyed = (
        *INSTALL,
        TaskStarted(task="t2", command="destroy", working="destroying"),
        TaskEnded(task="t2", ok=True, state="absent"),
    )
    assert project_vm(150, history(*destroyed)) is None
    again = project_vm(
        150,
        history(
            *destroyed,
            TaskStarted(task="t3", command="install", working="installing"),
            TaskEnded(task="t3", ok=False, state="absent", error="no storage"),
        ),
    )
    assert again is None  # a failed install removes what it built
    third = project_vm(
        150,
        history(
            *destroyed,
            TaskStarted(task="t4", command="install", working="installing"),
            Installed(
                task="t4", node="pve2", name="db", os="ubuntu", version="24.04", user="ubuntu",
                ip="10.0.0.150", cpu=1, ram=1024, disk_gb=20,
            ),
            TaskEnded(task="t4", ok=True, state="running"),
        ),
    )  # fmt: skip
    assert third is not None
    assert (third["name"], third["node"], third["created_at"]) == ("db", "pve2", 1007.0)


def test_a_vm_cairn_did_not_create() -> None:
    adopted = Adopted(
        node="pve3", name="legacy", os="", running=True, cpu=1, ram=512, disk_gb=8, ip=""
    )
    vm = project_vm(150, history(adopted, Observed(state="stopped")))
    assert vm is not None
    assert (vm["created_by_cairn"], vm["state"], vm["last_task"]) == (False, "stopped", None)
    disowned = project_vm(150, history(*INSTALL, Disowned(task="t9", reason="no mark")))
    assert disowned is not None and disowned["created_by_cairn"] is False


def test_no_history_is_no_vm() -> None:
    assert project_vm(150, []) is None


def test_functions_by_path_with_their_versions() -> None:
    records = history(
        version_stored("b", 10, "python", "0" * 64, 5),
        version_stored("a/x", 11, "javascript", "1" * 64, 6),
        version_stored("b", 12, "typescript", "2" * 64, 7),
        stream="functions:registry",
    )
    assert project_functions(records) == [
        {"path": "a/x", "versions": [11], "language": "javascript", "latest": 11, "size": 6,
         "updated_at": 1002.0},
        {"path": "b", "versions": [10, 12], "language": "typescript", "latest": 12, "size": 7,
         "updated_at": 1003.0},
    ]  # fmt: skip


def test_documents_as_indexing_last_left_them() -> None:
    def indexed(source: str, chunks: int) -> DocumentIndexed:
        return DocumentIndexed(
            db="notes", source=source, sha256="0" * 64, chunks=chunks, embedded=chunks, retired=0
        )

    records = history(
        indexed("b.md", 3),
        indexed("a.txt", 1),
        DocumentDismissed(db="notes", source="c.exe", reason="unsupported file type '.exe'"),
        indexed("b.md", 5),  # edited: indexed again
        indexed("gone.txt", 2),
        DocumentRemoved(db="notes", source="gone.txt", retired=2),
        stream="search:notes",
    )
    assert project_documents(records) == [
        {"source": "a.txt", "status": "indexed", "chunks": 1, "at": 1002.0},
        {"source": "b.md", "status": "indexed", "chunks": 5, "at": 1004.0},
        {"source": "c.exe", "status": "dismissed", "reason": "unsupported file type '.exe'",
         "at": 1003.0},
    ]  # fmt: skip
