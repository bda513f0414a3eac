"""The placeholder SVG served (with 404) instead of a broken image: light, or dark with ``d``."""

from __future__ import annotations

_TEMPLATE = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 120 90"{size}'
    ' preserveAspectRatio="xMidYMid meet" role="img" aria-label="image not available">'
    '<rect width="120" height="90" fill="{bg}"/>'
    '<g fill="none" stroke="{fg}" stroke-width="3" stroke-linejoin="round">'
    '<rect x="35" y="25" width="50" height="40" rx="4"/>'
    '<path d="M39 60l13-14 9 9 7-6 13 11"/>'
    '<circle cx="72" cy="36" r="4"/>'
    "</g></svg>"
)
_LIGHT = ("#f3f4f6", "#9ca3af")
_DARK = ("#1f2937", "#6b7280")


def placeholder_svg(
    dark: bool = False, width: int | None = None, height: int | None = None
) -> bytes:
    """The placeholder, sized like the requested image when ``w``/``h`` were given, so a page
    keeps its layout. Sizes come from parsed integers only, never from raw query text."""
    bg, fg = _DARK if dark else _LIGHT
    size = ""
    if width is not None:
        size += f' width="{int(width)}"'
    if height is not None:
        size += f' height="{int(height)}"'
    return _TEMPLATE.format(size=size, bg=bg, fg=fg).encode()
