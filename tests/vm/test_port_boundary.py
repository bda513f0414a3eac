"""The Proxmox port's boundary: command lines and the parsers of what they print belong to the
CLI adapter (actors/vm/cli) alone. Everything else speaks the port's typed operations, so a new
capability is an operation, never a command line and a parser somewhere else."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "actors" / "vm" / "cli"
# Product code that talks to Proxmox or might: the simulator (ops/pvesim) and the node helper
# (ops/deploy/pve) are Proxmox's side of the wire and build these command lines by nature.
PRODUCT = [ROOT / "actors", ROOT / "gateway", ROOT / "events", ROOT / "ops" / "bench"]
# The simulator's own benchmark times its fake commands.
EXEMPT = {ROOT / "ops" / "bench" / "sim_commands.py"}
PRIVATE = ("actors.vm.cli.argv", "actors.vm.cli.output", "actors.vm.cli.transport")
PROGRAMS = {"qm", "pvesh", "pvesm"}


def _modules() -> list[Path]:
    return sorted(
        p
        for root in PRODUCT
        for p in root.rglob("*.py")
        if CLI not in p.parents and p not in EXEMPT
    )


def violations(source: str, name: str) -> list[str]:
    """Imports of the CLI adapter's private modules, and argv lists that start a Proxmox
    program, in one module's source."""
    tree = ast.parse(source, name)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            hit = next((n for n in names if n.startswith(PRIVATE)), None)
            if hit:
                found.append(f"{name}:{node.lineno}: imports {hit}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PRIVATE):
                    found.append(f"{name}:{node.lineno}: imports {alias.name}")
        elif isinstance(node, ast.List | ast.Tuple) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value in PROGRAMS:
                found.append(f"{name}:{node.lineno}: builds a {first.value} argv")
    return found


def test_no_module_outside_the_cli_adapter_builds_or_parses_command_lines() -> None:
    modules = _modules()
    assert len(modules) > 100  # the walk found the product's code
    found = [v for p in modules for v in violations(p.read_text(), str(p.relative_to(ROOT)))]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        "from actors.vm.cli.output import parse_config\n",
        "from actors.vm.cli import argv\n",
        "import actors.vm.cli.transport\n",
        "ARGV = ['qm', 'start', '100']\n",
        "def f(vmid):\n    return ('pvesh', 'get', '/cluster/resources')\n",
    ],
)
def test_the_rule_catches_each_way_round_it(source: str) -> None:
    assert violations(source, "probe.py"), source


def test_the_rule_lets_typed_operations_through() -> None:
    source = "async def f(pve, node):\n    await pve.start(node, 100)\n    x = ['qmx', 'a']\n"
    assert violations(source, "probe.py") == []
    # The adapter itself builds them (and is left out of the walk).
    assert any(violations(p.read_text(), p.name) for p in CLI.glob("*.py"))
