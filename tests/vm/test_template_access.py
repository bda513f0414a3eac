"""Whether an install may use templates with the credentials it has (actors/vm/template_access.py):
asked once, kept a few minutes, asked again after that or after a refusal the check missed."""

from __future__ import annotations

from actors.vm import pve
from actors.vm.fakepve import FakePve
from actors.vm.template_access import RECHECK_AFTER, Access, refusal, refused
from tests.vm.helpers import settings

API = {
    "PVE_DRIVER": "api",
    "PVE_API_URL": "https://192.168.0.11:8006",
    "PVE_API_TOKEN": "cairn@pve!driver=00000000-0000-0000-0000-000000000000",
    "PVE_API_FINGERPRINT": ":".join(["AB"] * 32),
}
OLD_TOKEN = frozenset({"VM.Allocate", "VM.Audit", "VM.Config.Disk", "VM.PowerMgmt"})
LACKS_CLONE = (
    "templates off for this install: the API token lacks VM.Clone on /vms; importing the image "
    "instead (grant it: pveum role modify CairnVM --append 1 --privs VM.Clone, for the role "
    "cairn pve bootstrap made; cairn asks again within 5 minutes; docs/vm.md, Templates and "
    "linked clones)"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def asked(fake: FakePve) -> int:
    return sum(1 for op, _, _ in fake.calls if op == "privileges")


async def test_a_token_without_vm_clone_is_told_what_to_grant_and_asked_once() -> None:
    fake, cache, clock = FakePve(granted=OLD_TOKEN), Access(), Clock()
    s = settings(**API)
    assert await refusal(fake, s, cache, clock) == LACKS_CLONE
    clock.now += RECHECK_AFTER - 1
    assert await refusal(fake, s, cache, clock) == LACKS_CLONE
    assert asked(fake) == 1  # a burst of installs asks Proxmox once


async def test_a_privilege_granted_meanwhile_counts_at_the_next_check() -> None:
    fake, cache, clock = FakePve(granted=OLD_TOKEN), Access(), Clock()
    s = settings(**API)
    assert await refusal(fake, s, cache, clock) is not None
    fake.granted = OLD_TOKEN | {"VM.Clone"}  # the admin ran pveum role modify ...
    clock.now += RECHECK_AFTER
    assert await refusal(fake, s, cache, clock) is None
    assert asked(fake) == 2
    # A restart starts with nothing known: it asks at once.
    assert await refusal(fake, s, Access(), clock) is None
    assert asked(fake) == 3


async def test_a_pool_scoped_token_is_checked_on_its_pool() -> None:
    fake = FakePve(granted=OLD_TOKEN)
    said = await refusal(fake, settings(**API, PVE_API_POOL="cairn"), Access())
    assert said is not None
    assert "the API token lacks VM.Clone on /pool/cairn; importing the image instead" in said


async def test_root_over_ssh_is_never_refused() -> None:
    # The CLI driver's answer: Proxmox checks no ACL for qm run as root.
    fake = FakePve(driver="cli", granted=None)
    assert await refusal(fake, settings(), Access()) is None


async def test_a_check_that_cannot_be_made_tries_templates_and_asks_again_next_time() -> None:
    fake, cache = FakePve(granted=OLD_TOKEN), Access()
    fake.fail("privileges", pve.Unreachable("Connection refused"))
    assert await refusal(fake, settings(**API), cache) is None
    assert cache.checked is None  # nothing learnt: not kept
    assert await refusal(fake, settings(**API), cache) == LACKS_CLONE


async def test_a_permission_error_the_check_missed_makes_the_next_install_ask_again() -> None:
    fake, cache, clock = FakePve(granted=OLD_TOKEN | {"VM.Clone"}), Access(), Clock()
    s = settings(**API)
    assert await refusal(fake, s, cache, clock) is None
    # Another failure of a clone changes nothing; a permission error does.
    refused(cache, pve.Locked("VM is locked (clone)", "clone"))
    assert await refusal(fake, s, cache, clock) is None
    assert asked(fake) == 1
    fake.granted = OLD_TOKEN  # revoked since
    refused(cache, pve.PermissionDenied("Permission check failed", "VM.Clone", "/vms/9000"))
    assert await refusal(fake, s, cache, clock) == LACKS_CLONE
    assert asked(fake) == 2
