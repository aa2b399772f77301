"""The model's Markdown for Discord: nearly as it is, within 2,000 characters a message.

Discord renders Markdown itself (bold, italics, code, fenced blocks, quotes, lists, masked links,
headings). What it cannot show is turned into something it can: a table becomes a fenced block
(its columns stay aligned in monospace). Long replies are split without breaking a fence.
Discord ends a fenced block at the first three backticks whatever the fence's length, so inside a
block runs of backticks are broken with zero-width spaces and its fences are three backticks: a
command holding ``` in an approval prompt cannot end the block and pose as the prompt's own text.
"""

from __future__ import annotations

import re

from platforms.base import Reply
from platforms.text import split_text

DISCORD_LIMIT = 2000  # characters per message
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_BACKTICKS = re.compile(r"``+")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _tables_as_code(markdown: str) -> str:
    """Wrap each Markdown table (a header row, a rule row, body rows) in a fence."""
    lines = markdown.split("\n")
    out: list[str] = []
    fence: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        opened = _FENCE.match(line)
        if fence is not None:
            closing = opened is not None and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence) \
                and not line[opened.end():].strip()
            if closing:
                fence = None
                out.append("```" if opened.group(1)[0] == "`" else line)
            else:
                out.append(_BACKTICKS.sub(lambda run: "\u200b".join(run.group()), line) if fence[0] == "`" else line)
            i += 1
            continue
        if opened:
            fence = opened.group(1)
            out.append("```" + line[opened.end():] if fence[0] == "`" else line)
            i += 1
            continue
        if "|" in line and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1]):
            end = i + 2
            while end < len(lines) and "|" in lines[end] and lines[end].strip():
                end += 1
            out.extend(["```", *lines[i:end], "```"])
            i = end
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def render_for_discord(markdown: str, limit: int = DISCORD_LIMIT) -> list[Reply]:
    return [Reply(text=part) for part in split_text(_tables_as_code(markdown), limit)]
