"""The languages a function may be written in, and how each one runs."""

from __future__ import annotations

import enum


class Language(enum.StrEnum):
    PYTHON = "python"
    JAVASCRIPT = "javascript"
    TYPESCRIPT = "typescript"

    @property
    def extension(self) -> str:
        return _EXTENSIONS[self]

    @property
    def runs_on_node(self) -> bool:
        # TypeScript is transpiled once per version (esbuild) and then runs exactly like JS.
        return self is not Language.PYTHON


_EXTENSIONS = {Language.PYTHON: ".py", Language.JAVASCRIPT: ".js", Language.TYPESCRIPT: ".ts"}


def parse_language(value: object) -> Language | None:
    """The language named by ``value``, or None when it is not one of the three (exact, lower
    case: one spelling per language keeps stored functions and URLs unambiguous)."""
    if not isinstance(value, str):
        return None
    try:
        return Language(value)
    except ValueError:
        return None
