"""Headers every console response carries: a strict Content-Security-Policy and its friends.

The policy allows scripts, styles and fonts from the console's own origin only: no inline
script or style, no ``eval``, no other host (the libraries are served locally, and the page's
requests all go to the console, which forwards them). Images may also be ``data:`` (the
stylesheet's icons) and ``blob:`` (a preview of a file about to be uploaded). The page cannot be
framed, and sends no Referer.

A response forwarded from a service keeps a policy of its own (an SVG image's).
"""

from __future__ import annotations

from aiohttp import web

CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data: blob:",
        "font-src 'self'",
        "connect-src 'self'",
        "manifest-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    )
)
FIXED = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


async def on_prepare(_: web.Request, response: web.StreamResponse) -> None:
    """Every response of the console's app, streams included, just before its headers go."""
    response.headers.setdefault("Content-Security-Policy", CSP)
    for name, value in FIXED.items():
        response.headers.setdefault(name, value)
