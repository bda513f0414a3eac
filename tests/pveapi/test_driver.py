"""Golden tests of the API driver's translation: cairn's command lines -> REST requests, and
the API's answers printed as the commands would have (what the parsers of pve_output read)."""

from __future__ import annotations

import pytest

from actors.vm import qm
from actors.vm.pve_output import parse_config, parse_pvesm_status, parse_status
from actors.vm.pveapi.driver import Request, Untranslatable, render, translate

KEY = b"ssh-ed25519 AAAAC3Nz+x cairn@ctl\n"


@pytest.mark.parametrize(
    ("argv", "request_"),
    [
        (qm.status(120), Request("GET", "/nodes/pve2/qemu/120/status/current", {}, "status")),
        (qm.config(120), Request("GET", "/nodes/pve2/qemu/120/config", {}, "config")),
        (qm.start(120), Request("POST", "/nodes/pve2/qemu/120/status/start", {}, "task")),
        (qm.reboot(120), Request("POST", "/nodes/pve2/qemu/120/status/reboot", {}, "task")),
        (qm.destroy(120), Request("DELETE", "/nodes/pve2/qemu/120", {"purge": "1"}, "task")),
        # skiplock is root's: a token's clean-up goes without it
        (qm.cleanup_stop(120),
         Request("POST", "/nodes/pve2/qemu/120/status/stop", {"timeout": "1"}, "task")),
        (qm.cleanup_destroy(120),
         Request("DELETE", "/nodes/pve2/qemu/120",
                 {"purge": "1", "destroy-unreferenced-disks": "1"}, "task")),
        (qm.resize_disk(120, "+4G"),
         Request("PUT", "/nodes/pve2/qemu/120/resize", {"disk": "scsi0", "size": "+4G"}, "task")),
        (qm.set_memory(120, 2048, 1024),
         Request("POST", "/nodes/pve2/qemu/120/config", {"memory": "2048", "balloon": "1024"},
                 "task")),
        (qm.migrate(120, "pve3"),
         Request("POST", "/nodes/pve2/qemu/120/migrate",
                 {"target": "pve3", "with-local-disks": "1"}, "task")),
        (qm.image_storages(),
         Request("GET", "/nodes/pve2/storage", {"content": "images"}, "storages")),
        (qm.storage_status("local-lvm"),
         Request("GET", "/nodes/pve2/storage/local-lvm/status", {}, "storage")),
        (qm.cluster_resources("vm"), Request("GET", "/cluster/resources", {"type": "vm"}, "json")),
        (["pvesh", "create", "/nodes/pve2/storage/local/download-url", "--content", "import",
          "--filename", "d.qcow2", "--url", "https://x/d.qcow2"],
         Request("POST", "/nodes/pve2/storage/local/download-url",
                 {"content": "import", "filename": "d.qcow2", "url": "https://x/d.qcow2"}, "json")),
    ],
)  # fmt: skip
def test_command_lines_become_requests(argv: list[str], request_: Request) -> None:
    assert translate("pve2", argv) == request_


def test_sshkeys_from_stdin_are_sent_urlencoded() -> None:
    argv = ["pvesh", "create", "/nodes/pve1/qemu", "--vmid", "120", "--sshkeys", "/dev/stdin"]
    got = translate("pve1", argv, KEY)
    assert got.params == {"vmid": "120", "sshkeys": "ssh-ed25519%20AAAAC3Nz%2Bx%20cairn%40ctl%0A"}
    with pytest.raises(Untranslatable, match="stdin"):
        translate("pve1", [*argv[:-1], "/root/keys"], KEY)


@pytest.mark.parametrize(
    "argv", [["qm", "list"], ["qm", "start"], ["pvesh", "ls", "/"], ["ls"], ["qm", "start", "x"]]
)
def test_what_has_no_api_equivalent_is_refused(argv: list[str]) -> None:
    with pytest.raises(Untranslatable):
        translate("pve1", argv)


def test_answers_print_as_the_commands_do() -> None:
    status = render(translate("pve1", qm.status(120)), {"status": "running", "qmpstatus": "paused"})
    assert parse_status(status) == "paused"
    config = render(
        translate("pve1", qm.config(120)),
        {
            "name": "web",
            "cores": 2,
            "digest": "x",
            "description": "created by cairn, install task t\n",
        },
    )
    assert config == ("cores: 2\ndescription: created by cairn, install task t%0A\nname: web\n")
    assert parse_config(config)["description"] == "created by cairn, install task t%0A"
    rows = render(
        translate("pve1", qm.image_storages()),
        [{"storage": "local-lvm", "type": "lvmthin", "active": 1, "enabled": 1,
          "total": 1024 * 1000, "used": 1024 * 250, "avail": 1024 * 750},
         {"storage": "off", "type": "dir", "active": 0, "enabled": 0}],
    )  # fmt: skip
    parsed = parse_pvesm_status(rows)
    assert [(r.name, r.type, r.status, r.total_kib, r.used_kib) for r in parsed] == [
        ("local-lvm", "lvmthin", "active", 1000, 250),
        ("off", "dir", "disabled", 0, 0),
    ]
    assert render(translate("pve1", qm.cluster_resources("vm")), [{"vmid": 1}]) == '[{"vmid":1}]\n'
