"""Templates on the node an install names, with the CLI driver.

The CLI driver imports the image from cairn's own cache, on the main node: its templates are
built there. Cloning there and migrating each install to its node would copy the whole grown
disk between nodes every time (and a linked clone on zfs or a directory storage cannot leave
its template's node at all). Instead:

- where ASSIGN_STORAGE is shared (Proxmox's own `shared` flag, whatever the storage's type:
  NFS as well as an LVM group on a SAN LUN, every node sees the same volumes), the main node's
  template serves every node: the install is cloned straight onto its node (`qm clone --target`);
- else each node gets its own template once, made from the main node's: a full clone of it
  (its disk still the image's size, before any install grows it), migrated offline to the
  node and converted there. Every later install on that node is a linked clone of it, on it,
  with nothing migrated.
"""

from __future__ import annotations

import contextlib

import attrs

from actors.vm import templates
from actors.vm.jobs import Services, StageFailed, Stages
from actors.vm.ownership import mark_line
from actors.vm.pve import Clone, PveError
from actors.vm.unfinished import building_note


async def on_node(
    svc: Services,
    main: templates.Template,
    key: templates.Key,
    node: str,
    shared: bool,
    task: str,
    st: Stages,
) -> tuple[templates.Template, str | None]:
    """The template an install on `node` clones, and the `target` its clone is made with
    (None: on the template's own node). `main` is the main node's template of `key`; `shared`
    is ASSIGN_STORAGE's own `shared` flag, which Proxmox's `qm clone --target` goes by too."""
    if shared:
        return main, node
    here_key = attrs.evolve(key, node=node)
    here = templates.slot(svc, here_key)
    async with here.lock:
        if here.found is not None:
            return here.found, None
        for t in await templates.listing(svc):
            if (t.os, t.version, t.digest, t.node) != (key.os, key.version, key.digest, node):
                continue
            if t.ready:
                here.found = t
                return t, None
            st.note(f"removing template {t.vmid}, left half built")
            with contextlib.suppress(PveError):
                await svc.pve.destroy(t.node, t.vmid, cleanup=True)
        st.note(f"no template of {key.short()} on {node} yet: copying template {main.vmid} there")
        here.found = await _copy(svc, main, here_key, node, task, st)
        return here.found, None


async def _copy(
    svc: Services, main: templates.Template, key: templates.Key, node: str, task: str, st: Stages
) -> templates.Template:
    tid = await templates.free_id(svc)
    # Stored before the clone: a restart in the middle knows which copy to settle.
    await st.noted(building_note(tid, main.node, main.vmid))
    spec = Clone(name=key.name, full=True, description=mark_line(task) + "\n" + key.line())
    where = main.node
    try:
        await svc.pve.clone(main.node, main.vmid, tid, spec)
        await svc.pve.migrate(main.node, tid, node)
        where = node
        await svc.pve.template(node, tid)
        config = await svc.pve.vm_config(node, tid)
    except PveError as exc:
        with contextlib.suppress(PveError):
            await svc.pve.destroy(where, tid, cleanup=True)
        templates.forget(svc, main.vmid)  # perhaps gone: the next install looks again
        raise StageFailed(f"copying template {main.vmid} to {node} failed: {exc.text}") from None
    st.note(f"template {tid} ({key.short()}) copied to {node}")
    return templates.Template.made(tid, node, key, config)
