"""The mark cairn writes at `qm create` and the test every destructive step makes."""

from __future__ import annotations

from actors.vm.ownership import Claim, mark_line, marks, not_ours

TASK = "3f2a9c0d4e5b6a7f8091a2b3c4d5e6f7"


def test_the_mark_is_found_in_what_qm_config_prints() -> None:
    # `qm config` shows the description percent-encoded, with the newline each line gets back.
    assert marks({"description": f"created by cairn, install task {TASK}%0A"}) == {TASK}
    # The user's notes around it do not hide it.
    notes = f"web server%0Acreated by cairn, install task {TASK}%0Aowner%3A ops%0A"
    assert marks({"description": notes}) == {TASK}
    assert marks({}) == set()
    assert marks({"description": "created by cairn%0A"}) == set()
    assert mark_line(TASK) == f"created by cairn, install task {TASK}"


def test_a_vm_is_touched_only_under_its_own_installs_mark() -> None:
    mine = {"name": "web", "description": mark_line(TASK) + "%0A"}
    other = {"name": "gui-150"}
    another_install = {"name": "x", "description": mark_line("0" * 32)}
    assert not_ours(Claim(TASK), 150, "pve2", mine) is None
    assert not_ours(Claim(TASK), 150, "pve2", other) == (
        "VM 150 (gui-150) on node pve2 does not carry cairn's mark ('created by cairn, install "
        f"task {TASK}' in its description): it is not the VM cairn created, so cairn leaves it "
        "untouched"
    )
    assert "does not carry cairn's mark" in str(not_ours(Claim(TASK), 150, "pve2", another_install))
    # Not cairn's at all (adopted): never.
    assert not_ours(None, 150, "pve2", mine) == (
        "VM 150 (web) on node pve2 was not created by cairn; cairn leaves it untouched"
    )


def test_a_vm_installed_before_marks_is_cairns_by_its_event_log_alone() -> None:
    legacy = Claim(None)
    assert not_ours(legacy, 150, "pve1", {"name": "web"}) is None
    # ... unless it carries another install's mark: then it is someone else's newer VM.
    refused = not_ours(legacy, 150, "pve1", {"description": mark_line(TASK)})
    assert refused is not None and "carries the mark of another cairn install" in refused
