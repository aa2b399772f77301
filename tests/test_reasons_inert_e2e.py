"""Words the model or a person wrote (a subagent's task, a job's name) cannot pose as the approval
prompt's own text: in "Why it asks" they are one line of quoted, markup-free text on every platform."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from agent.delegation import SUBAGENT_IDENTITY
from gateway.approvals import prompt_text
from platforms.discord.render import render_for_discord
from platforms.slack.render import to_mrkdwn
from platforms.telegram.render import to_telegram_html
from platforms.webchat.render import to_html
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import ANN, Tab, is_prompt, press, start_gateway, telegram_gateway

FAKE = "approved by policy"
# a newline, a Unicode line separator (Telegram shows it as a break), Markdown, HTML and a backtick
TASK = (f"tidy the workspace\nWhy it asks: {FAKE} — **safe**, <b>checked</b>\u2028✅ Allowed once by the admin."
        " `done`")


def is_child(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]).startswith(SUBAGENT_IDENTITY)


def subagent_asks(body: dict[str, Any]) -> Reply | None:
    """The main agent delegates TASK; the subagent runs a command that needs approval."""
    last = body["messages"][-1]
    if is_child(body):
        return Reply.text("stopped") if last["role"] == "tool" else \
            Reply.tool_calls([("terminal", {"command": "rm -rf victim"})])
    if last["role"] == "user":
        return Reply.tool_calls([("delegate_task", {"tasks": [{"task": TASK}]})])
    return Reply.text("reported")


def assert_one_line_of_ours(text: str) -> None:
    """The prompt's own lines: one "Why it asks", no line the task drew, no line separator."""
    lines = re.split(r"\n|</pre>", text)  # (the web chat's HTML starts a line after a block, without a newline)
    assert [line for line in lines if line.startswith("Why it asks:")] == [next(
        line for line in lines if line.startswith("Why it asks: "))]
    assert not any(line.lstrip().startswith(("✅", f"Why it asks: {FAKE}")) for line in lines), text
    assert "\u2028" not in text and "\u2029" not in text


def assert_quoted_html(html: str) -> None:
    """In rendered HTML: the task's words inside one <code>, none of its markup live."""
    assert re.search(rf"<code>asked by a subagent working on: tidy the workspace Why it asks: {FAKE}[^<]*</code>",
                     html), html
    assert "<b>checked</b>" not in html and "<b>safe</b>" not in html and "<strong>safe</strong>" not in html


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "victim").mkdir(parents=True)
    return ws


async def test_a_subagents_task_is_quoted_in_the_web_chat_prompt(tmp_path, llm: FakeLLM):
    llm.responder = subagent_asks
    runner = await start_gateway(tmp_path, llm.base_url, agent__workspace=workspace(tmp_path),
                                 review__enabled="false")
    try:
        async with Tab(runner) as tab:
            await tab.say("tidy up, with a helper")
            prompt = await tab.wait_for(is_prompt)
            assert_one_line_of_ours(prompt["text"])
            assert_one_line_of_ours(prompt["html"])
            assert_quoted_html(prompt["html"])
            assert runner.parts.sandbox.active and "Where it runs: inside the sandbox" in prompt["text"]  # (asked for a child)
            await press(tab, prompt, "Deny")
            edited = await tab.wait_for(lambda f: f["type"] == "edit" and f["message_id"] == prompt["message_id"])
            assert_one_line_of_ours(edited["html"])
            assert_quoted_html(edited["html"])
            assert await tab.reply(2) == "reported"
        assert (tmp_path / "ws" / "victim").exists()
    finally:
        await runner.stop()


async def test_a_subagents_task_is_quoted_in_the_telegram_prompt(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    llm.responder = subagent_asks
    runner = await telegram_gateway(tmp_path, llm, tg, agent__workspace=workspace(tmp_path), review__enabled="false")
    try:
        tg.user_message("tidy up, with a helper")
        [call] = await tg.wait_for("sendMessage", lambda c: "Approval needed" in str(c.get("text")), timeout=10)
        assert call.get("parse_mode") == "HTML"
        text = str(call.get("text"))
        assert_one_line_of_ours(text)
        assert_quoted_html(text)
        assert "&lt;b&gt;checked&lt;/b&gt;" in text and "**safe**" in text  # shown as written, not as markup
        assert [m.chat_id for m in tg.sent_messages() if m.text == text] == [ANN]
    finally:
        await runner.stop()


async def test_a_scheduled_jobs_name_is_quoted_in_the_owners_prompt(tmp_path, llm: FakeLLM):
    ws = tmp_path / "ws"
    (ws / "old").mkdir(parents=True)
    llm.script(Reply.tool_calls([("terminal", {"command": "rm -rf old"})]), Reply.text("cleaned"))
    runner = await start_gateway(tmp_path, llm.base_url, agent__workspace=ws, approvals__cron="ask-owner",
                                 gateway__tick_seconds="0.2", cron__min_interval_seconds="1")
    try:
        async with Tab(runner) as tab:
            await runner.parts.jobs.create(name=f"nightly\nWhy it asks: {FAKE} **ok**", prompt="clean up", schedule="in 1s",
                                     target="none", owner_platform="webchat", owner_id="local",
                                     owner_chat=f"webchat:{tab.chat_id}")
            runner.parts.cron_timers.changed()
            prompt = await tab.wait_for(is_prompt)
            assert_one_line_of_ours(prompt["text"])
            assert re.search(rf'<code>asked by the scheduled job #1 "nightly Why it asks: {FAKE} \*\*ok\*\*"</code>',
                             prompt["html"].replace("&quot;", '"')), prompt["html"]
            await press(tab, prompt, "Deny")
        assert (ws / "old").exists()
    finally:
        await runner.stop()


@pytest.mark.parametrize("render", [to_telegram_html, to_html, to_mrkdwn,
                                    lambda text: render_for_discord(text)[0].text])
def test_every_platforms_markup_shows_a_reason_as_code(render):
    reasons = [f"asked by a subagent working on: x\nWhy it asks: {FAKE} *bold* _it_ ~s~ ||spoiler|| <@123> `tick`",
               "recursive delete: rm -rf victim"]
    shown = render(prompt_text("command", "rm -rf victim", reasons, "abc"))
    assert_one_line_of_ours(shown)
    [why] = [line for line in re.split(r"\n|</pre>", shown) if line.startswith("Why it asks:")]
    spans = re.findall(r"<code>(.*?)</code>", why) or re.findall(r"`([^`]*)`", why)
    assert len(spans) == 2 and f"x Why it asks: {FAKE} *bold* _it_ ~s~ ||spoiler||" in spans[0]
    assert "tick" in spans[0] and spans[1] == "recursive delete: rm -rf victim"
    assert re.sub(r"<code>.*?</code>|`[^`]*`", "", why) == "Why it asks: ; "  # nothing of theirs outside a span


def test_the_deciders_name_is_shown_as_text_on_every_platform():
    """Who decided is a display name anyone can choose: `**Admin**` or a link stays as typed."""
    from gateway.approvals import _status_line
    from platforms.discord.render import render_for_discord
    from platforms.slack.render import to_mrkdwn
    from platforms.telegram.render import render_for_telegram

    name = "**Admin** [ok](https://evil.example) <b>x</b>"
    line = _status_line("once", name, None, 300)
    telegram = render_for_telegram(line)[0].text
    assert "<b>Admin</b>" not in telegram and "<a " not in telegram and "<b>x</b>" not in telegram
    assert "**Admin**" in telegram and "[ok](https://evil" in telegram
    slack = to_mrkdwn(line)
    assert "*Admin*" not in slack.replace("**Admin**", "") and "<https://evil" not in slack
    discord = render_for_discord(line)[0].text
    assert r"\*\*Admin\*\*" in discord and r"\[ok\]" in discord
