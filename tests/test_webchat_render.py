"""The web chat's HTML dialect of the one Markdown walker (platforms/webchat/render.py)."""

from __future__ import annotations

import re

import pytest

from platforms.webchat.render import escape, to_html


def test_plain_text_is_escaped():
    assert to_html('a & b < c > d "e"') == "a &amp; b &lt; c &gt; d &quot;e&quot;"
    assert escape("<&>\"") == "&lt;&amp;&gt;&quot;"


@pytest.mark.parametrize("source", [
    "<script>alert(1)</script>",
    "before\n\n<script>alert(1)</script>\n\nafter",  # an HTML block
    "inline <script>alert(1)</script> too",  # inline HTML
    "<img src=x onerror=alert(1)>",
])
def test_raw_html_is_shown_not_run(source):
    html = to_html(source)
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;" in html or "&lt;img" in html


def test_emphasis():
    assert to_html("Hello **there**") == "Hello <strong>there</strong>"
    assert to_html("*one* _two_ ~~three~~ `four`") == "<em>one</em> <em>two</em> <s>three</s> <code>four</code>"
    assert to_html("***both***") in ("<em><strong>both</strong></em>", "<strong><em>both</em></strong>")


def test_inline_code_is_escaped_and_not_formatted():
    assert to_html("`<b>**x**</b>`") == "<code>&lt;b&gt;**x**&lt;/b&gt;</code>"


def test_links():
    assert to_html("[docs](https://example.com/a?b=1&c=2)") == (
        '<a href="https://example.com/a?b=1&amp;c=2" rel="noopener noreferrer" target="_blank">docs</a>')
    assert to_html("[**bold** label](http://x.test)") == (
        '<a href="http://x.test" rel="noopener noreferrer" target="_blank"><strong>bold</strong> label</a>')
    assert 'href="mailto:a@b.test"' in to_html("[mail](mailto:a@b.test)")
    assert to_html("<https://auto.test/x>") == (
        '<a href="https://auto.test/x" rel="noopener noreferrer" target="_blank">https://auto.test/x</a>')


def test_a_quote_in_a_link_cannot_leave_the_attribute():
    html = to_html('[x](<https://a.test/"onmouseover="alert(1)>)')
    assert re.fullmatch(r'<a href="[^"]*" rel="noopener noreferrer" target="_blank">x</a>', html), html


@pytest.mark.parametrize("source", [
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x](javascript&#58;alert(1))",
    "<javascript:alert(1)>",
    "[x](data:text/html;base64,PHNjcmlwdD4=)",
    "[x](vbscript:msgbox)",
    "![x](javascript:alert(1))",
])
def test_dangerous_links_are_refused(source):
    html = to_html(source)
    assert "<a" not in html
    assert "href" not in html


@pytest.mark.parametrize("source, label", [
    ("[label](ftp://files.test/x)", "label"),
    ("[relative](/etc/passwd)", "relative"),
    ("[proto-relative](//evil.test/x)", "proto-relative"),
])
def test_other_schemes_keep_only_the_label(source, label):
    assert to_html(source) == label


def test_images_are_links_not_images():
    assert to_html("![a cat](https://img.test/cat.png)") == (
        '<a href="https://img.test/cat.png" rel="noopener noreferrer" target="_blank">a cat</a>')


def test_bare_urls_become_links_but_not_in_code():
    html = to_html("see https://a.test/wiki/Foo_(bar). Or (https://b.test/x?y=1&z=2), not `https://c.test`")
    assert '<a href="https://a.test/wiki/Foo_(bar)" rel="noopener noreferrer" target="_blank">' in html
    assert '>https://a.test/wiki/Foo_(bar)</a>. Or (' in html
    assert '<a href="https://b.test/x?y=1&amp;z=2" rel="noopener noreferrer" target="_blank">' in html
    assert "<code>https://c.test</code>" in html
    assert to_html("```\nhttps://d.test\n```") == "<pre><code>https://d.test</code></pre>"


def test_code_blocks_stay_intact():
    source = "Run this:\n\n```python\ndef f(x):\n    if x < 1:\n        return '<&>'\n\n    return x\n```\n\nDone."
    assert to_html(source) == ('Run this:<pre><code class="language-python">def f(x):\n    if x &lt; 1:\n'
                               "        return '&lt;&amp;&gt;'\n\n    return x</code></pre>Done.")


def test_an_unclosed_fence_while_streaming_is_a_code_block():
    assert to_html("partial:\n\n```sh\nls -la") == 'partial:<pre><code class="language-sh">ls -la</code></pre>'


def test_code_block_language_is_sanitised():
    assert to_html('```py"><script>\nx\n```') == '<pre><code class="language-pyscript">x</code></pre>'


def test_blockquote_headings_rules():
    assert to_html("> quoted **words**\n> more") == "<blockquote>quoted <strong>words</strong>\nmore</blockquote>"
    assert to_html("# Title\n\ntext") == "<strong>Title</strong>\n\ntext"
    assert to_html("one\n\n---\n\ntwo") == "one<hr>two"


def test_lists_and_tables_as_the_walker_writes_them():
    assert to_html("- a\n- b\n  - c\n\n1. x\n2. y") == "• a\n• b\n  • c\n\n1. x\n2. y"
    assert to_html("| a | b |\n|---|---|\n| 1 | 22 |") == "<pre><code>a | b\n--+---\n1 | 22</code></pre>"


def test_paragraphs_and_line_breaks_are_newlines():
    assert to_html("one\ntwo  \nthree\n\nfour") == "one\ntwo\nthree\n\nfour"


def test_every_tag_is_one_the_page_accepts():
    source = ("# H\n\n**b** *i* ~~s~~ `c` [l](https://x.test) ![i](https://x.test/i.png) https://y.test\n\n"
              "> q\n\n```js\nx\n```\n\n- item\n\n| t |\n|---|\n| r |\n\n---\n\n<div onclick=x>raw</div>")
    tags = set(re.findall(r"</?([a-z]+)", to_html(source)))
    assert tags <= {"strong", "em", "s", "code", "pre", "a", "blockquote", "hr"}, tags
