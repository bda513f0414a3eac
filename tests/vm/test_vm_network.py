"""The VMs' network settings (VM_BRIDGE, VM_NETMASK, with GATEWAY and the VMID range): checked
at start, and the command lines and API parameters they change (golden)."""

from __future__ import annotations

import pytest

from actors.vm.cli import argv as qm
from actors.vm.pve import CloudInit, Create, Hardware, ImportFrom
from actors.vm.pveapi.adapter import create_params
from actors.vm.settings import SettingsError
from tests.vm.helpers import settings

KEY = b"ssh-ed25519 AAAAC3Nz+x cairn@ctl\n"


def test_defaults_are_vmbr0_and_a_24_bit_mask() -> None:
    s = settings()
    assert (s.bridge, s.prefix_len) == ("vmbr0", 24)


@pytest.mark.parametrize(
    ("raw", "prefix"), [("16", 16), ("/22", 22), ("255.255.0.0", 16), (" 255.255.255.0 ", 24)]
)
def test_the_mask_as_a_prefix_length_or_dotted(raw: str, prefix: int) -> None:
    assert settings(VM_NETMASK=raw, GATEWAY="10.20.30.1").prefix_len == prefix


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"VM_BRIDGE": "vmbr0,firewall=1"}, "VM_BRIDGE must be a bridge name"),
        ({"VM_BRIDGE": "vmbr0 x"}, "VM_BRIDGE must be a bridge name"),
        ({"VM_BRIDGE": "a-very-long-bridge-name"}, "up to 15 letters"),
        ({"VM_BRIDGE": "vmbr0\nbridge=evil"}, "VM_BRIDGE must be a bridge name"),
        ({"VM_NETMASK": "33"}, "VM_NETMASK must be a prefix length from 8 to 30"),
        ({"VM_NETMASK": "7"}, "from 8 to 30"),
        ({"VM_NETMASK": "31"}, "from 8 to 30"),
        ({"VM_NETMASK": "0.0.0.255"}, "or a dotted mask"),  # a host mask, not a netmask
        ({"VM_NETMASK": "255.0.255.0"}, "or a dotted mask"),
        ({"VM_NETMASK": "24,gw=6.6.6.6"}, "VM_NETMASK must be"),
        # /25 around .1 holds .1-.126: VM 254 would be outside the gateway's network.
        ({"VM_NETMASK": "25"},
         r"ASSIGN_IP_END=254 gives VMs the address 192\.168\.0\.254, outside the VM network "
         r"192\.168\.0\.0/25 \(hosts 192\.168\.0\.1 to 192\.168\.0\.126\)"),
        ({"VM_NETMASK": "25", "GATEWAY": "192.168.0.129"},
         "ASSIGN_IP_START=100 gives VMs the address 192.168.0.100, outside"),
        # .127 is the broadcast address of 192.168.0.0/25, never a host's.
        ({"VM_NETMASK": "25", "ASSIGN_IP_END": "127"},
         r"ASSIGN_IP_END=127 gives VMs the address 192\.168\.0\.127, outside"),
        ({"GATEWAY": "192.168.0.200"},
         r"GATEWAY=192\.168\.0\.200 lies in the VM range .* VM 200 would get the gateway's"),
    ],
)  # fmt: skip
def test_network_settings_are_refused_at_start_with_a_reason(
    extra: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        settings(**extra)


def test_a_range_that_fits_a_small_network_is_accepted() -> None:
    s = settings(GATEWAY="10.0.0.129", VM_NETMASK="25", ASSIGN_IP_START="130",
                 ASSIGN_IP_END="254")  # fmt: skip
    assert (s.prefix_len, s.ip_for(130), s.ip_for(254)) == (25, "10.0.0.130", "10.0.0.254")


def _cloud_init(prefix_len: int) -> qm.CloudInit:
    return qm.CloudInit(user="deploy", password_hash="$6$salt$hash", sshkeys_file="/dev/stdin",
                        ip="10.20.30.120", gateway="10.20.30.1", prefix_len=prefix_len)  # fmt: skip


def _hardware(bridge: str) -> list[str]:
    mark = "created by cairn, install task 0f1e"
    hardware = Hardware("web", 2, "x86-64-v2-AES", 2048, None, "debian", mark, bridge)
    return qm.create(120, hardware.options())


def test_cli_command_lines_carry_the_bridge_and_the_mask() -> None:
    argv = _hardware("vmbr7")
    assert argv[argv.index("--net0") + 1] == "virtio,bridge=vmbr7"
    configured = qm.configure(120, "local-lvm:vm-120-disk-0", "local-lvm", _cloud_init(16))
    assert configured[-2:] == ["--ipconfig0", "ip=10.20.30.120/16,gw=10.20.30.1"]


def test_api_create_parameters_carry_the_bridge_and_the_mask() -> None:
    mark = "created by cairn, install task 0f1e"
    hardware = Hardware("web", 2, "x86-64-v2-AES", 2048, None, "debian", mark, "vnet1")
    ci = CloudInit("deploy", "$6$salt$hash", KEY.decode(), "10.20.30.120", "10.20.30.1", 22)
    disk = ImportFrom("local-lvm", "local:import/debian-12.qcow2", ci)
    assert create_params(120, Create(hardware, disk, "cairn")) == {
        "vmid": "120", "name": "web", "cores": "2", "cpu": "x86-64-v2-AES",
        "memory": "2048", "scsihw": "virtio-scsi-pci", "ostype": "l26", "agent": "1",
        "net0": "virtio,bridge=vnet1", "serial0": "socket", "vga": "serial0",
        "tags": "debian", "description": "created by cairn, install task 0f1e",
        "scsi0": "local-lvm:0,import-from=local:import/debian-12.qcow2",
        "ide2": "local-lvm:cloudinit", "boot": "order=scsi0", "ciuser": "deploy",
        "cipassword": "$6$salt$hash",
        "sshkeys": "ssh-ed25519%20AAAAC3Nz%2Bx%20cairn%40ctl%0A", "ciupgrade": "0",
        "ipconfig0": "ip=10.20.30.120/22,gw=10.20.30.1", "pool": "cairn",
    }  # fmt: skip


def test_the_token_bootstrap_grants_every_local_bridge(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the API driver (PVE >= 8.0) a token needs SDN.Use on the VMs' bridge; an install
    may name any bridge, so the grant is on the local zone, whatever VM_BRIDGE says."""
    from gateway.main import main

    monkeypatch.setenv("VM_BRIDGE", "vnet1")
    assert main(["pve", "bootstrap", "--release", "9.1"]) == 0
    out = capsys.readouterr().out
    assert "pveum acl modify /sdn/zones/localnetwork --users cairn@pve --roles CairnNet" in out
    assert "/localnetwork/" not in out
