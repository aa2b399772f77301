"""End to end on Slack: the real slack-bolt / slack_sdk against the fake Slack, over loopback,
in Socket Mode and with signed HTTP events."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from gateway import cli
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.slack import DEFAULT_CHANNEL, FakeSlack, Message
from tests.harness import Daemon, delete_then_report, eventually, gateway_env, start_gateway

ANN, BOB = "U1001", "U2002"
DM = "D1001"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


def slack_settings(slack: FakeSlack, mode: str = "socket", **more: Any) -> dict[str, Any]:
    settings = {"platforms__slack__bot_token": slack.bot_token, "platforms__slack__api_base": slack.api_base,
                "platforms__slack__mode": mode, "access__allowed_users": f"{{slack: [{ANN}]}}"}
    if mode == "socket":
        settings["platforms__slack__app_token"] = slack.app_token
    else:
        settings["platforms__slack__signing_secret"] = slack.signing_secret
    return {**settings, **more}


async def slack_gateway(home: Path, llm: FakeLLM, slack: FakeSlack, mode: str = "socket", **more: Any) -> Any:
    return await start_gateway(home, llm.base_url, **slack_settings(slack, mode, **more))


def shown(message: Message) -> str:
    """What a person reads in a message: its section blocks' text, else its text."""
    parts = [b["text"]["text"] for b in message.blocks or () if b.get("type") == "section"]
    return "\n".join(parts) if parts else message.text


def answers(slack: FakeSlack, channel: str, thread_ts: str | None = None) -> list[str]:
    return [shown(m) for m in slack.messages(channel, thread_ts) if not m.deleted]


async def wait_answer(slack: FakeSlack, text: str, timeout: float = 8.0) -> Message:
    def found() -> Message | None:
        return next((m for ch in list(slack.store.history) for m in slack.messages(ch)
                     if not m.deleted and shown(m) == text), None)
    try:
        await slack.wait_until(lambda: found() is not None, timeout)
    except TimeoutError:
        seen = [shown(m) for ch in slack.store.history for m in slack.messages(ch)]
        raise AssertionError(f"no message reads {text!r}; the bot's messages: {seen}") from None
    return found()  # type: ignore[return-value]


async def test_a_dm_gets_a_reply_in_mrkdwn(tmp_path, llm: FakeLLM, slack: FakeSlack):
    llm.script(Reply.text("Hello **Ann**, <!channel> & [docs](https://example.com/?a=1&b=2)"))
    runner = await slack_gateway(tmp_path, llm, slack)
    try:
        assert runner.connections.readiness()["slack"]["state"] == "ready"
        slack.user_message("hi there")
        message = await wait_answer(slack, "Hello *Ann*, &lt;!channel&gt; &amp; <https://example.com/?a=1&amp;b=2|docs>")
        assert message.channel == DM and message.thread_ts is None
        assert message.text.startswith("Hello **Ann**")  # the fallback: the Markdown as written
    finally:
        await runner.stop()



async def test_the_ack_comes_once_stored_while_the_model_is_still_working(tmp_path, llm: FakeLLM, slack: FakeSlack):
    llm.script(Reply.hang())
    runner = await slack_gateway(tmp_path, llm, slack)
    try:
        payload = slack.user_message("take your time")
        await slack.wait_for_ack(payload)
        assert await runner.parts.store.fetchrow("SELECT 1 FROM inbox WHERE platform_message_id = ?", payload["event"]["ts"])
        await llm.wait_for_requests(1)
        assert answers(slack, DM) == ["Working…"] or answers(slack, DM) == []  # the model has not answered
        assert slack.envelope_of(payload).deliveries == 1  # acked in time: Slack did not send it again
    finally:
        await runner.stop()


async def test_a_mention_is_answered_in_its_thread_and_follow_ups_there_need_no_mention(tmp_path, llm: FakeLLM,
                                                                                        slack: FakeSlack):
    runner = await slack_gateway(tmp_path, llm, slack)
    try:
        slack.user_message("talking among ourselves", channel=DEFAULT_CHANNEL)
        root = slack.user_message("plan the trip", channel=DEFAULT_CHANNEL, mention=True)
        assert len(slack.last_payloads) == 2  # Slack sends it as message and as app_mention
        ts = root["event"]["ts"]
        await wait_answer(slack, "echo: [U1001] plan the trip")
        slack.user_message("and the hotel?", channel=DEFAULT_CHANNEL, thread_ts=ts)
        await wait_answer(slack, "echo: [U1001] and the hotel?")
        assert answers(slack, DEFAULT_CHANNEL, ts) == ["echo: [U1001] plan the trip", "echo: [U1001] and the hotel?"]
        assert answers(slack, DEFAULT_CHANNEL) == answers(slack, DEFAULT_CHANNEL, ts)  # nothing at the top level
        assert len(llm.requests) == 2 and "plan the trip" in str(llm.requests[1]["messages"])  # one session
        other = slack.user_message("unrelated thread", channel=DEFAULT_CHANNEL, thread_ts=slack.store.new_ts())
        await slack.wait_for_ack(other)
        slack.user_message("another topic", channel=DEFAULT_CHANNEL, mention=True)
        await wait_answer(slack, "echo: [U1001] another topic")
        assert len(llm.requests) == 3 and "plan the trip" not in str(llm.requests[2]["messages"])
    finally:
        await runner.stop()


async def test_its_own_messages_and_other_bots_are_not_answered(tmp_path, llm: FakeLLM, slack: FakeSlack):
    runner = await slack_gateway(tmp_path, llm, slack)
    try:
        own = slack.user_message("echo: loop?", user=slack.bot_user_id, bot_id=slack.bot_id)
        bot = slack.user_message("beep", user="UOTHERBOT", bot_id="BOTHER", subtype="bot_message")
        edit = slack.user_message("edited", subtype="message_changed")
        for payload in (own, bot, edit):
            await slack.wait_for_ack(payload)
        slack.user_message("real person")
        await wait_answer(slack, "echo: real person")
        assert [r["messages"][-1]["content"] for r in llm.requests] == ["real person"]
    finally:
        await runner.stop()


async def test_a_stranger_in_a_dm_gets_a_pairing_code_then_is_served(tmp_path, llm: FakeLLM, slack: FakeSlack,
                                                                    monkeypatch, capsys):
    runner = await slack_gateway(tmp_path, llm, slack)
    try:
        slack.user_message("hello bot", user=BOB)
        await slack.wait_until(lambda: len(answers(slack, "D2002")) == 1)
        code = re.search(r"pairing code is ([A-Z2-9]{8})", answers(slack, "D2002")[0]).group(1)  # type: ignore[union-attr]
        assert llm.requests == []
        for key, value in gateway_env(tmp_path, None).items():
            monkeypatch.setenv(key, value)
        assert await asyncio.to_thread(cli.main, ["pair", "approve", "slack", code]) == 0
        slack.user_message("now?", user=BOB)
        await wait_answer(slack, "echo: now?")
    finally:
        await runner.stop()


async def test_messages_across_a_reconnect_are_answered_once_and_readiness_tells_the_truth(tmp_path, llm: FakeLLM,
                                                                                       slack: FakeSlack):
    runner = await slack_gateway(tmp_path, llm, slack)
    states: list[str] = []
    adapter = runner.adapters["slack"]
    health = adapter._on_health
    adapter._on_health = lambda a: (states.append(a.health.state), health and health(a))
    try:
        await slack.disconnect()  # Slack asks for a refresh: a new connection, nothing lost
        slack.user_message("after refresh")
        await wait_answer(slack, "echo: after refresh")
        slack.drop_connection()  # the connection dies without a word
        await eventually(lambda: "down" in states, 15, "readiness down")
        slack.user_message("after drop")
        await wait_answer(slack, "echo: after drop", timeout=20)
        await eventually(lambda: states[-1] == "ready", 15, "readiness back")
        assert answers(slack, DM) == ["echo: after refresh", "echo: after drop"]
        assert all(e.deliveries == 1 or e.acked for e in slack.envelopes)
    finally:
        await runner.stop()


async def test_streaming_edits_are_coalesced_and_never_ping(tmp_path, llm: FakeLLM, slack: FakeSlack):
    text = "Hey <!channel> " + " ".join(f"word{i}" for i in range(60))
    llm.script(Reply.text(text, chunk_size=8, chunk_delay=0.05))
    runner = await slack_gateway(tmp_path, llm, slack)
    try:
        slack.user_message("stream please")
        await wait_answer(slack, text.replace("<", "&lt;").replace(">", "&gt;"), timeout=15)
        updates = slack.calls_to("chat.update")
        assert 1 <= len(updates) < len(text) // 8  # far fewer edits than pieces streamed
        for call in slack.calls_to("chat.postMessage") + updates:  # previews are plain text; fallbacks escaped
            assert "<!channel>" not in str(call.get("text"))
            for block in call.get("blocks") or ():
                if block["text"]["type"] == "mrkdwn":
                    assert "<!channel>" not in block["text"]["text"]
    finally:
        await runner.stop()


async def test_a_long_reply_is_split_within_a_section_block_with_fences_intact(tmp_path, llm: FakeLLM,
                                                                             slack: FakeSlack):
    code = "\n".join(f"if a < {i}: print('line {i:03d}')" for i in range(300))
    llm.script(Reply.text("Here you go. " * 100 + "\n\n```python\n" + code + "\n```\nThat is all.", chunk_size=800))
    runner = await slack_gateway(tmp_path, llm, slack)
    try:
        slack.user_message("give me code")
        await slack.wait_until(lambda: any("That is all." in p for p in answers(slack, DM)), 10)
        parts = answers(slack, DM)
        assert len(parts) >= 4 and all(len(p) <= 3000 for p in parts)
        assert all(p.count("```") % 2 == 0 for p in parts)
        assert "if a &lt; 7: print('line 007')" in "".join(parts)
    finally:
        await runner.stop()


def buttons(message: Message) -> dict[str, str]:
    """label → action_id of a message's buttons."""
    return {e["text"]["text"]: e["action_id"] for b in message.blocks or () if b["type"] == "actions"
            for e in b["elements"]}


async def approval_prompt(slack: FakeSlack) -> Message:
    def found() -> Message | None:
        return next((m for ch in list(slack.store.history) for m in slack.messages(ch) if buttons(m)), None)
    await slack.wait_until(lambda: found() is not None, 10)
    return found()  # type: ignore[return-value]


async def test_approval_buttons_answer_the_requester_and_refuse_others(tmp_path, llm: FakeLLM, slack: FakeSlack):
    llm.responder = delete_then_report
    (tmp_path / "ws" / "victim").mkdir(parents=True)
    runner = await slack_gateway(tmp_path, llm, slack, agent__workspace=tmp_path / "ws",
                                 access__allowed_users=f"{{slack: [{ANN}, {BOB}]}}")
    try:
        root = slack.user_message("please delete it", channel=DEFAULT_CHANNEL, mention=True)
        prompt = await approval_prompt(slack)
        assert list(buttons(prompt)) == ["Allow once", "Allow for this session", "Always allow", "Deny"]
        assert prompt.thread_ts == root["event"]["ts"]  # in the conversation's thread
        refused = slack.button_press(buttons(prompt)["Deny"], message_ts=prompt.ts, channel=DEFAULT_CHANNEL,
                                     user=BOB)
        await slack.wait_for_ack(refused)
        await slack.wait_until(lambda: len(slack.ephemerals) == 1)
        assert slack.ephemerals[0].user == BOB and slack.ephemerals[0].text == "This approval is not yours to decide."
        assert (tmp_path / "ws" / "victim").exists()
        slack.button_press(buttons(prompt)["Allow once"], message_ts=prompt.ts, channel=DEFAULT_CHANNEL)
        await slack.wait_until(lambda: len(slack.ephemerals) == 2)
        assert slack.ephemerals[1].user == ANN and slack.ephemerals[1].text == "Allow once — done."
        await wait_answer(slack, "done")
        assert not (tmp_path / "ws" / "victim").exists()
        assert "Allowed once by" in shown(prompt) and buttons(prompt) == {}  # the buttons are gone
    finally:
        await runner.stop()


async def test_a_button_pressed_after_a_restart_is_still_answered(tmp_path, llm: FakeLLM, slack: FakeSlack):
    llm.responder = delete_then_report
    (tmp_path / "ws" / "victim").mkdir(parents=True)
    settings = {"agent__workspace": tmp_path / "ws"}
    runner = await slack_gateway(tmp_path, llm, slack, mode="http", **settings)
    await slack.post_event(events_url(runner), slack.user_message("delete it", deliver="none"))
    prompt = await approval_prompt(slack)
    press = slack.button_press(buttons(prompt)["Allow once"], message_ts=prompt.ts, channel=DM, deliver="none")
    await runner.stop()  # the request ends with the gateway ("the gateway shut down")
    runner = await slack_gateway(tmp_path, llm, slack, mode="http", **settings)
    try:  # a press made before the buttons went (a stale client), arriving now
        assert (await slack.post_interaction(events_url(runner), press))[0] == 200
        await slack.wait_until(lambda: [e.text for e in slack.ephemerals] == ["Already decided."])
        assert "Expired: the gateway shut down" in shown(prompt)
        assert (tmp_path / "ws" / "victim").exists()
    finally:
        await runner.stop()


async def test_a_429_on_post_message_is_waited_out_and_another_channel_is_not_held_up(tmp_path, llm: FakeLLM,
                                                                                     slack: FakeSlack):
    runner = await slack_gateway(tmp_path, llm, slack, platforms__slack__channels=f"{{{DEFAULT_CHANNEL}: "
                                 "{require_mention: false}}")
    slack.fail_next("chat.postMessage", status=429, retry_after=2, count=2, channel=DM)  # placeholder and answer
    try:
        slack.user_message("first")
        await slack.wait_for("chat.postMessage", lambda c: c.status == 429, count=2)
        slack.user_message("meanwhile", channel=DEFAULT_CHANNEL)
        await wait_answer(slack, "echo: [U1001] meanwhile")
        await wait_answer(slack, "echo: first")
        assert answers(slack, DM) == ["echo: first"]
        waited = [c.time for c in slack.calls_to("chat.postMessage") if c.get("channel") == DM]
        assert waited[-1] - waited[0] >= 2  # Retry-After was honoured in that channel
    finally:
        await runner.stop()


async def test_files_come_in_with_the_bot_token_and_go_out_by_upload(tmp_path, llm: FakeLLM, slack: FakeSlack):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "report.csv").write_text("a,b\n1,2\n")
    runner = await slack_gateway(tmp_path, llm, slack, agent__workspace=tmp_path / "ws")
    try:
        slack.user_message("what is this?", files=[("notes.txt", b"hello notes")])
        await llm.wait_for_requests(1)
        seen = llm.requests[0]["messages"][-1]["content"]
        saved = seen.split("saved at ")[1].rstrip("]")
        assert Path(saved).read_bytes() == b"hello notes"
        [download] = slack.calls_to("file_download")
        assert download.token == slack.bot_token and download.status == 200
        llm.script(Reply.tool_calls([("send_file", {"path": "report.csv"})]), Reply.text("Here it is."))
        slack.user_message("send the report")
        await slack.wait_until(lambda: any(u.completed for u in slack.uploads), 10)
        [upload] = [u for u in slack.uploads if u.completed]
        assert upload.content == b"a,b\n1,2\n" and upload.channel == DM
    finally:
        await runner.stop()


async def test_the_slash_command_is_the_text_command(tmp_path, llm: FakeLLM, slack: FakeSlack):
    runner = await slack_gateway(tmp_path, llm, slack)
    try:
        slack.user_message("remember the milk")
        await wait_answer(slack, "echo: remember the milk")
        command = slack.slash_command("/chatgate", "new")
        ack = await slack.wait_for_ack(command)
        assert ack.payload == {"text": "`/new`"}  # shown to the user alone, at once
        await slack.wait_until(lambda: any("started a new session" in a.lower() for a in answers(slack, DM)), 8)
        slack.user_message("what was it?")
        await wait_answer(slack, "echo: what was it?")
        assert "remember the milk" not in str(llm.requests[-1]["messages"])
    finally:
        await runner.stop()


async def test_a_scheduled_job_delivers_into_a_thread(tmp_path, llm: FakeLLM, slack: FakeSlack):
    runner = await slack_gateway(tmp_path, llm, slack)
    thread = slack.store.new_ts()
    try:
        await runner.parts.jobs.create(name="tea", prompt="tea is ready", schedule="in 1s",
                                 target=f"slack:{DEFAULT_CHANNEL}:{thread}", owner_platform="cli", owner_id="op")
        runner.parts.cron_timers.changed()
        await wait_answer(slack, "⏰ tea\n\necho: tea is ready", timeout=10)
        assert answers(slack, DEFAULT_CHANNEL, thread) == ["⏰ tea\n\necho: tea is ready"]
    finally:
        await runner.stop()


async def test_an_assistant_app_shows_its_thread_status_instead_of_a_placeholder(tmp_path, llm: FakeLLM,
                                                                                slack: FakeSlack):
    runner = await slack_gateway(tmp_path, llm, slack, platforms__slack__assistant="true")
    runner.parts.delivery.typing.delay = 0.0  # (the fake model answers at once: show the status from the start)
    try:
        root = slack.user_message("in an assistant thread")
        slack.user_message("hello assistant", thread_ts=root["event"]["ts"])
        await wait_answer(slack, "echo: hello assistant")
        await slack.wait_until(lambda: [s.status for s in slack.statuses][-1:] == [""])
        assert "is thinking…" in [s.status for s in slack.statuses]
        assert not any("Working" in m.text for m in slack.messages(DM, root["event"]["ts"]))
    finally:
        await runner.stop()


@pytest.mark.parametrize("fault", ["token", "scope", "app_token"])
async def test_start_up_stops_with_one_line_that_says_what_to_fix(tmp_path, llm: FakeLLM, fault: str):
    scopes = {"chat:write", "im:history"} if fault == "scope" else None
    async with FakeSlack(**({"scopes": scopes} if scopes else {})) as slack:
        settings = slack_settings(slack)
        if fault == "token":
            settings["platforms__slack__bot_token"] = "xoxb-wrong"
        if fault == "app_token":
            settings["platforms__slack__app_token"] = "xapp-wrong"
        with pytest.raises(RuntimeError) as raised:
            await start_gateway(tmp_path, llm.base_url, **settings)
        expected = {"token": "Bot User OAuth Token", "scope": "files:write", "app_token": "App-Level Tokens"}[fault]
        assert expected in str(raised.value) and "\n" not in str(raised.value)


def test_a_missing_token_for_the_mode_is_a_config_error(tmp_path):
    from gateway.config import ConfigError, load_config
    from tests.harness import gateway_env

    with pytest.raises(ConfigError, match="app_token"):
        load_config(env=gateway_env(tmp_path, None, platforms__slack__bot_token="xoxb-1"))
    with pytest.raises(ConfigError, match="signing_secret"):
        load_config(env=gateway_env(tmp_path, None, platforms__slack__bot_token="xoxb-1",
                                    platforms__slack__mode="http"))


# -- HTTP mode --------------------------------------------------------------------------------

def events_url(runner: Any) -> str:
    return f"http://127.0.0.1:{runner.http.port}/slack/events"


async def test_http_events_are_verified_answered_and_taken_once(tmp_path, llm: FakeLLM, slack: FakeSlack):
    runner = await slack_gateway(tmp_path, llm, slack, mode="http")
    try:
        assert runner.connections.readiness()["slack"]["state"] == "ready"
        url = events_url(runner)
        status, body = await slack.url_verification(url)
        assert status == 200 and slack.last_challenge in body
        forged = slack.user_message("forged", deliver="none")
        assert (await slack.post_event(url, forged, signed=False))[0] == 401
        assert await runner.parts.store.fetch("SELECT id FROM inbox") == []  # nothing stored
        payload = slack.user_message("signed", deliver="none")
        assert (await slack.post_event(url, payload))[0] == 200
        assert (await slack.post_event(url, payload, retry_num=1, retry_reason="http_timeout"))[0] == 200
        await wait_answer(slack, "echo: signed")
        mention = slack.user_message("in the channel", channel=DEFAULT_CHANNEL, mention=True, deliver="none")
        for event in list(slack.last_payloads):  # message and app_mention: one message
            assert (await slack.post_event(url, event))[0] == 200
        await wait_answer(slack, "echo: [U1001] in the channel")
        assert answers(slack, DM) == ["echo: signed"]
        assert answers(slack, DEFAULT_CHANNEL, mention["event"]["ts"]) == ["echo: [U1001] in the channel"]
        assert len(llm.requests) == 2
    finally:
        await runner.stop()


async def test_http_button_presses_are_acked_and_decided(tmp_path, llm: FakeLLM, slack: FakeSlack):
    llm.responder = delete_then_report
    (tmp_path / "ws" / "victim").mkdir(parents=True)
    runner = await slack_gateway(tmp_path, llm, slack, mode="http", agent__workspace=tmp_path / "ws")
    try:
        await slack.post_event(events_url(runner), slack.user_message("delete it", deliver="none"))
        prompt = await approval_prompt(slack)
        press = slack.button_press(buttons(prompt)["Allow once"], message_ts=prompt.ts, channel=DM, deliver="none")
        assert (await slack.post_interaction(events_url(runner), press, signed=False))[0] == 401
        assert (await slack.post_interaction(events_url(runner), press))[0] == 200
        await wait_answer(slack, "done")
        assert not (tmp_path / "ws" / "victim").exists()
    finally:
        await runner.stop()


async def test_killed_mid_turn_replies_exactly_once_after_restart(tmp_path, slack: FakeSlack):
    async with FakeLLM() as llm:
        llm.script(Reply.hang())
        daemon = Daemon(tmp_path, llm, slack_settings(slack))
        try:
            daemon.start()
            await slack.wait_for_connections(1, timeout=20)
            payload = slack.user_message("survive this")
            await slack.wait_for_ack(payload, timeout=20)
            await llm.wait_for_requests(1, timeout=20)
            # mid-turn: the "Working…" placeholder is posted and its ts recorded (a kill between the
            # post and the record: `test_killed_between_the_placeholders_post_and_its_record_…`)
            await eventually(lambda: daemon.rows("SELECT 1 FROM inbox WHERE draft_message_id IS NOT NULL"),
                             what="the placeholder recorded")
            daemon.kill()
            daemon.start()
            await wait_answer(slack, "echo: survive this", timeout=20)
            await eventually(lambda: daemon.rows("SELECT 1 FROM outbox WHERE state = 'sent'"), what="recorded")
            assert answers(slack, DM) == ["echo: survive this"]
            assert len(llm.requests) == 2
        finally:
            daemon.close()


@pytest.mark.parametrize("where", ["dm", "thread"])
async def test_killed_between_the_placeholders_post_and_its_record_the_rerun_finds_it_by_its_key(
        tmp_path, slack: FakeSlack, where: str):
    """Slack made the "Working…" placeholder and chatgate was killed before it heard its ts. The post
    carried the turn's key in its metadata: the re-run finds it (conversations.history in a DM,
    conversations.replies in a channel's thread) and the answer replaces it."""
    async with FakeLLM() as llm:
        llm.script(Reply.hang())
        slack.hold_next("chat.postMessage", after_processing=True)
        daemon = Daemon(tmp_path, llm, slack_settings(slack))
        try:
            daemon.start()
            await slack.wait_for_connections(1, timeout=20)
            payload = slack.user_message("survive this", **({} if where == "dm" else {"channel_type": "channel",
                                                                                        "mention": True}))
            channel, thread = (DM, None) if where == "dm" else (DEFAULT_CHANNEL, payload["event"]["ts"])
            answer = "echo: survive this" if where == "dm" else f"echo: [{ANN}] survive this"  # (who, in a group)
            await slack.wait_for("chat.postMessage", lambda c: c.status == -3, timeout=20)
            await llm.wait_for_requests(1, timeout=20)  # (the hanging answer is this run's)
            daemon.kill()
            [orphan] = answers(slack, channel, thread)
            assert "orking" in orphan  # the placeholder, on Slack; its ts never reached chatgate
            daemon.start()
            await wait_answer(slack, answer, timeout=20)
            await eventually(lambda: daemon.rows("SELECT 1 FROM outbox WHERE state = 'sent'"), what="recorded")
            assert answers(slack, channel, thread) == [answer]
            assert len(slack.calls_to("chat.postMessage")) == 1
        finally:
            daemon.close()
