"""The two pages the web chat serves: the chat, and the one shown to an address without its token.

Both are single files with everything inline (their Content-Security-Policy lets nothing be fetched);
they share one stylesheet, `static/webchat.css`, put in place of the `/*webchat.css*/` marker when
the page is first served. Both go out with the same security headers.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from aiohttp import web

_STYLE_MARK = "/*webchat.css*/"
# The chat's own policy (also in its <meta>), as a header too: a header can forbid framing, a <meta> cannot.
_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self' ws: wss:; "
           "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": _POLICY,
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the address carries the token: no link followed from the page sends it on
}
# The page's data (the task board's JSON): the same, and readable by the page's own origin alone.
DATA_HEADERS = {**SECURITY_HEADERS, "Cross-Origin-Resource-Policy": "same-origin"}


@cache
def _page(name: str) -> bytes:
    static = resources.files("platforms.webchat") / "static"
    css = (static / "webchat.css").read_text(encoding="utf-8")
    return (static / name).read_text(encoding="utf-8").replace(_STYLE_MARK, css, 1).encode("utf-8")


def chat_page() -> web.Response:
    return web.Response(body=_page("webchat.html"), content_type="text/html", charset="utf-8",
                        headers=SECURITY_HEADERS)


def locked_page() -> web.Response:
    """What an address without the token (or with a wrong one) shows: how to get the link on the machine
    (`chatgate status`), and nothing else — no token, no path, no version."""
    return web.Response(status=401, body=_page("locked.html"), content_type="text/html", charset="utf-8",
                        headers=SECURITY_HEADERS)
