"""The model's Markdown rendered as Telegram HTML and split to Telegram's message limit.

Markdown is parsed with markdown-it-py and its syntax tree is walked node by node. Only the
tags Telegram's HTML parse mode accepts are produced; every other construct (headings, lists,
tables, rules, raw HTML from the source) becomes plain, escaped text.
"""

from __future__ import annotations

import html
import re
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from platforms.base import Reply
from platforms.text import split_text, text_length

TELEGRAM_LIMIT = 4096  # UTF-16 code units per message

_MD = MarkdownIt("commonmark").enable(["strikethrough", "table"])
_SAFE_SCHEMES = frozenset({"http", "https", "tg", "mailto"})
_INLINE_TAGS = {"strong": "b", "em": "i", "s": "s"}
_NOT_LANG = re.compile(r"[^\w+#.-]")
_RULE = "———"
_CLOSING_TAG = re.compile(r"</[a-z-]+>")


def _esc(text: str) -> str:
    """Escape text content for Telegram HTML (&, <, >)."""
    return html.escape(text, quote=False)


def _safe_href(href: str | None) -> str | None:
    """The href escaped for an attribute, or None when its scheme is not allowed."""
    if not href:
        return None
    try:
        scheme = urlsplit(href).scheme.lower()
    except ValueError:
        return None
    return html.escape(href, quote=True) if scheme in _SAFE_SCHEMES else None


def _link(href: str | None, label: str) -> str:
    """An <a> around `label` (already HTML), or just the label for a refused link."""
    safe = _safe_href(href)
    if safe is None:
        return label
    return f'<a href="{safe}">{label or safe}</a>'


def _plain(node: SyntaxTreeNode) -> str:
    """The text of a node without any markup (table cells, image alt text)."""
    if node.type in ("text", "code_inline", "html_inline"):
        return node.content
    if node.type in ("softbreak", "hardbreak"):
        return " "
    return "".join(_plain(child) for child in node.children)


def _inline(node: SyntaxTreeNode) -> str:
    """Render the inline children of `node` (emphasis, code, links, text) as HTML."""
    out: list[str] = []
    for child in node.children:
        kind = child.type
        if kind in _INLINE_TAGS:
            tag, inner = _INLINE_TAGS[kind], _inline(child)
            out.append(f"<{tag}>{inner}</{tag}>" if inner.strip() else inner)  # no empty entities
        elif kind == "code_inline":
            code = _esc(child.content)
            out.append(f"<code>{code}</code>" if code.strip() else code)
        elif kind in ("softbreak", "hardbreak"):
            out.append("\n")
        elif kind == "link":
            out.append(_link(str(child.attrs.get("href", "")), _inline(child)))
        elif kind == "image":
            src = str(child.attrs.get("src", ""))
            out.append(_link(src, _esc(_plain(child)) or _esc(src)))
        elif child.children:  # a container this renderer does not know: keep its content
            out.append(_inline(child))
        else:  # text, html_inline and anything else literal: shown as escaped text
            out.append(_esc(child.content))
    return "".join(out)


def _code(content: str, info: str) -> str:
    """A code block as <pre>, with a language class when the info string names one."""
    body = _esc("\n".join(line.rstrip() for line in content.rstrip().lstrip("\n").split("\n")))
    lang = _NOT_LANG.sub("", info.split()[0]) if info.strip() else ""
    if not body:
        return ""
    if lang:
        return f'<pre><code class="language-{lang}">{body}</code></pre>'
    return f"<pre>{body}</pre>"


def _list(node: SyntaxTreeNode) -> str:
    """A bullet or ordered list as "• item" / "1. item" lines, nested lists indented."""
    ordered = node.type == "ordered_list"
    number = int(str(node.attrs.get("start", 1))) if ordered else 1
    tight = all(p.hidden for item in node.children for p in item.children if p.type == "paragraph")
    sep = "\n" if tight else "\n\n"
    items: list[str] = []
    for item in node.children:
        marker = f"{number}." if ordered else "•"
        number += 1
        lines = _blocks(item.children, sep).split("\n")
        pad = " " * (len(marker) + 1)
        rest = [pad + line if line else line for line in lines[1:]]
        items.append("\n".join([f"{marker} {lines[0]}", *rest]))
    return sep.join(items)


def _align(cell: str, width: int, style: str) -> str:
    """Pad one table cell to `width` following the column's text-align style."""
    if "right" in style:
        return cell.rjust(width)
    if "center" in style:
        return cell.center(width)
    return cell.ljust(width)


def _table(node: SyntaxTreeNode) -> str:
    """A table as a <pre> block of aligned plain-text columns."""
    rows: list[list[str]] = []
    styles: list[str] = []
    for section in node.children:  # thead, tbody
        for row in section.children:
            rows.append([" ".join(_plain(cell).split()) for cell in row.children])
            if not styles:
                styles = [str(cell.attrs.get("style", "")) for cell in row.children]
    if not rows:
        return ""
    count = max(len(row) for row in rows)
    rows = [row + [""] * (count - len(row)) for row in rows]
    styles += [""] * (count - len(styles))
    widths = [max(len(row[i]) for row in rows) for i in range(count)]

    def line(row: list[str]) -> str:
        return " | ".join(_align(c, w, s) for c, w, s in zip(row, widths, styles)).rstrip()

    lines = [line(rows[0]), "-+-".join("-" * w for w in widths), *(line(r) for r in rows[1:])]
    return f"<pre>{_esc(chr(10).join(lines))}</pre>"


def _block(node: SyntaxTreeNode) -> str:
    """Render one block-level node as HTML text (may span several lines)."""
    kind = node.type
    if kind == "paragraph":
        return "".join(_inline(child) for child in node.children)
    if kind == "heading":
        text = "".join(_inline(child) for child in node.children)
        return f"<b>{text}</b>" if text.strip() else ""
    if kind in ("fence", "code_block"):
        return _code(node.content, node.info)
    if kind == "blockquote":
        inner = _blocks(node.children)
        return f"<blockquote>{inner}</blockquote>" if inner else ""
    if kind in ("bullet_list", "ordered_list"):
        return _list(node)
    if kind == "table":
        return _table(node)
    if kind == "hr":
        return _RULE
    if kind == "inline":
        return _inline(node)
    if node.children:
        return _blocks(node.children)
    return _esc(node.content.strip("\n"))  # html_block and anything literal


def _blocks(nodes: list[SyntaxTreeNode], sep: str = "\n\n") -> str:
    """Render sibling blocks, skipping empty ones, joined by `sep`."""
    return sep.join(text for text in (_block(node) for node in nodes) if text)


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
    rendered = _blocks(SyntaxTreeNode(_MD.parse(markdown)).children)
    return "\n".join(_rstrip_line(line) for line in rendered.split("\n")).strip()


def _fit(markdown: str, limit: int, budget: int) -> list[Reply]:
    """Split `markdown` at `budget` units, shrinking the budget where the HTML outgrows `limit`."""
    replies: list[Reply] = []
    for part in split_text(markdown, budget, "utf16"):
        rendered = to_telegram_html(part) or _escaped_text(part)
        if text_length(rendered, "utf16") <= limit:
            replies.append(Reply(text=rendered, plain=part))
        elif budget > limit // 5:
            replies.extend(_fit(part, limit, max(budget * 4 // 5, limit // 5)))
        else:  # escaping grows text at most 5x (& -> &amp;): escaped plain text always fits here
            pieces = split_text(part, max(limit // 5, 1), "utf16")
            replies.extend(Reply(text=_escaped_text(piece), plain=piece) for piece in pieces)
    return replies


def render_for_telegram(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[Reply]:
    """Render Markdown as Telegram HTML parts, each at most `limit` UTF-16 code units."""
    return _fit(markdown, limit, limit)
