"""The model's Markdown rendered as Telegram HTML and split to Telegram's message limit.

The walk over the Markdown is `platforms.markdown`; this module is its Telegram dialect. Only
the tags Telegram's HTML parse mode accepts are produced; every other construct (headings,
lists, tables, rules, raw HTML from the source) becomes plain, escaped text.
"""

from __future__ import annotations

import html
import re

from platforms.base import Reply
from platforms.markdown import Dialect, fit, link_scheme, render

TELEGRAM_LIMIT = 4096  # UTF-16 code units per message

_SAFE_SCHEMES = frozenset({"http", "https", "tg", "mailto"})
_NOT_LANG = re.compile(r"[^\w+#.-]")
_CLOSING_TAG = re.compile(r"</[a-z-]+>")


def _esc(text: str) -> str:
    """Escape text content for Telegram HTML (&, <, >)."""
    return html.escape(text, quote=False)


def _safe_href(href: str | None) -> str | None:
    """The href escaped for an attribute, or None when its scheme is not allowed."""
    return html.escape(href, quote=True) if href and link_scheme(href) in _SAFE_SCHEMES else None


def _link(href: str | None, label: str) -> str:
    """An <a> around `label` (already HTML), or just the label for a refused link."""
    safe = _safe_href(href)
    if safe is None:
        return label
    return f'<a href="{safe}">{label or safe}</a>'


def _pre(body: str, info: str) -> str:
    """A code block as <pre>, with a language class when the info string names one."""
    lang = _NOT_LANG.sub("", info)
    return f'<pre><code class="language-{lang}">{body}</code></pre>' if lang else f"<pre>{body}</pre>"


TELEGRAM_HTML = Dialect(
    escape=_esc,
    strong=lambda text: f"<b>{text}</b>",
    em=lambda text: f"<i>{text}</i>",
    strike=lambda text: f"<s>{text}</s>",
    code=lambda text: f"<code>{text}</code>",
    link=_link,
    pre=_pre,
    quote=lambda text: f"<blockquote>{text}</blockquote>",
)


def _rstrip_line(line: str) -> str:
    """Drop whitespace at the end of a line, also where it hides before closing tags."""
    tail = ""
    while True:
        line = line.rstrip()
        start = line.rfind("</")
        if start == -1 or not _CLOSING_TAG.fullmatch(line, start):
            return line + tail
        line, tail = line[:start], line[start:] + tail


def _escaped_text(text: str) -> str:
    """Markdown shown as escaped plain text, for parts that render to nothing or cannot fit."""
    return "\n".join(_rstrip_line(line) for line in _esc(text).split("\n")).strip()


def to_telegram_html(markdown: str) -> str:
    """Render Markdown as Telegram HTML: only Telegram's tags, escaped text, no trailing spaces."""
    rendered = render(markdown, TELEGRAM_HTML)
    return "\n".join(_rstrip_line(line) for line in rendered.split("\n")).strip()


def render_for_telegram(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[Reply]:
    """Render Markdown as Telegram HTML parts, each at most `limit` UTF-16 code units."""
    return fit(markdown, limit, to_telegram_html, _escaped_text, "utf16")
