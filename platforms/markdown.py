"""The model's Markdown, walked once and written in a platform's own markup (a `Dialect`).

Markdown is parsed with markdown-it-py (CommonMark, tables, strikethrough) and its syntax tree
is walked node by node. What a dialect cannot express becomes plain text it can: headings a
bold line, lists "•" / "1." lines (nested lists indented), tables an aligned monospace block,
rules a short line, raw HTML from the source escaped text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit

from platforms.base import Reply
from platforms.text import split_text, text_length

if TYPE_CHECKING:
    from markdown_it.tree import SyntaxTreeNode


@cache
def _parser() -> Any:
    """markdown-it, imported and built at the first reply (not on the way to ready)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable(["strikethrough", "table"])


@dataclass(frozen=True)
class Dialect:
    """How one platform writes each construct. Every function gets text already escaped."""

    escape: Callable[[str], str]
    strong: Callable[[str], str]
    em: Callable[[str], str]
    strike: Callable[[str], str]
    code: Callable[[str], str]  # inline code
    link: Callable[[str, str], str]  # (href as written in the source, label) → markup
    pre: Callable[[str, str], str]  # (escaped body, language or "") → a code block
    quote: Callable[[str], str]
    rule: str = "———"


def link_scheme(href: str | None) -> str:
    """A link target's scheme in lower case ("" when it has none or cannot be parsed): what each
    dialect checks against the schemes it lets a person click."""
    try:
        return urlsplit((href or "").strip()).scheme.lower()
    except ValueError:
        return ""


def plain(node: SyntaxTreeNode) -> str:
    """The text of a node without any markup (table cells, image alt text)."""
    if node.type in ("text", "code_inline", "html_inline"):
        return node.content
    if node.type in ("softbreak", "hardbreak"):
        return " "
    return "".join(plain(child) for child in node.children)


class _Writer:
    def __init__(self, dialect: Dialect) -> None:
        self.d = dialect

    def inline(self, node: SyntaxTreeNode) -> str:
        d, out = self.d, []
        for child in node.children:
            kind = child.type
            if kind in ("strong", "em", "s"):
                inner = self.inline(child)
                wrap = {"strong": d.strong, "em": d.em, "s": d.strike}[kind]
                out.append(wrap(inner) if inner.strip() else inner)  # no empty markup
            elif kind == "code_inline":
                code = d.escape(child.content)
                out.append(d.code(code) if code.strip() else code)
            elif kind in ("softbreak", "hardbreak"):
                out.append("\n")
            elif kind == "link":
                out.append(d.link(str(child.attrs.get("href", "")), self.inline(child)))
            elif kind == "image":
                src = str(child.attrs.get("src", ""))
                out.append(d.link(src, d.escape(plain(child)) or d.escape(src)))
            elif child.children:  # a container this writer does not know: keep its content
                out.append(self.inline(child))
            else:  # text, html_inline and anything else literal: shown as escaped text
                out.append(d.escape(child.content))
        return "".join(out)

    def code(self, content: str, info: str) -> str:
        body = self.d.escape("\n".join(line.rstrip() for line in content.rstrip().lstrip("\n").split("\n")))
        return self.d.pre(body, info.split()[0] if info.strip() else "") if body else ""

    def list(self, node: SyntaxTreeNode) -> str:
        ordered = node.type == "ordered_list"
        number = int(str(node.attrs.get("start", 1))) if ordered else 1
        tight = all(p.hidden for item in node.children for p in item.children if p.type == "paragraph")
        sep = "\n" if tight else "\n\n"
        items: list[str] = []
        for item in node.children:
            marker = f"{number}." if ordered else "•"
            number += 1
            lines = self.blocks(item.children, sep).split("\n")
            pad = " " * (len(marker) + 1)
            rest = [pad + line if line else line for line in lines[1:]]
            items.append("\n".join([f"{marker} {lines[0]}", *rest]))
        return sep.join(items)

    def table(self, node: SyntaxTreeNode) -> str:
        """A table as a block of aligned plain-text columns."""
        rows: list[list[str]] = []
        styles: list[str] = []
        for section in node.children:  # thead, tbody
            for row in section.children:
                rows.append([" ".join(plain(cell).split()) for cell in row.children])
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
        return self.d.pre(self.d.escape("\n".join(lines)), "")

    def block(self, node: SyntaxTreeNode) -> str:
        kind = node.type
        if kind == "paragraph":
            return "".join(self.inline(child) for child in node.children)
        if kind == "heading":
            text = "".join(self.inline(child) for child in node.children)
            return self.d.strong(text) if text.strip() else ""
        if kind in ("fence", "code_block"):
            return self.code(node.content, node.info)
        if kind == "blockquote":
            inner = self.blocks(node.children)
            return self.d.quote(inner) if inner else ""
        if kind in ("bullet_list", "ordered_list"):
            return self.list(node)
        if kind == "table":
            return self.table(node)
        if kind == "hr":
            return self.d.rule
        if kind == "inline":
            return self.inline(node)
        if node.children:
            return self.blocks(node.children)
        return self.d.escape(node.content.strip("\n"))  # html_block and anything literal

    def blocks(self, nodes: list[SyntaxTreeNode], sep: str = "\n\n") -> str:
        return sep.join(text for text in (self.block(node) for node in nodes) if text)


def _align(cell: str, width: int, style: str) -> str:
    """Pad one table cell to `width` following the column's text-align style."""
    if "right" in style:
        return cell.rjust(width)
    if "center" in style:
        return cell.center(width)
    return cell.ljust(width)


# One line of words and plain punctuation that starts with a letter: nothing in it Markdown would read as
# syntax (no `*_[]<&#>|~\`, no list number, no line break, no space at either end): it is that text, escaped.
_PLAIN = re.compile(r"[^\W\d_](?:[^\W_]|[ ,.;:?!'\"()/%@$])*(?<! )")


def render(markdown: str, dialect: Dialect) -> str:
    """`markdown` written in `dialect` (not yet split, not stripped)."""
    if _PLAIN.fullmatch(markdown):  # a short plain answer needs no parser (nor its import at the first reply)
        return dialect.escape(markdown)
    from markdown_it.tree import SyntaxTreeNode

    return _Writer(dialect).blocks(SyntaxTreeNode(_parser().parse(markdown)).children)


def fit(markdown: str, limit: int, to_markup: Callable[[str], str], as_text: Callable[[str], str],
        unit: str = "chars") -> list[Reply]:
    """`markdown` split into parts whose markup (`to_markup`) is at most `limit` long.

    A part is cut from the Markdown (fences kept whole), then rendered; where the markup grows
    past the limit (escaping: `&` → `&amp;`) the part is cut smaller. `as_text` shows a part as
    escaped plain text: for parts that render to nothing, and the last resort (escaping grows a
    text at most five times, so a fifth of the limit always fits).
    """
    return _fit(markdown, limit, limit, to_markup, as_text, unit)


def _fit(markdown: str, limit: int, budget: int, to_markup: Callable[[str], str], as_text: Callable[[str], str],
         unit: str) -> list[Reply]:
    replies: list[Reply] = []
    for part in split_text(markdown, budget, unit):
        rendered = to_markup(part) or as_text(part)
        if text_length(rendered, unit) <= limit:
            replies.append(Reply(text=rendered, plain=part))
        elif budget > limit // 5:
            replies.extend(_fit(part, limit, max(budget * 4 // 5, limit // 5), to_markup, as_text, unit))
        else:
            pieces = split_text(part, max(limit // 5, 1), unit)
            replies.extend(Reply(text=as_text(piece), plain=piece) for piece in pieces)
    return replies
