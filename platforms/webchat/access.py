"""Who may reach the web chat: the names it is served as, and its token.

A page on another site cannot drive the chat: the websocket's Origin must be the page's own
address, and the Host must be a name this server is served as (loopback names, the configured
`http.host`, the host of `http.public_url`; an IP address too when listening on all addresses —
DNS rebinding always comes with a domain name). The page and the socket need a token, on loopback
too: every local program and every local user reaches 127.0.0.1, and with no sandbox around them
the agent's own commands do — they must not be able to open the chat's socket and press the
approval buttons it shows. The token is the configured one, else one generated on first start and
kept in `$CHATGATE_HOME/webchat-token` (0600, invisible inside the sandbox). `token: ""` turns it
off, on loopback only. The page's own requests for data (the task board) carry it in a header,
`TOKEN_HEADER`, not in their address: no other site's page can send that header without asking
first (a CORS preflight nothing here answers), and no address with the token in it is made again.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from pathlib import Path
from urllib.parse import unquote, urlsplit

from platforms.registry import PlatformUnavailable

TOKEN_FILE = "webchat-token"
TOKEN_HEADER = "X-Chatgate-Token"  # percent-encoded, as in the page's address (a header carries Latin-1 only)
_WILDCARDS = frozenset({"", "0.0.0.0", "::", "*"})


def hostname(host: str) -> str:
    """The name part of a Host header or address: no port, no brackets, lower case."""
    try:
        return (urlsplit(f"//{host}").hostname or "").lower()
    except ValueError:
        return ""


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    name = hostname(host) if host not in _WILDCARDS else host
    if name == "localhost":
        return True
    return _is_ip(name) and ipaddress.ip_address(name).is_loopback


class Gate:
    """The Host, Origin and token checks of one web chat."""

    def __init__(self, http_host: str, public_url: str | None, token: str | None) -> None:
        self.token = token
        self.any_address = http_host in _WILDCARDS
        self.names = {"localhost", "127.0.0.1", "::1"}
        if not self.any_address:
            self.names.add(hostname(http_host))
        self.public_origin = None
        if public_url:
            parts = urlsplit(public_url)
            self.names.add((parts.hostname or "").lower())
            self.public_origin = f"{parts.scheme}://{parts.netloc}".lower()

    def host_allowed(self, host: str) -> bool:
        name = hostname(host)
        return name in self.names or (self.any_address and _is_ip(name))

    def origin_allowed(self, origin: str | None, host: str) -> bool:
        """No Origin (not a browser page) passes; a browser page must be this server's own."""
        if origin is None:
            return True
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        return parts.netloc.lower() == host.lower() or f"{parts.scheme}://{parts.netloc}".lower() == self.public_origin

    def token_ok(self, given: str) -> bool:
        """Compared as bytes, in constant time (any text a query string can carry is fine)."""
        if not self.token:
            return True
        return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), self.token.encode("utf-8"))


def header_token(value: str) -> str:
    """The token a `TOKEN_HEADER` carries (bytes that are no UTF-8 stay a mismatch, never an error)."""
    return unquote(value)


def resolve_token(configured: str | None, home: Path, http_host: str) -> str | None:
    """The token the web chat requires (None: `token: ""` on loopback)."""
    if configured is not None:
        if not configured and not is_loopback(http_host):
            raise PlatformUnavailable(
                f"the web chat would listen on {http_host or 'every address'} with no token: remove "
                "platforms.webchat.token: \"\" (one is then generated), set one, or set http.host: 127.0.0.1")
        return configured or None
    path = home / TOKEN_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return _new_token(path)
    except OSError as exc:  # (a link: ELOOP)
        raise PlatformUnavailable(f"cannot read the web chat token {path}: {exc.strerror or exc} (it must be a "
                                  "regular file, not a link)") from None
    with os.fdopen(fd) as kept:
        info = os.fstat(fd)
        if info.st_mode & 0o077 and info.st_uid == os.geteuid():  # (one written by hand, or restored with
            os.fchmod(fd, 0o600)  # the umask's 0644: any local user could read it and be the machine's owner)
        return kept.read().strip() or _new_token(path)


def entry_url(base_url: str, token: str | None) -> str:
    """The page's address, with the token it needs."""
    return f"{base_url}/?token={token}" if token else f"{base_url}/"


def known_token(configured: str | None, home: Path) -> str | None:
    """The token in use, without making one (for `chatgate status`)."""
    if configured is not None:
        return configured or None
    try:
        return (home / TOKEN_FILE).read_text().strip() or None
    except OSError:
        return None


def _new_token(path: Path) -> str:
    token = secrets.token_urlsafe(24)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)  # (an empty file of another mode is written again: made private first)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return token
