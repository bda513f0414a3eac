#!/usr/bin/env bash
# cairn init script for Debian 13 (trixie) cloud images.
#
# cairn runs it once as root over SSH (`sudo -n bash -s`, script on stdin) after the first boot;
# it is also served at /sh/debian_13.sh. It is safe to run again: every step checks first.
# It changes only what a VM managed by cairn needs:
#   - the QEMU guest agent, so Proxmox can see the guest and shut it down cleanly;
#   - root's password, only if VM_ROOT_PASSWORD is set in the environment (read from the
#     environment, never from the command line, and handed to chpasswd on stdin).
# Mirrors, time zone, firewall and ICMP settings are left as the image ships them.
set -euo pipefail

log() { printf 'cairn-init: %s\n' "$*"; }

pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
install_pkg() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$@"
}

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

if [ -n "${VM_ROOT_PASSWORD:-}" ]; then
  log "setting the root password"
  printf 'root:%s\n' "$VM_ROOT_PASSWORD" | chpasswd
fi

log "done"
