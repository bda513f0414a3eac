"""Where cairn finds the files it serves and runs, whether it runs from a checkout or from an
installed wheel.

A checkout keeps them where they are edited and installed: the guest init scripts' templates
in ``sh/templates/`` and the npm packages under ``ops/node_modules`` (``ops/setup`` runs npm).
An installed wheel has nothing outside its packages, so building one (``setup.py``, which calls
``pack``) copies into ``events/packaged/`` what the product needs of them: the init scripts'
templates, the npm files named in ``NPM_FILES`` laid out as in ``node_modules``, and the
console's code editor and terminal, bundled by esbuild at build time (an installed cairn has
no npm tree to bundle them from). Each lookup here takes that copy when it exists, else the
checkout's; no other product module reaches outside its own package.

esbuild itself is a native program for one architecture, so a wheel, like Node.js, leaves it
to the host: TypeScript functions use ``ESBUILD`` or an ``esbuild`` on ``PATH``.

Standard library only: ``setup.py`` loads this file by its path, before anything is installed.
"""

from __future__ import annotations

import os
import platform
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
# What a wheel's build put beside this module; absent in a checkout.
PACKAGED = HERE / "packaged"
# The checkout this module sits in, when it sits in one: events/ is at its top.
CHECKOUT = Path(__file__).resolve().parents[1]

# The files of the npm packages the product serves, by package folder (as under node_modules):
# the console's front end (gateway/console/assets.py) and Swagger UI's files
# (gateway/openapi). Only these go into a wheel: the whole folders weigh ~30 MB (Pico CSS
# alone ships 239 variants of its stylesheet, the console uses one).
NPM_FILES: dict[str, tuple[str, ...]] = {
    "htm/preact": ("standalone.module.js",),
    # index.js imports its siblings.
    "eventsource-parser/dist": ("*.js",),
    "@picocss/pico/css": ("pico.min.css",),
    "swagger-ui-dist": (
        "swagger-ui.css",
        "swagger-ui-bundle.js",
        "favicon-32x32.png",
        "favicon-16x16.png",
    ),
}
BUNDLES = "bundles"  # in PACKAGED: the console's bundles, by file name
MISSING_NPM = (
    "cannot build a wheel: {what}; run ops/setup in the checkout first (it installs the npm "
    "packages of ops/package.json)"
)


def installed() -> bool:
    """Whether this cairn runs from a wheel's install (rather than from a checkout)."""
    return PACKAGED.is_dir()


def init_scripts() -> Path:
    """The folder of the guest init scripts: their templates are in ``templates/`` below it."""
    return PACKAGED / "sh" if installed() else CHECKOUT / "sh"


def node_modules() -> Path:
    """The folder that holds the npm packages' files (``NPM_FILES`` in a wheel's install)."""
    return PACKAGED / "node_modules" if installed() else CHECKOUT / "ops" / "node_modules"


def console_bundle(name: str) -> Path | None:
    """A bundle of the console made when the wheel was built; None in a checkout, which
    bundles on the first request (gateway/console/editor.py)."""
    path = PACKAGED / BUNDLES / name
    return path if path.is_file() else None


def esbuild(env: Mapping[str, str]) -> str | None:
    """``ESBUILD`` if set, else the native binary npm put under the checkout's node_modules,
    else one on ``PATH``; None without any."""
    if env.get("ESBUILD"):
        return env["ESBUILD"]
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64"}.get(platform.machine().lower())
    modules = node_modules()
    candidates = [
        modules / "@esbuild" / f"linux-{arch}" / "bin" / "esbuild",
        modules / ".bin" / "esbuild",
    ]
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("esbuild")


def pack(target: Path, checkout: Path, bundles: Mapping[str, Callable[[], bytes]]) -> None:
    """Write into ``target`` (a wheel's ``events/packaged``) what ``checkout`` holds outside
    the packages, then the console's bundles, each made by its function (after the npm files,
    so that a checkout without them hears about those first); raises ``FileNotFoundError``
    naming what is missing."""
    templates = sorted((checkout / "sh" / "templates").glob("*.sh.in"))
    if not templates:
        raise FileNotFoundError(f"no init script templates in {checkout / 'sh' / 'templates'}")
    (target / "sh" / "templates").mkdir(parents=True, exist_ok=True)
    for template in templates:
        shutil.copy2(template, target / "sh" / "templates" / template.name)
    modules = checkout / "ops" / "node_modules"
    for folder, patterns in NPM_FILES.items():
        for pattern in patterns:
            found = sorted((modules / folder).glob(pattern))
            if not found:
                what = f"no {folder}/{pattern} in {modules}"
                raise FileNotFoundError(MISSING_NPM.format(what=what))
            (target / "node_modules" / folder).mkdir(parents=True, exist_ok=True)
            for path in found:
                shutil.copy2(path, target / "node_modules" / folder / path.name)
    (target / BUNDLES).mkdir(parents=True, exist_ok=True)
    for name, make in bundles.items():
        (target / BUNDLES / name).write_bytes(make())
