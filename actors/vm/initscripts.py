"""The nine init scripts in `sh/`, rendered from one template.

Each script is served as a standalone file (`/sh/<os>_<version>.sh`) and piped to `bash -s`
on the guest, so it cannot source a shared library; instead every file is generated from the
template below, and a test keeps the committed files equal to what it renders. After a change
here, write them anew with `python -m actors.vm.initscripts`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from actors.vm.osimages import MATRIX, script_name

SCRIPTS_DIR = Path(__file__).resolve().parents[2] / "sh"

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

_APT = """\
pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
install_pkg() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$@"
}
"""

_DNF = """\
pkg_installed() { rpm -q "$1" >/dev/null 2>&1; }
install_pkg() { dnf install -y -q "$@"; }
"""

PACKAGE_TOOLS = {"debian": _APT, "ubuntu": _APT, "rockylinux": _DNF}

_TEMPLATE = """\
#!/usr/bin/env bash
# cairn init script for {title} cloud images.
#
# cairn runs it once as root over SSH (`sudo -n bash -s`, script on stdin) after the first boot;
# it is also served at /sh/{name}. It is safe to run again: every step checks first.
# It changes only what a VM managed by cairn needs:
#   - the QEMU guest agent, so Proxmox can see the guest and shut it down cleanly;
#   - root's password, only if VM_ROOT_PASSWORD is set in the environment (read from the
#     environment, never from the command line, and handed to chpasswd on stdin).
# Mirrors, time zone, firewall and ICMP settings are left as the image ships them.
set -euo pipefail

log() {{ printf 'cairn-init: %s\\n' "$*"; }}

{package_tools}
# cloud-init's first boot may still hold the package manager's lock.
if command -v cloud-init >/dev/null 2>&1; then
  cloud-init status --wait >/dev/null 2>&1 || true
fi

if pkg_installed qemu-guest-agent; then
  log "qemu-guest-agent already installed"
else
  log "installing qemu-guest-agent"
  install_pkg qemu-guest-agent
fi
if command -v systemctl >/dev/null 2>&1; then
  # The unit is started by udev once the virtio port exists; enabling may be a no-op.
  systemctl enable qemu-guest-agent >/dev/null 2>&1 || true
  systemctl start qemu-guest-agent >/dev/null 2>&1 || true
fi

if [ -n "${{VM_ROOT_PASSWORD:-}}" ]; then
  log "setting the root password"
  printf 'root:%s\\n' "$VM_ROOT_PASSWORD" | chpasswd
fi

log "done"
"""


def render(os_name: str, version: str) -> str:
    return _TEMPLATE.format(
        title=TITLES[(os_name, version)],
        name=script_name(os_name, version),
        package_tools=PACKAGE_TOOLS[os_name],
    )


def rendered() -> dict[str, str]:
    """Every script of the OS matrix: file name -> text."""
    return {script_name(o, v): render(o, v) for o, versions in MATRIX.items() for v in versions}


def main() -> int:
    for name, text in rendered().items():
        (SCRIPTS_DIR / name).write_text(text)
        print(f"wrote sh/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
