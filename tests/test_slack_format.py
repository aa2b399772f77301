"""The model's Markdown as Slack mrkdwn: escaping, links, code, and parts that fit a section block."""

from __future__ import annotations

from platforms.slack.render import SECTION_LIMIT, render_for_slack, to_mrkdwn


def test_emphasis_code_and_strike_use_slack_markers():
    assert to_mrkdwn("**bold**, *it*, ~~gone~~ and `x = 1`") == "*bold*, _it_, ~gone~ and `x = 1`"


def test_control_characters_are_escaped_so_the_model_cannot_ping_or_forge_links():
    assert to_mrkdwn("a < b && c > d <!channel> <!here|here> <@U123>") == \
        "a &lt; b &amp;&amp; c &gt; d &lt;!channel&gt; &lt;!here|here&gt; &lt;@U123&gt;"
    # an autolink's label is its own address: a link cannot claim to be another
    assert to_mrkdwn("<https://evil|safe>") == "<https://evil%7Csafe|https://evil|safe>"


def test_links_become_slack_links_and_unsafe_schemes_stay_text():
    assert to_mrkdwn("[docs](https://example.com/a?b=1&c=2)") == "<https://example.com/a?b=1&amp;c=2|docs>"
    assert to_mrkdwn("<https://example.com>") == "<https://example.com>"
    assert to_mrkdwn("[pipe](https://e.com/a|b>c)") == "<https://e.com/a%7Cb%3Ec|pipe>"
    assert to_mrkdwn("[x](javascript:alert(1))") == "[x](javascript:alert(1))"
    assert to_mrkdwn("[x](ftp://files.example)") == "x"


def test_code_blocks_quotes_headings_lists_and_tables():
    md = "# Title\n\n> quoted\n> twice\n\n```py\nif a < b:\n    pass\n```\n\n- one\n- two\n\n| a | b |\n|---|---|\n| 1 | 2 |"
    assert to_mrkdwn(md) == ("*Title*\n\n> quoted\n> twice\n\n```\nif a &lt; b:\n    pass\n```\n\n• one\n• two\n\n"
                             "```\na | b\n--+--\n1 | 2\n```")


def test_long_replies_fit_a_section_block_without_breaking_fences():
    code = "\n".join(f"x{i} = {i} < {i + 1}" for i in range(400))
    parts = render_for_slack("Intro. " * 300 + "\n\n```\n" + code + "\n```\nEnd & done.")
    assert len(parts) >= 4
    assert all(len(p.text) <= SECTION_LIMIT for p in parts)
    assert all(p.text.count("```") % 2 == 0 for p in parts)
    assert parts[-1].text.endswith("End &amp; done.")
    assert all(p.plain for p in parts)  # each part keeps its Markdown for the plain-text fallback


def test_escaping_that_outgrows_the_limit_is_split_smaller():
    parts = render_for_slack("<&>" * 2500)
    assert all(len(p.text) <= SECTION_LIMIT for p in parts)
    assert "".join(p.text for p in parts).count("&amp;") == 2500  # nothing lost


def test_the_app_manifest_asks_for_what_the_adapter_checks_and_listens_to():
    from pathlib import Path

    import yaml

    from platforms.slack.adapter import COMMAND, REQUIRED_SCOPES

    manifest = yaml.safe_load((Path(__file__).parents[1] / "deploy" / "slack-app-manifest.yaml").read_text())
    assert set(manifest["oauth_config"]["scopes"]["bot"]) == REQUIRED_SCOPES
    assert set(manifest["settings"]["event_subscriptions"]["bot_events"]) >= {
        "app_mention", "message.channels", "message.groups", "message.im"}
    assert [c["command"] for c in manifest["features"]["slash_commands"]] == [COMMAND]
    assert manifest["settings"]["interactivity"]["is_enabled"] and manifest["settings"]["socket_mode_enabled"]


def test_backticks_inside_a_code_block_cannot_close_it():
    """Slack fences are always three backticks with no escape inside: a command holding ``` in an
    approval prompt would end the block and let the next line pose as the prompt's own text."""
    from gateway.approvals import prompt_text

    command = "echo hi\n```\nWhy it asks: approved by policy\n```\nrm -rf x"
    shown = to_mrkdwn(prompt_text("command", command, ["recursive delete"], "abc"))
    body = shown.split("```\n", 1)[1]
    inside, _, after = body.partition("\n```")
    assert "Why it asks: approved by policy" in inside and "rm -rf x" in inside
    assert "```" not in inside
    assert after.lstrip("\n").startswith("Why it asks: `recursive delete`")
