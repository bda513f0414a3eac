"""`cairn pve bootstrap` and `cairn pve check`: give cairn a least-privilege API token, and
say whether everything cairn does will work with it (docs/vm.md, "Running off-node").

bootstrap prints the `pveum` commands (it changes nothing itself); check connects with
PVE_API_URL, PVE_API_TOKEN and PVE_API_FINGERPRINT (or PVE_API_CA_FILE) and reports, per
operation, `ok` or what is missing: a privilege on a path, a storage content type, the PVE
release the SSH-free image path needs.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping
from typing import Any

from actors.config import env_int
from actors.vm.pveapi import errors
from actors.vm.pveapi.client import PveClient
from actors.vm.pveapi.privileges import Layout, bootstrap, effective, needs
from actors.vm.pveapi.wire import normalize_fingerprint, parse_token
from actors.vm.settings import VMID_MAX, VMID_MIN


def register(sub: Any) -> None:
    pve = sub.add_parser("pve", help="Proxmox VE API access: bootstrap a token, check it")
    cmds = pve.add_subparsers(dest="pve_command", required=True)
    boot = cmds.add_parser("bootstrap", help="print the pveum commands for cairn's token")
    boot.add_argument("--release", default="8.4", help="PVE release of the cluster (7.4 .. 9.1)")
    boot.add_argument("--user", default="cairn@pve")
    boot.add_argument("--token", default="driver", help="token name")
    boot.add_argument("--pool", default=None, help="scope VM privileges to this resource pool")
    boot.add_argument("--storage", default=None, help="VM disk storage (ASSIGN_STORAGE)")
    boot.add_argument("--import-storage", default=None, help="image storage (PVE_IMPORT_STORAGE)")
    boot.add_argument("--bridge", default=None, help="VMs' bridge (VM_BRIDGE; default vmbr0)")
    boot.set_defaults(handler=run_bootstrap)
    check = cmds.add_parser("check", help="say per operation whether the token will do")
    check.add_argument("--node", default=None, help="node to check (default: MAIN_NODE)")
    check.set_defaults(handler=run_check)


def _layout(args: argparse.Namespace, env: Mapping[str, str], release: str) -> Layout:
    return Layout(
        release=release,
        disk_storage=getattr(args, "storage", None) or env.get("ASSIGN_STORAGE") or "local-lvm",
        import_storage=getattr(args, "import_storage", None)
        or env.get("PVE_IMPORT_STORAGE")
        or "local",
        bridge=getattr(args, "bridge", None) or env.get("VM_BRIDGE", "").strip() or "vmbr0",
        pool=getattr(args, "pool", None) or env.get("PVE_API_POOL") or None,
        vm_ids=(
            env_int(env, "ASSIGN_IP_START", VMID_MIN, min=VMID_MIN, max=VMID_MAX) or VMID_MIN,
            env_int(env, "ASSIGN_IP_END", VMID_MAX, min=VMID_MIN, max=VMID_MAX) or VMID_MAX,
        ),
    )


def run_bootstrap(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    layout = _layout(args, env, args.release)
    print(f"# Run on any node of the cluster (PVE {layout.release}), as root.")
    for line in bootstrap(layout, args.user, args.token):
        print(line)
    print(f"# Then: PVE_API_TOKEN={args.user}!{args.token}=<the secret printed above>")
    print("#       PVE_API_URL=https://<node>:8006")
    print("#       PVE_API_FINGERPRINT=<`pvenode cert info` on that node: the SHA-256 line>")
    return 0


def client_from_env(env: Mapping[str, str]) -> PveClient:
    url, token = env.get("PVE_API_URL", "").strip(), env.get("PVE_API_TOKEN", "").strip()
    if not url or not token:
        raise SystemExit(
            "cairn pve check: set PVE_API_URL and PVE_API_TOKEN (see cairn pve bootstrap)"
        )
    fingerprint = env.get("PVE_API_FINGERPRINT", "").strip()
    return PveClient(
        url,
        parse_token(token),
        fingerprint=normalize_fingerprint(fingerprint) if fingerprint else None,
        ca_file=env.get("PVE_API_CA_FILE", "").strip() or None,
    )


async def check(env: Mapping[str, str], node: str | None, args: argparse.Namespace) -> list[str]:
    """The report's lines: `ok   <operation>`, `FAIL <operation>: <what is missing>`, or
    `WARN` where cairn falls back without it."""
    lines: list[str] = []
    client = client_from_env(env)
    try:
        try:
            version = await client.get("/version")
        except errors.ApiError as exc:
            return [f"FAIL connect: {exc.text}"]
        release = str(version.get("release", "?"))
        lines.append(f"ok   connect: Proxmox VE {version.get('version', release)} at {client.base}")
        nodes = [n["node"] for n in await client.get("/nodes")]
        node = node or env.get("MAIN_NODE", "").strip() or (nodes[0] if nodes else "")
        if node not in nodes:
            lines.append(f"FAIL node: {node!r} is not a node of this cluster ({', '.join(nodes)})")
            return lines
        layout = _layout(args, env, release)
        perms = await client.get("/access/permissions")
        for need in needs(layout, node):
            have = effective(perms, need.path)
            missing = [p for p in need.privs if p not in have]
            if need.any_of and len(missing) < len(need.privs):
                missing = []
            if missing:
                what = " or ".join(missing) if need.any_of else ", ".join(missing)
                lacks = f"{need.operation}: the token lacks {what} on {need.path}"
                lines.append(f"WARN {lacks}: {need.without}" if need.without else f"FAIL {lacks}")
            else:
                lines.append(f"ok   {need.operation}")
        major, _, minor = release.partition(".")
        if (int(major or 0), int(minor or 0)) < (8, 4):
            lines.append(
                f"FAIL install from a cloud image: PVE {release} cannot import a downloaded "
                "image for a token (needs 8.4: download-url into 'import' content); use "
                "PVE_DRIVER=cli for installs on this cluster, or upgrade"
            )
        for storage, content in (
            (layout.disk_storage, "images"),
            (layout.import_storage, "import"),
        ):
            try:
                info = await client.get(f"/nodes/{node}/storage/{storage}/status")
            except errors.ApiError as exc:
                lines.append(f"FAIL storage {storage} on {node}: {exc.text}")
                continue
            kinds = str(info.get("content", "")).split(",")
            if content not in kinds:
                fix = ",".join([*kinds, content])
                lines.append(
                    f"FAIL storage {storage} on {node}: no '{content}' content (has "
                    f"{','.join(kinds)}); `pvesm set {storage} --content {fix}`"
                )
            elif not int(info.get("active", 0)):
                lines.append(f"FAIL storage {storage} on {node}: not active")
            else:
                lines.append(f"ok   storage {storage} on {node} ({content})")
        return lines
    finally:
        await client.close()


def run_check(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    lines = asyncio.run(check(env, args.node, args))
    for line in lines:
        print(line)
    return 1 if any(line.startswith("FAIL") for line in lines) else 0
