"""cairn's version: the one place it is written.

Semantic Versioning (https://semver.org): MAJOR.MINOR.PATCH. While MAJOR is 0, a MINOR release
may change settings, routes or the data directory's layout (CHANGELOG.md says how to move
across), a PATCH release only fixes. Between releases, ``main`` carries the next release's
number with ``.dev0`` (PEP 440's spelling of a SemVer pre-release).

pyproject.toml reads ``VERSION`` from here (``[tool.setuptools.dynamic]``), ``cairn --version``
prints it, and the event store records which cairn stamped its format (events/stamp.py).
"""

from __future__ import annotations

VERSION = "0.2.0.dev0"
