"""Whether this run's Proxmox credentials may build and clone templates.

Templates are on by default, but an API token made before them (cairn 0.1.0's `cairn pve
bootstrap`) lacks VM.Clone: with it, every install after an upgrade would end in a permission
error once its template was built. So an install asks first (the token's own permissions, as
`cairn pve check` reads them) and, where something is missing, imports its image as it always
did and says in its stream why, and how to grant it. The answer is kept for a few minutes, so an
install costs no extra request; a privilege granted meanwhile takes effect at the next check, or
at once after a restart. The CLI driver runs qm as root, which Proxmox checks no ACL for: it
never falls back.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

from actors.vm.pve import PermissionDenied, Pve, PveError
from actors.vm.pveapi.privileges import TEMPLATE_PRIVS, VM_ROLE
from actors.vm.settings import VmSettings

# Long enough that a burst of installs asks once; short enough that an admin who granted the
# privilege sees templates at the next install or so without restarting cairn.
RECHECK_AFTER = 300.0


@attrs.define
class Access:
    """The last answer (None: templates may be used) and when it was had (monotonic)."""

    refusal: str | None = None
    checked: float | None = None

    def forget(self) -> None:
        """Ask again at the next install (Proxmox refused what the check had allowed)."""
        self.checked = None


def acl_path(settings: VmSettings) -> str:
    """Where the token's VM privileges are: its pool, or every VM."""
    return f"/pool/{settings.pool}" if settings.pool else "/vms"


def sentence(missing: list[str], path: str) -> str:
    """The one line an install says when it imports because the token lacks `missing`."""
    privs = ", ".join(missing)
    grant = f"pveum role modify {VM_ROLE} --append 1 --privs {','.join(missing)}"
    return (
        f"templates off for this install: the API token lacks {privs} on {path}; importing the "
        f"image instead (grant it: {grant}, for the role cairn pve bootstrap made; cairn asks "
        f"again within {RECHECK_AFTER / 60:.0f} minutes; docs/vm.md, Templates and linked clones)"
    )


async def refusal(
    pve: Pve, settings: VmSettings, cache: Access, now: Callable[[], float] = time.monotonic
) -> str | None:
    """Why this install may not use templates, or None when it may."""
    at = now()
    if cache.checked is not None and at - cache.checked < RECHECK_AFTER:
        return cache.refusal
    path = acl_path(settings)
    try:
        held = await pve.privileges(path)
    except PveError:
        # Proxmox cannot be asked now: the install tries templates (and most likely meets the
        # same outage in its next step); the next install asks again.
        return None
    missing = [] if held is None else [p for p in TEMPLATE_PRIVS if p not in held]
    cache.refusal = sentence(missing, path) if missing else None
    cache.checked = at
    return cache.refusal


def refused(cache: Access, exc: PveError) -> None:
    """A template call met a permission error the check did not foresee (an ACL on one VM, a
    privilege revoked since): the next install asks again rather than meet it too."""
    if isinstance(exc, PermissionDenied):
        cache.forget()
