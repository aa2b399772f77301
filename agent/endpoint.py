"""The model endpoint's address, kept out of what people read and stripped of credentials in logs.

`llm.base_url` may carry credentials (`https://user:pass@host/v1`, a key in the query string).
Text for a chat names no address at all ("the model endpoint"); a log line shows the address
without user, password, query or fragment. Any client of the endpoint uses these two helpers.
"""

from __future__ import annotations

from urllib.parse import urlsplit

NEUTRAL = "the model endpoint"


def redacted(url: str) -> str:
    """`url` as a log may show it: scheme, host, port and path only."""
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
    except ValueError:
        return "(an unparsable URL)"
    return f"{parts.scheme}://{host}{parts.path}" if parts.scheme else f"{host}{parts.path}"


def _secrets(url: str) -> list[str]:
    """The parts of `url` that may be credentials, longest first."""
    try:
        parts = urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
    except ValueError:
        return [url]
    found = {userinfo, *userinfo.split(":", 1), parts.query, *(p.partition("=")[2] for p in parts.query.split("&")),
             parts.fragment}
    return sorted((s for s in found if len(s) >= 3), key=len, reverse=True)


def for_logs(text: str, url: str) -> str:
    """`text` (an error's message) with the address in its redacted form and no credential left."""
    text = text.replace(url, redacted(url))
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


def for_people(text: str, url: str) -> str:
    """`text` (e.g. the endpoint's own error message) with no trace of the address: the address, its
    host and port are "the model endpoint", credentials are gone."""
    text = for_logs(text, url)
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return text
    names = [redacted(url), redacted(url).rstrip("/")]
    if host and port:
        names += [f"{host}:{port}", f"[{host}]:{port}"]
    if host and ("." in host or ":" in host):  # a name or an IP (a bare "llm" is no address, and a common word)
        names.append(host)
    for name in sorted(set(names), key=len, reverse=True):
        text = text.replace(name, NEUTRAL)
    return text
