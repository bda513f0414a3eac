"""Golden tests: each output format against samples of what a real Proxmox prints."""

from __future__ import annotations

import pvesim.formats as f

GIB = 1024**3


def test_qm_list_matches_reference_sample() -> None:
    rows = [
        {"vmid": 121, "name": "121", "status": "stopped", "maxmem": 2048 * 1024**2,
         "maxdisk": 16 * GIB, "pid": 0},
        {"vmid": 120, "name": "web-120", "status": "running", "maxmem": 4096 * 1024**2,
         "maxdisk": 32 * GIB, "pid": 12345},
        {"vmid": 122, "name": "VM 122", "status": "stopped", "maxmem": 512 * 1024**2,
         "maxdisk": 0, "pid": 0},
    ]  # fmt: skip
    assert f.format_qm_list(rows) == (
        "      VMID NAME                 STATUS     MEM(MB)    BOOTDISK(GB) PID       \n"
        "       120 web-120              running    4096              32.00 12345     \n"
        "       121 121                  stopped    2048              16.00 0         \n"
        "       122 VM 122               stopped    512                0.00 0         \n"
    )


def test_qm_list_without_vms_prints_nothing() -> None:
    assert f.format_qm_list([]) == ""


def test_pvesm_status_matches_reference_sample() -> None:
    rows = [
        {"name": "local-lvm", "type": "lvmthin", "status": "active", "total": 832888832,
         "used": 25468216, "avail": 807420616},
        {"name": "local", "type": "dir", "status": "active", "total": 98497780,
         "used": 9858012, "avail": 83591584},
        {"name": "nfs-iso", "type": "nfs", "status": "inactive", "total": 0, "used": 0, "avail": 0},
        {"name": "backup2", "type": "pbs", "status": "disabled", "total": 0, "used": 0, "avail": 0},
    ]  # fmt: skip
    text = f.format_pvesm_status(rows, kib_header=True)
    assert text.splitlines() == [
        "Name             Type     Status     Total (KiB)      Used (KiB) Available (KiB)        %",
        "backup2           pbs   disabled               0               0               0      N/A",
        "local             dir     active        98497780         9858012        83591584   10.01%",
        "local-lvm     lvmthin     active       832888832        25468216       807420616    3.06%",
        "nfs-iso           nfs   inactive               0               0               0    0.00%",
    ]


def test_pvesm_status_pve8_header_is_the_default() -> None:
    rows = [{"name": "local-lvm", "type": "lvmthin", "status": "active", "total": 1, "used": 0,
             "avail": 1}]  # fmt: skip
    header = f.format_pvesm_status(rows).splitlines()[0]
    assert header == (
        "Name             Type     Status           Total            Used       Available        %"
    )


def test_pvesm_status_name_column_is_the_longest_id_plus_one_without_floor() -> None:
    rows = [{"name": "zfs", "type": "zfspool", "status": "active", "total": 100, "used": 25,
             "avail": 75}]  # fmt: skip
    assert f.format_pvesm_status(rows).splitlines() == [
        "Name       Type     Status           Total            Used       Available        %",
        "zfs     zfspool     active             100              25              75   25.00%",
    ]
    assert f.format_pvesm_status([]) == (
        "Name       Type     Status           Total            Used       Available        %\n"
    )


def test_qm_config_sorted_masked_without_digest() -> None:
    config = {"name": "web-120", "cipassword": "$5$abc$def", "digest": "0123", "agent": 1,
              "sshkeys": "ssh-ed25519%20AAAA%0A", "boot": "order=scsi0"}  # fmt: skip
    assert f.format_qm_config(config) == (
        "agent: 1\n"
        "boot: order=scsi0\n"
        "cipassword: **********\n"
        "name: web-120\n"
        "sshkeys: ssh-ed25519%20AAAA%0A\n"
    )


def test_qm_status_line() -> None:
    assert f.format_qm_status("running") == "status: running\n"
    assert f.format_qm_status("stopped") == "status: stopped\n"


def test_format_size_uses_largest_exact_unit() -> None:
    assert f.format_size(2 * GIB) == "2G"
    assert f.format_size(2252 * 1024**2) == "2252M"
    assert f.format_size(32 * GIB) == "32G"
    assert f.format_size(4 * 1024**4) == "4T"
    assert f.format_size(1536) == "1536"
    assert f.format_size(1000) == "1000"
    assert f.format_size(3 * 1024) == "3K"


def test_parse_size() -> None:
    assert f.parse_size("16G") == 16 * GIB
    assert f.parse_size("512M") == 512 * 1024**2
    assert f.parse_size("1.5G") == int(1.5 * GIB)
    assert f.parse_size("100") == 100
    assert f.parse_size("16 G") is None
    assert f.parse_size("G") is None


def test_render_bytes_and_transferred_line() -> None:
    assert f.render_bytes(0) == "0.0 B"
    assert f.render_bytes(20.5 * 1024**2) == "20.5 MiB"
    assert f.format_transferred(0, 2 * GIB, 0.0) == "transferred 0.0 B of 2.0 GiB (0.00%)\n"
    assert f.format_transferred(21495808, 2 * GIB, 1.0) == (
        "transferred 20.5 MiB of 2.0 GiB (1.00%)\n"
    )


def test_update_line_sorts_and_hides_password() -> None:
    line = f.format_update_line(120, {"scsi0": "local-lvm:vm-120-disk-0", "cipassword": "s3cret",
                                      "boot": "c"})  # fmt: skip
    assert line == "update VM 120: -boot c -cipassword <hidden> -scsi0 local-lvm:vm-120-disk-0\n"
    assert "s3cret" not in line


def test_param_error_block() -> None:
    text = f.format_param_error(
        {"vmid": "value must have a minimum value of 100"}, "qm create <vmid> [OPTIONS]"
    )
    assert text == (
        "400 Parameter verification failed.\n"
        "vmid: value must have a minimum value of 100\n"
        "qm create <vmid> [OPTIONS]\n"
    )


def test_json_is_one_canonical_line() -> None:
    value = [{"vmid": 120, "id": "qemu/120", "node": "pve1", "type": "qemu", "status": "unknown"}]
    assert f.format_json(value) == (
        '[{"id":"qemu/120","node":"pve1","status":"unknown","type":"qemu","vmid":120}]\n'
    )
    assert f.format_json([]) == "[]\n"


def test_uri_escape_is_perl_uri_escape() -> None:
    assert f.uri_escape("ssh-ed25519 AAAA+/= root@pve1\n") == (
        "ssh-ed25519%20AAAA%2B%2F%3D%20root%40pve1%0A"
    )
    assert f.uri_escape("a-b_c.d~e") == "a-b_c.d~e"


def test_task_line_and_duration() -> None:
    assert f.format_task_line("2026-01-01 10:00:00", "copying local disk images") == (
        "2026-01-01 10:00:00 copying local disk images\n"
    )
    assert f.format_task_line("2026-01-01 10:00:00", "migration aborted", error=True) == (
        "2026-01-01 10:00:00 ERROR: migration aborted\n"
    )
    assert f.format_duration(153) == "00:02:33"


def test_dd_copied_line() -> None:
    assert f.format_dd_copied(4194304, 0.0412) == (
        "4194304 bytes (4.2 MB, 4.0 MiB) copied, 0.0412 s, 102 MB/s\n"
    )
    assert f.format_dd_copied(17179869184, 151.2) == (
        "17179869184 bytes (17 GB, 16 GiB) copied, 151.2 s, 114 MB/s\n"
    )


def test_text_table_for_list_and_object() -> None:
    table = f.format_text_table([{"node": "pve1", "status": "online"}])
    assert table == (
        "┌──────┬────────┐\n"
        "│ node │ status │\n"
        "╞══════╪════════╡\n"
        "│ pve1 │ online │\n"
        "└──────┴────────┘\n"
    )
    assert f.format_text_table(100) == "100\n"
    assert "│ uptime │ 5     │" in f.format_text_table({"uptime": 5})
