"""The nine init scripts in `sh/`, rendered from one template.

Each script is served as a standalone file (`/sh/<os>_<version>.sh`) and piped to `bash -s`
on the guest, so it cannot source a shared library; instead every file is generated from the
template below, and a test keeps the committed files equal to what it renders. After a change
here, write them anew with `python -m actors.vm.initscripts`.
"""

from __future__ import annotations

import sys

from actors.vm.osimages import MATRIX, script_name
from events import resources

SCRIPTS_DIR = resources.init_scripts()

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

# The package tools run through `quietly` (see the template): output kept in a log, retried
# while another apt or dpkg holds a lock.
_APT = """\
pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
# apt fails at once when another apt or dpkg holds one of its locks (the lists lock for
# `update`, the dpkg frontend and dpkg locks for `install`); these are its words for that.
LOCKED='Could not get lock|Unable to lock|Unable to acquire the dpkg frontend lock'
LOCKED="$LOCKED|is another process using it"
install_pkg() {
  export DEBIAN_FRONTEND=noninteractive
  quietly apt-get update -q -o Dpkg::Use-Pty=0
  quietly apt-get install -q -y -o Dpkg::Use-Pty=0 --no-install-recommends "$@"
}
"""

_DNF = """\
pkg_installed() { rpm -q "$1" >/dev/null 2>&1; }
# dnf waits for another dnf by itself; these are its and rpm's words when it does not.
LOCKED='can.t create transaction lock|database is locked|Failed to obtain the transaction lock'
install_pkg() { quietly dnf install -y -q "$@"; }
"""

PACKAGE_TOOLS = {"debian": _APT, "ubuntu": _APT, "rockylinux": _DNF}

_TEMPLATE = """\
#!/usr/bin/env bash
# cairn init script for {title} cloud images.
#
# cairn runs it once as root over SSH (`sudo -n bash -s`, script on stdin) after the first boot;
# it is also served at /sh/{name}. It is safe to run again: every step checks first, and a
# second run changes nothing.
# It changes only what a VM managed by cairn needs:
#   - the QEMU guest agent, so Proxmox can see the guest and shut it down cleanly;
#   - root's password, only if VM_ROOT_PASSWORD is set in the environment (read from the
#     environment, never from the command line, and handed to chpasswd on stdin) and only if
#     root's password is not that one already.
# Mirrors, time zone, firewall and ICMP settings are left as the image ships them.
# On a fresh cloud VM another package manager (cloud-init, apt-daily, unattended-upgrades) may
# hold the package locks: the script waits for them, at most LOCK_WAIT seconds in all.
set -euo pipefail

LOCK_WAIT=600
log() {{ printf 'cairn-init: %s\\n' "$*"; }}
{package_tools}
# The package tools' output (dpkg's progress, debconf's notes) goes to a log that is shown
# only when they fail. While the failure is another process holding a lock, wait and retry.
# Warnings of a command that succeeded (apt-get update exits 0 when a mirror is unreachable)
# are kept and shown with a later failure, which they may explain.
PM_LOG=$(mktemp)
PM_WARNINGS=$(mktemp)
trap 'rm -f "$PM_LOG" "$PM_WARNINGS"' EXIT
deadline=$((SECONDS + LOCK_WAIT))
quietly() {{
  local status told=-1
  while :; do
    status=0
    "$@" >"$PM_LOG" 2>&1 </dev/null || status=$?
    if [ "$status" -eq 0 ]; then
      grep -E '^(W|E|Warning|Error):' "$PM_LOG" >>"$PM_WARNINGS" || true
      return 0
    fi
    if ! grep -Eq "$LOCKED" "$PM_LOG"; then
      log "$1 failed with status $status:" >&2
      cat "$PM_WARNINGS" >&2
      tail -n 20 "$PM_LOG" >&2
      return "$status"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "gave up after $LOCK_WAIT s waiting for another package manager:" >&2
      grep -E "$LOCKED" "$PM_LOG" | tail -n 3 >&2
      return "$status"
    fi
    if [ "$told" -lt 0 ] || [ $((SECONDS - told)) -ge 30 ]; then
      log "waiting for another package manager to finish ($((deadline - SECONDS)) s left):" \\
        "$(grep -E "$LOCKED" "$PM_LOG" | head -n 1)"
      told=$SECONDS
    fi
    sleep 2
  done
}}

# Whether root's password already is VM_ROOT_PASSWORD: the stored crypt(3) hash recomputed
# with its own salt (by perl, Debian's and Ubuntu's essential perl-base, else Python).
# Without either, or with a hash method the libc cannot compute, the answer is "no".
root_password_is_set() {{
  local hash py
  hash=$(getent shadow root 2>/dev/null | cut -d: -f2) || return 1
  case "$hash" in '' | '!'* | '*'*) return 1 ;; esac
  if command -v perl >/dev/null 2>&1; then
    CAIRN_HASH=$hash perl -e \\
      'my $h = crypt($ENV{{VM_ROOT_PASSWORD}}, $ENV{{CAIRN_HASH}});
       exit(defined $h && $h eq $ENV{{CAIRN_HASH}} ? 0 : 1)'
    return
  fi
  for py in python3 /usr/libexec/platform-python; do
    if command -v "$py" >/dev/null 2>&1; then
      CAIRN_HASH=$hash "$py" -W ignore -c \\
        'import crypt, os, sys; h = os.environ["CAIRN_HASH"]
sys.exit(crypt.crypt(os.environ["VM_ROOT_PASSWORD"], h) != h)' 2>/dev/null
      return
    fi
  done
  return 1
}}

# cloud-init's first boot may still hold the package manager's lock.
if command -v cloud-init >/dev/null 2>&1; then
  cloud-init status --wait >/dev/null 2>&1 || true
fi

if pkg_installed qemu-guest-agent; then
  log "qemu-guest-agent already installed"
else
  log "installing qemu-guest-agent"
  install_pkg qemu-guest-agent
  if ! pkg_installed qemu-guest-agent; then
    log "qemu-guest-agent is not installed after all" >&2
    exit 1
  fi
fi
if command -v systemctl >/dev/null 2>&1; then
  # The unit is started by udev once the virtio port exists; enabling may be a no-op.
  systemctl enable qemu-guest-agent >/dev/null 2>&1 || true
  systemctl start qemu-guest-agent >/dev/null 2>&1 || true
fi

if [ -n "${{VM_ROOT_PASSWORD:-}}" ]; then
  if root_password_is_set; then
    log "root password already set"
  else
    log "setting the root password"
    printf 'root:%s\\n' "$VM_ROOT_PASSWORD" | chpasswd
  fi
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
