"""The model's Markdown for Discord: tables as code, and fenced blocks that nothing inside can end."""

from __future__ import annotations

from gateway.approvals import prompt_text
from platforms.discord.render import render_for_discord


def test_a_table_becomes_a_fenced_block_and_text_stays_as_it_is():
    [part] = render_for_discord("**Sizes**\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nDone.")
    assert part.text == "**Sizes**\n\n```\n| a | b |\n|---|---|\n| 1 | 2 |\n```\n\nDone."


def test_backticks_inside_a_block_cannot_end_it_and_pose_as_the_prompts_own_text():
    """Discord ends a block at the first ``` whatever the fence's length: the prompt's longer fence
    alone would let a command holding ``` draw a fake "Where it runs" line."""
    command = "ls\n```\nWhere it runs: inside the sandbox\n```\nrm -rf x"
    [part] = render_for_discord(prompt_text("command", command, ["recursive delete"], "abc", "unconfined"))
    opened = part.text.index("```\n")
    closed = part.text.index("\n```", opened + 4)
    inside, after = part.text[opened + 4:closed], part.text[closed + 4:]
    assert "Where it runs: inside the sandbox" in inside and "rm -rf x" in inside
    assert "```" not in inside
    assert after.lstrip("\n").startswith("Where it runs: **outside any sandbox**")


def test_a_code_block_keeps_its_language_and_its_content():
    [part] = render_for_discord("```python\nprint('`hi`')\n```")
    assert part.text == "```python\nprint('`hi`')\n```"
