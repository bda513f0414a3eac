"""The names of the stages a VM task reports (each SSE record's `step`), in one place: the
actors that report them and the gateway that reads them import these. The install's are the
contract's stage table, in its order."""

from __future__ import annotations

CHECK_ID = "preparation > checking VMID"
ASSIGN_IP = "preparation > assigning IP"
CPU_RAM = "preparation > validating CPU and RAM"
DISK_SIZE = "preparation > validating disk size"
DEFAULTS = "preparation > setting default config values"
STORAGE = "preparation > checking storage pool"
GET_IMAGE = "OS preparation > getting OS image"
CHECK_URL = "OS preparation > validating OS image URL"
DOWNLOAD = "OS preparation > downloading OS image"
SSH_KEY = "SSH preparation > checking SSH key"
CREATE = "VM creation > creating VM"
IMPORT = "VM creation > importing disk image"
CONFIGURE = "VM initialization > initializing configuration"
MIGRATE = "VM initialization > migrating VM"
READY = "VM initialization > waiting for ready"
INIT_SCRIPT = "VM initialization > SSH initialization"
REBOOT = "VM initialization > rebooting VM"
FINALIZE = "VM initialization > finalizing"

INSTALL = (
    CHECK_ID,
    ASSIGN_IP,
    CPU_RAM,
    DISK_SIZE,
    DEFAULTS,
    STORAGE,
    GET_IMAGE,
    CHECK_URL,
    DOWNLOAD,
    SSH_KEY,
    CREATE,
    IMPORT,
    CONFIGURE,
    MIGRATE,
    READY,
    INIT_SCRIPT,
    REBOOT,
    FINALIZE,
)

# Lifecycle commands.
START = "start > starting VM"
START_READY = "start > waiting for ready"
REBOOT_VM = "reboot > rebooting VM"
REBOOT_READY = "reboot > waiting for ready"
DESTROY = "destroy > destroying VM"
SET_CPU = "set > cpu"
SET_MEMORY = "set > memory"
SET_DISK = "set > disk"
MIGRATE_VM = "migrate > migrating VM"
SNAPSHOT = "snapshot > taking snapshot"
ROLLBACK = "rollback > rolling back"
ROLLBACK_READY = "rollback > waiting for ready"
DELETE_SNAPSHOT = "snapshot delete > deleting snapshot"
RECOVERY = "recovery"


def power_off(command: str) -> str:
    """`stop > stop`, `shutdown > shutdown`."""
    return f"{command} > {command}"
