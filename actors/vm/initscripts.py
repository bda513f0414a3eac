"""The guest init scripts, one per OS version, rendered from one template per family.

A script is piped to `bash -s` on the guest and read by people at `/sh/<os>_<version>.sh`,
so each must be whole: it cannot source a shared library. The versions of one family differ
only in the title of their header and the name they are served under, so the rest lives once
in `sh/templates/<family>.sh.in` (`@TITLE@` and `@NAME@` mark the two places) and the table
below names the family and title of each version. Debian and Ubuntu share apt; Rocky Linux
uses dnf. The VM service writes the rendered scripts into its data directory at start-up and
serves and runs them from there; `python -m actors.vm.initscripts debian_12.sh` prints one.
"""

from __future__ import annotations

import sys
from pathlib import Path

from actors.vm.osimages import MATRIX, script_name
from events import resources
from events.files import write_atomically

TEMPLATES_DIR = resources.init_scripts() / "templates"

FAMILIES = {"debian": "debian", "ubuntu": "debian", "rockylinux": "rockylinux"}

TITLES = {
    ("debian", "11"): "Debian 11 (bullseye)",
    ("debian", "12"): "Debian 12 (bookworm)",
    ("debian", "13"): "Debian 13 (trixie)",
    ("ubuntu", "20.04"): "Ubuntu 20.04 LTS (focal)",
    ("ubuntu", "22.04"): "Ubuntu 22.04 LTS (jammy)",
    ("ubuntu", "24.04"): "Ubuntu 24.04 LTS (noble)",
    ("rockylinux", "8"): "Rocky Linux 8",
    ("rockylinux", "9"): "Rocky Linux 9",
    ("rockylinux", "10"): "Rocky Linux 10",
}


def template(family: str) -> str:
    return (TEMPLATES_DIR / f"{family}.sh.in").read_text()


def render(os_name: str, version: str) -> str:
    text = template(FAMILIES[os_name])
    return text.replace("@TITLE@", TITLES[(os_name, version)]).replace(
        "@NAME@", script_name(os_name, version)
    )


def rendered() -> dict[str, str]:
    """Every script of the OS matrix: file name -> text."""
    return {script_name(o, v): render(o, v) for o, versions in MATRIX.items() for v in versions}


def write_scripts(directory: Path) -> Path:
    """Write every script into `directory` (made if missing) and remove any other `*.sh` there,
    so what is served and run is exactly the matrix. A file whose text is already right is left
    alone: its modification time, and so the ETag a browser holds, stays valid across restarts.
    """
    directory.mkdir(parents=True, exist_ok=True)
    scripts = rendered()
    for path in directory.glob("*.sh"):
        if path.name not in scripts:
            path.unlink()
    for name, text in scripts.items():
        path = directory / name
        if path.is_file() and path.read_text() == text:
            continue
        write_atomically(path, text)
    return directory


def main(argv: list[str]) -> int:
    scripts = rendered()
    if len(argv) != 1 or argv[0] not in scripts:
        print(f"usage: python -m actors.vm.initscripts {{{','.join(sorted(scripts))}}}")
        return 2
    sys.stdout.write(scripts[argv[0]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
