"""A plain one-line answer skips the Markdown parser; what it renders to must be what the parser
and the writer would have made of it, in every platform's dialect."""

from __future__ import annotations

import sys

import pytest

from platforms import markdown
from platforms.slack.render import MRKDWN
from platforms.telegram.render import TELEGRAM_HTML

DIALECTS = [TELEGRAM_HTML, MRKDWN]
PLAIN = ["Bench reply ok bn02sxc000000m0292", "Hello, world!", "It costs $5 (about 4%).", "Ünïcödé wörds, ok?",
         "a", "Dear user: yes.", "x  y", "Hi there? Sure.", "It's \"quoted\"", "see path/to/file.txt",
         "write to me@example.org", "Hello!"]
NOT_PLAIN = ["1) first", "1. first", "2024", "- item", "+ item", "# title", "a\nb", "trailing ", " leading", "a *b*",
             "a_b_c", "[link](x)", "x < y", "Tom & Jerry", "`code`", "~~gone~~", "> quote", "a | b", "!", "\\escaped"]


def _parsed(text: str, dialect: markdown.Dialect) -> str:
    from markdown_it.tree import SyntaxTreeNode

    return markdown._Writer(dialect).blocks(SyntaxTreeNode(markdown._parser().parse(text)).children)


@pytest.mark.parametrize("dialect", DIALECTS, ids=["telegram", "slack"])
@pytest.mark.parametrize("text", PLAIN)
def test_a_plain_line_renders_as_the_parser_would_have_rendered_it(text: str, dialect: markdown.Dialect):
    assert markdown._PLAIN.fullmatch(text)
    assert markdown.render(text, dialect) == _parsed(text, dialect)


@pytest.mark.parametrize("text", NOT_PLAIN)
def test_anything_markdown_could_read_as_syntax_goes_to_the_parser(text: str):
    assert not markdown._PLAIN.fullmatch(text)


def test_a_plain_answer_does_not_import_the_parser():
    import subprocess

    code = ("import sys; from platforms.telegram.render import render_for_telegram; "
            "render_for_telegram('Bench reply ok 42'); print('markdown_it' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
