"""docs/cli.md documents every command the parser has and every exit code the client uses."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gateway.cli import functions as cli_fn
from gateway.cli import images as cli_images
from gateway.cli import vm as cli_vm
from gateway.cli.client import EXIT

DOC = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()


def subcommands(register: object, group: str) -> list[str]:
    parser = argparse.ArgumentParser(prog="cairn")
    register(parser.add_subparsers(dest="command"))  # type: ignore[operator]
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    inner = action.choices[group]
    leaf = next(a for a in inner._actions if isinstance(a, argparse._SubParsersAction))
    return list(leaf.choices)


@pytest.mark.parametrize(
    ("group", "module"), [("vm", cli_vm), ("fn", cli_fn), ("images", cli_images)]
)
def test_every_command_is_documented(group: str, module: object) -> None:
    names = subcommands(module.register, group)  # type: ignore[attr-defined]
    assert len(names) >= 3
    assert [n for n in names if f"`cairn {group} {n}" not in DOC] == []


def test_every_exit_code_is_documented() -> None:
    assert [code for code in EXIT if f"| `{code}` |" not in DOC] == []
