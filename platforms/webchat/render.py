"""The model's Markdown as the HTML the web chat page shows.

The walk over the Markdown is `platforms.markdown`; this module is its HTML dialect: `<strong>`,
`<em>`, `<s>`, `<code>`, `<pre><code>` blocks, `<blockquote>` and `<a>` links (only http, https
and mailto; any other link is shown as its label). Headings come out bold; lists and tables as
the walker writes them (plain text lines, tables in a `<pre>` block). Every piece of text is
escaped (`& < > "`), so raw HTML in the model's answer is shown, never run. Bare http(s) URLs
in the text become links too.

Line breaks stay newlines: the page shows a bot bubble with `white-space: pre-wrap`, which
keeps paragraphs, list indentation and code blocks as written. Newlines right next to a block
element (`<pre>`, `<blockquote>`, `<hr>`) are dropped, since the block itself starts a new line.
"""

from __future__ import annotations

import logging
import re

from platforms import markdown as _markdown

log = logging.getLogger(__name__)

SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})
_NOT_LANG = re.compile(r"[^\w+#.-]")
# Newlines around our own block tags (all text is escaped, so a literal "<pre>" can only be ours).
_AROUND_BLOCKS = re.compile(r"\n*(</?(?:pre|blockquote)>|<hr>)\n*")
_PRE = re.compile(r"(<pre>.*?</pre>)", re.DOTALL)
# Inside escaped text a URL ends at whitespace or at an escaped quote or angle bracket.
_BARE_URL = re.compile(r"\bhttps?://(?:(?!&quot;|&lt;|&gt;)[^\s<>\"])+", re.IGNORECASE)
_URL_TAIL = ".,;:!?)]}'*_&"
_TAG = re.compile(r"(<[^>]*>)")


def escape(text: str) -> str:
    """Text (or an attribute value) as HTML: `&`, `<`, `>` and `"` as entities."""
    return text.translate(_ESCAPES)


def safe_href(href: str | None) -> str | None:
    """`href` escaped for an attribute, or None when it is not an http, https or mailto URL
    (relative links would point into the chat's own site, and `javascript:` must never run)."""
    return escape(href.strip()) if href and _markdown.link_scheme(href) in SAFE_SCHEMES else None


def _anchor(href: str, label: str) -> str:
    return f'<a href="{href}" rel="noopener noreferrer" target="_blank">{label}</a>'


def _link(href: str, label: str) -> str:
    """A link around `label` (already HTML), or just the label for a refused link."""
    safe = safe_href(href)
    if safe is None:
        return label
    return _anchor(safe, label or safe)


def _pre(body: str, info: str) -> str:
    """A code block; the language (when the info string names one) as a class for the page."""
    lang = _NOT_LANG.sub("", info)
    return f'<pre><code class="language-{lang}">{body}</code></pre>' if lang else f"<pre><code>{body}</code></pre>"


def _link_bare_urls(html: str) -> str:
    """Bare http(s) URLs in text (not in a link, inline code or a code block) made links."""
    out: list[str] = []
    inside = 0  # depth of <a>, <code> and <pre> elements around the current text
    for piece in _TAG.split(html):
        if piece.startswith("<"):
            name = piece.strip("</>").split(" ", 1)[0]
            if name in ("a", "code", "pre"):
                inside += -1 if piece.startswith("</") else 1
            out.append(piece)
        elif inside or "://" not in piece:
            out.append(piece)
        else:
            out.append(_BARE_URL.sub(_bare_link, piece))
    return "".join(out)


def _bare_link(match: re.Match[str]) -> str:
    """One bare URL as a link; punctuation at its end (and a ")" it did not open) stays text."""
    url = match.group(0)
    end = len(url)
    while end:
        head = url[:end]
        if head.endswith("&amp;"):
            end -= len("&amp;")
        elif head[-1] == ")" and head.count("(") >= head.count(")"):
            break
        elif head[-1] in _URL_TAIL:
            end -= 1
        else:
            break
    link, tail = url[:end], url[end:]
    if link.lower().rstrip("/").endswith(("http:", "https:")):
        return url
    return _anchor(link, link) + tail


def _tidy(html: str) -> str:
    """No newlines next to block elements (outside code blocks), no spaces at line ends."""
    parts = _PRE.split(html)
    for i in range(0, len(parts), 2):  # even parts are outside <pre>
        parts[i] = "\n".join(line.rstrip() for line in parts[i].split("\n"))
    return _AROUND_BLOCKS.sub(r"\1", "".join(parts)).strip()


HTML_DIALECT = _markdown.Dialect(
    escape=escape,
    strong=lambda text: f"<strong>{text}</strong>",
    em=lambda text: f"<em>{text}</em>",
    strike=lambda text: f"<s>{text}</s>",
    code=lambda text: f"<code>{text}</code>",
    link=_link,
    pre=_pre,
    quote=lambda text: f"<blockquote>{text}</blockquote>",
    rule="<hr>",
)


def to_html(markdown: str) -> str:
    """`markdown` as safe HTML for a bubble shown with `white-space: pre-wrap`."""
    return _link_bare_urls(_tidy(_markdown.render(markdown, HTML_DIALECT)))


def to_html_or_none(markdown: str) -> str | None:
    """`to_html`, or None (the page then shows the plain text) if rendering fails."""
    try:
        return to_html(markdown)
    except Exception:
        log.exception("could not render a web chat message as HTML")
        return None
