"""The build's one step beyond pyproject.toml: a wheel also gets what the product finds outside
its packages in a checkout (the init scripts in sh/, the npm files it serves, the console's
bundles), put where events/resources.py looks in an installed cairn. An editable install runs
from the checkout itself and needs none of it."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def load(relative: str) -> ModuleType:
    # By its path: a package's __init__ may import what the build's environment lacks.
    spec = importlib.util.spec_from_file_location(Path(relative).stem, ROOT / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithResources(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        resources = load("events/resources.py")
        bundles = load("gateway/console/bundles.py")
        modules = ROOT / "ops" / "node_modules"
        makers = {
            name: functools.partial(bundles.bundle, modules, entry)
            for name, entry in bundles.ENTRIES.items()
        }
        try:
            resources.pack(Path(self.build_lib) / "events" / "packaged", ROOT, makers)
        except FileNotFoundError as exc:
            raise SystemExit(str(exc)) from None
        except RuntimeError as exc:  # esbuild's
            what = f"the console's bundles cannot be made ({exc})"
            raise SystemExit(resources.MISSING_NPM.format(what=what)) from None


setup(cmdclass={"build_py": BuildWithResources})
