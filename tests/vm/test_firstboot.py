"""What an install sends a guest beyond cairn's init script: the packages at the init script's
end, and the caller's script's output as capped stream notes."""

from __future__ import annotations

from actors.vm.firstboot import LINE_MAX, OUTPUT_MAX, Output, shaped, with_packages
from actors.vm.pve import Hardware, NewDisk
from actors.vm.shape import GuestShape


def test_packages_are_installed_by_the_init_scripts_own_function() -> None:
    script = "#!/bin/bash\nset -euo pipefail\nlog done\n"
    assert with_packages(script, ()) == script
    sent = with_packages(script, ("nginx", "libc6+x"))
    assert sent.startswith(script.rstrip() + "\n")
    assert "\ninstall_pkg nginx libc6+x\n" in sent


def test_the_output_shown_is_capped_and_long_lines_are_cut() -> None:
    notes: list[str] = []
    out = Output(notes.append)
    out.line("x" * (LINE_MAX + 10))
    assert notes == [f"script: {'x' * LINE_MAX} [...]"]
    for _ in range(OUTPUT_MAX // 100 + 5):
        out.line("y" * 99)
    assert out.cut and notes[-1] == f"script output beyond {OUTPUT_MAX} bytes is not shown"
    shown = len(notes)
    out.line("more")
    assert len(notes) == shown  # nothing after the cut
    assert sum(len(n) - len("script: ") for n in notes[:-1]) <= OUTPUT_MAX + LINE_MAX


def test_the_hardware_takes_the_shape_and_keeps_the_mark_under_the_notes() -> None:
    base = Hardware(
        "web", 2, "kvm64", 2048, None, "debian", "created by cairn, install task t", "vmbr0"
    )
    assert shaped(base, GuestShape()) == base
    shape = GuestShape(bridge="vmbr1", vlan=7, tags=("web",), description="notes\n",
                       disks=(NewDisk("fast", 8),))  # fmt: skip
    hw = shaped(base, shape)
    assert hw.net0() == "virtio,bridge=vmbr1,tag=7"
    assert hw.description == "notes\ncreated by cairn, install task t"
    assert hw.options()["scsi1"] == "fast:8" and hw.options()["tags"] == "debian;web"
