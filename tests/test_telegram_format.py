"""Markdown → Telegram HTML rendering and splitting (platforms.telegram.render)."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import pytest

from platforms.telegram.render import _safe_href, render_for_telegram, to_telegram_html
from platforms.text import text_length

ALLOWED = {"b": set(), "i": set(), "u": set(), "s": set(), "code": {"class"}, "pre": set(),
           "a": {"href"}, "blockquote": set(), "tg-spoiler": set()}
ENTITIES = {"amp", "lt", "gt", "quot"}


class _WellFormed(HTMLParser):
    """Checks that HTML uses only Telegram's tags, closes them in order and escapes its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ALLOWED:
            self.errors.append(f"tag not allowed: <{tag}>")
        elif not {name for name, _ in attrs} <= ALLOWED[tag]:
            self.errors.append(f"attributes not allowed on <{tag}>: {attrs}")
        self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.errors.append(f"self-closing tag: <{tag}/>")

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> does not close {self.stack[-1:] or 'anything'}")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        for ch in "<>&":
            if ch in data:
                self.errors.append(f"unescaped {ch!r} in {data[:40]!r}")

    def handle_entityref(self, name: str) -> None:
        if name not in ENTITIES:
            self.errors.append(f"unknown entity &{name};")

    def handle_charref(self, name: str) -> None:
        self.errors.append(f"character reference &#{name};")

    def handle_comment(self, data: str) -> None:
        self.errors.append("comment")

    def handle_decl(self, decl: str) -> None:
        self.errors.append("declaration")

    def unknown_decl(self, data: str) -> None:
        self.errors.append("declaration")


def assert_well_formed(text: str) -> None:
    """Fail unless `text` is Telegram-valid, well-formed HTML without trailing whitespace."""
    parser = _WellFormed()
    parser.feed(text)
    parser.close()
    assert not parser.errors, parser.errors
    assert not parser.stack, f"unclosed tags: {parser.stack}"
    visible = re.sub(r"<[^>]*>", "", text)
    assert all(line == line.rstrip() for line in visible.split("\n")), "trailing whitespace"


def test_checker_catches_bad_html() -> None:
    for bad in ("<b>x", "<b><i>x</b></i>", "<span>x</span>", "a < b", "a & b", "&nbsp;", "x \n",
                "<pre>x </pre>", "<a onclick='y'>z</a>"):
        with pytest.raises(AssertionError):
            assert_well_formed(bad)


@pytest.mark.parametrize("source, expected", [
    ("**bold** and *it* and __b__ and _i_", "<b>bold</b> and <i>it</i> and <b>b</b> and <i>i</i>"),
    ("~~gone~~", "<s>gone</s>"),
    ("use `a<b && c>d`", "use <code>a&lt;b &amp;&amp; c&gt;d</code>"),
    ("**bold *and italic* ~~and struck~~**", "<b>bold <i>and italic</i> <s>and struck</s></b>"),
    ("***both***", "<i><b>both</b></i>"),
    ("[site](https://example.com/a?x=1&y=2)", '<a href="https://example.com/a?x=1&amp;y=2">site</a>'),
    ("[**bold** link](http://e.com)", '<a href="http://e.com"><b>bold</b> link</a>'),
    ("[me](mailto:a@b.c) [chat](tg://resolve?domain=x)",
     '<a href="mailto:a@b.c">me</a> <a href="tg://resolve?domain=x">chat</a>'),
    ("<https://auto.link/x>", '<a href="https://auto.link/x">https://auto.link/x</a>'),
    ("[x](javascript:alert(1))", "[x](javascript:alert(1))"),
    ("[file](ftp://host/f) [rel](docs/page.md)", "file rel"),
    ("![a *cat*](https://e.com/cat.png)", '<a href="https://e.com/cat.png">a cat</a>'),
    ("![](https://e.com/cat.png)", '<a href="https://e.com/cat.png">https://e.com/cat.png</a>'),
    ("5 > 3 & 2 < 4", "5 &gt; 3 &amp; 2 &lt; 4"),
    ("&amp; &copy;", "&amp; ©"),
    ("soft\nbreak and hard  \nbreak", "soft\nbreak and hard\nbreak"),
])
def test_inline(source: str, expected: str) -> None:
    rendered = to_telegram_html(source)
    assert rendered == expected
    assert_well_formed(rendered)


def test_href_is_checked_and_attribute_escaped() -> None:
    assert _safe_href('https://e.com/?q="x"&y=<1>') == "https://e.com/?q=&quot;x&quot;&amp;y=&lt;1&gt;"
    assert _safe_href("HTTP://E.COM") == "HTTP://E.COM"
    for refused in ("javascript:alert(1)", "data:text/html,x", "file:///etc/passwd", "/relative", "", None):
        assert _safe_href(refused) is None


@pytest.mark.parametrize("source, expected", [
    ("# Title *x*\n\ntext\n\n### Sub", "<b>Title <i>x</i></b>\n\ntext\n\n<b>Sub</b>"),
    ("Setext\n======\nbody", "<b>Setext</b>\n\nbody"),
    ("one\n\n\n\ntwo", "one\n\ntwo"),
    ("- a\n- b\n  - c\n    - d\n- e", "• a\n• b\n  • c\n    • d\n• e"),
    ("1. first\n2. second\n   - inner\n3. third", "1. first\n2. second\n   • inner\n3. third"),
    ("7. seven\n8. eight", "7. seven\n8. eight"),
    ("- loose\n\n- list", "• loose\n\n• list"),
    ("- item\n  continued", "• item\n  continued"),
    ("> quoted **text**\n>\n> more", "<blockquote>quoted <b>text</b>\n\nmore</blockquote>"),
    ("above\n\n---\n\nbelow", "above\n\n———\n\nbelow"),
])
def test_blocks(source: str, expected: str) -> None:
    rendered = to_telegram_html(source)
    assert rendered == expected
    assert_well_formed(rendered)


def test_code_fence_with_language_escapes_content() -> None:
    source = "Code:\n\n```python\nif a < b and c > d:\n    x = a & b\n```\n"
    expected = ('Code:\n\n<pre><code class="language-python">if a &lt; b and c &gt; d:\n'
                "    x = a &amp; b</code></pre>")
    assert to_telegram_html(source) == expected
    assert_well_formed(expected)


def test_code_without_language_and_indented_code() -> None:
    assert to_telegram_html("```\n<b>not bold</b>\n```") == "<pre>&lt;b&gt;not bold&lt;/b&gt;</pre>"
    assert to_telegram_html("    indented <x>") == "<pre>indented &lt;x&gt;</pre>"


def test_language_is_sanitised() -> None:
    rendered = to_telegram_html('```py"><script>\nx\n```')
    assert rendered == '<pre><code class="language-pyscript">x</code></pre>'


def test_raw_html_is_escaped_never_passed_through() -> None:
    source = "<div onclick='x'>block</div>\n\ninline <b>tag</b> and <script>alert(1)</script>"
    expected = ("&lt;div onclick='x'&gt;block&lt;/div&gt;\n\n"
                "inline &lt;b&gt;tag&lt;/b&gt; and &lt;script&gt;alert(1)&lt;/script&gt;")
    rendered = to_telegram_html(source)
    assert rendered == expected
    assert_well_formed(rendered)


def test_table_becomes_aligned_pre() -> None:
    source = "| Fruit | Qty |\n|:------|----:|\n| apple & pear | 3 |\n| **kiwi** | 12 |\n"
    expected = ("<pre>Fruit        | Qty\n"
                "-------------+----\n"
                "apple &amp; pear |   3\n"
                "kiwi         |  12</pre>")
    rendered = to_telegram_html(source)
    assert rendered == expected
    assert_well_formed(rendered)


def test_mixed_document_is_well_formed() -> None:
    source = ("# Report\n\n> - quoted list with `code`\n>   ```js\n>   a<b\n>   ```\n\n"
              "1. **one** [l](https://x.y)\n   > nested quote\n\n| a |\n|---|\n| <i> |\n\n"
              "<!-- comment -->\n\n***\n\ntrailing   \n")
    rendered = to_telegram_html(source)
    assert_well_formed(rendered)
    assert "&lt;!-- comment --&gt;" in rendered and rendered.endswith("trailing")


def test_no_trailing_whitespace() -> None:
    source = "-\n- b\n\n```\nx = 1   \n\ny\t\n```\n\n*x*&#32;\n[ a ](http://l)\n\n   \n"
    expected = '•\n• b\n\n<pre>x = 1\n\ny</pre>\n\n<i>x</i>\n<a href="http://l"> a</a>'
    assert to_telegram_html(source) == expected


def test_empty_input() -> None:
    assert to_telegram_html("") == ""
    assert render_for_telegram("") == []
    assert render_for_telegram("  \n\n ") == []


def test_short_reply_is_one_part_with_markdown_fallback() -> None:
    [reply] = render_for_telegram("Hello **world** & <you>")
    assert reply.text == "Hello <b>world</b> &amp; &lt;you&gt;"
    assert reply.plain == "Hello **world** & <you>"


def _pre_contents(text: str) -> list[str]:
    found = re.findall(r'<pre><code class="language-python">(.*?)</code></pre>', text, re.S)
    return [html.unescape(piece) for piece in found]


def test_long_reply_with_code_and_emoji_is_split() -> None:
    code = "\n".join(f"def f{i}(x):  # compare x < {i} & x > -{i}\n    return x * {i}" for i in range(120))
    intro = "\n\n".join(f"Paragraph {i} 😀 " + "😀" * 60 for i in range(20))
    source = f"{intro}\n\nHere is the code:\n\n```python\n{code}\n```\n\nDone 😀."
    assert len(source) > 5000 and text_length(source, "utf16") > len(source) + 1000

    parts = render_for_telegram(source)
    assert len(parts) >= 3
    for part in parts:
        assert text_length(part.text, "utf16") <= 4096
        assert part.plain is not None and text_length(part.plain, "utf16") <= 4096
        assert_well_formed(part.text)
    pieces = [piece for part in parts for piece in _pre_contents(part.text)]
    assert len(pieces) >= 2  # the code block itself was split and reopened
    assert "\n".join(pieces) == code
    emoji = sum(html.unescape(part.text).count("😀") for part in parts)
    assert emoji == source.count("😀")
    assert parts[-1].text.endswith("Done 😀.")


@pytest.mark.parametrize("char, entity", [("&", "&amp;"), ("<", "&lt;")])
def test_escaping_growth_forces_resplit(char: str, entity: str) -> None:
    source = "\n".join("ok " + char * 97 for _ in range(40))  # 3999 chars: one markdown part
    assert text_length(source, "utf16") <= 4096
    assert text_length(to_telegram_html(source), "utf16") > 4096

    parts = render_for_telegram(source)
    assert len(parts) > 1
    for part in parts:
        assert text_length(part.text, "utf16") <= 4096
        assert part.plain is not None and text_length(part.plain, "utf16") <= 4096
        assert_well_formed(part.text)
    assert sum(part.text.count(entity) for part in parts) == 40 * 97
    assert "".join(part.plain or "" for part in parts).count(char) == 40 * 97


def test_small_limit_still_fits() -> None:
    source = "**" + "& " * 200 + "**\n\n```\n" + "<>" * 300 + "\n```"
    parts = render_for_telegram(source, limit=100)
    assert parts
    for part in parts:
        assert text_length(part.text, "utf16") <= 100
        assert_well_formed(part.text)
