"""The model's Markdown as Slack mrkdwn, in parts that fit one section block (3,000 characters).

The walk over the Markdown is `platforms.markdown`; this module is its Slack dialect: `*bold*`,
`_italics_`, `~strike~`, `` `code` ``, fenced blocks, `> ` quotes and `<url|label>` links (only
http, https and mailto). `&`, `<` and `>` are escaped everywhere, so the model's text can neither
ping (`<!channel>`, `<@U…>`) nor forge a link.
"""

from __future__ import annotations

from platforms.base import Reply
from platforms.markdown import Dialect, fit, link_scheme, render

SECTION_LIMIT = 3000  # characters of mrkdwn in one section block
_SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_URL_ESCAPES = str.maketrans({"&": "&amp;", "<": "%3C", ">": "%3E", "|": "%7C", " ": "%20"})


def escape(text: str) -> str:
    """Slack's three control characters as entities."""
    return text.translate(_ESCAPES)


def _link(href: str, label: str) -> str:
    """`<url|label>` (label already escaped), or just the label for a refused link."""
    if link_scheme(href) not in _SAFE_SCHEMES:
        return label
    url = href.translate(_URL_ESCAPES)
    return f"<{url}|{label}>" if label and label != escape(href) else f"<{url}>"


def _pre(body: str, _lang: str) -> str:
    """A fenced block. Slack has no longer fence and no escape inside one, so a run of backticks in
    the body is broken with zero-width spaces: it cannot close the block early and let what follows
    pose as the message's own text (an approval prompt's command, say)."""
    while "``" in body:
        body = body.replace("``", "`\u200b`")
    return f"```\n{body}\n```"


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.split("\n"))


MRKDWN = Dialect(
    escape=escape,
    strong=lambda text: f"*{text}*",
    em=lambda text: f"_{text}_",
    strike=lambda text: f"~{text}~",
    code=lambda text: f"`{text}`",
    link=_link,
    pre=_pre,
    quote=_quote,
)


def to_mrkdwn(markdown: str) -> str:
    """Markdown as mrkdwn, without trailing spaces."""
    return "\n".join(line.rstrip() for line in render(markdown, MRKDWN).split("\n")).strip()


def plain_text(markdown: str) -> str:
    """Markdown shown as it is (escaped), for parts that render to nothing and for the fallback."""
    return escape(markdown).strip()


def render_for_slack(markdown: str, limit: int = SECTION_LIMIT) -> list[Reply]:
    """mrkdwn parts of at most `limit` characters; each part's `plain` is its Markdown."""
    return fit(markdown, limit, to_mrkdwn, plain_text)
