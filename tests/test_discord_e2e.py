"""End to end on Discord: the real discord.py client against the fake Discord, over loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any, AsyncIterator

import discord
import pytest

from tests.fakes.discord import DEFAULT_CHANNEL, DEFAULT_GUILD, MESSAGES_ROUTE, FakeDiscord
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Daemon, delete_then_report, eventually, start_gateway

ANN, BOB = 1001, 2002
CALLBACK = "POST /interactions/{interaction_id}/{interaction_token}/callback"
FOLLOWUP = "POST /webhooks/{application_id}/{interaction_token}"
EDIT = "PATCH /channels/{channel_id}/messages/{message_id}"


@pytest.fixture
async def dc(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    # the adapter points discord.py's class attributes at the fake while it runs and puts them back when it
    # stops (`test_discord_py_is_pointed_at_the_fake_only_while_the_adapter_runs`); this covers a test that fails first
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY",
                        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    async with FakeDiscord() as fake:
        yield fake


def discord_settings(dc: FakeDiscord, **more: Any) -> dict[str, Any]:
    return {"platforms__discord__token": dc.token, "platforms__discord__api_base": dc.api_base,
            "platforms__discord__gateway_url": dc.gateway_url,
            "access__allowed_users": f"{{discord: [{ANN}]}}", **more}


async def discord_gateway(home: Path, llm: FakeLLM, dc: FakeDiscord, **more: Any) -> Any:
    return await start_gateway(home, llm.base_url, **discord_settings(dc, **more))


def texts(dc: FakeDiscord, channel_id: int) -> list[str]:
    return [m.content for m in dc.sent_messages(channel_id) if not m.interaction_id]


async def wait_text(dc: FakeDiscord, text: str, timeout: float = 8.0) -> Any:
    """The bot's message that reads `text` (after edits), once there is one."""
    try:
        await dc.wait_until(lambda: any(m.content == text for m in dc.sent_messages()), timeout)
    except TimeoutError:
        raise AssertionError(f"no message reads {text!r}; sent: {[m.content for m in dc.sent_messages()]}") from None
    return next(m for m in dc.sent_messages() if m.content == text)


async def test_a_dm_gets_a_reply_that_pings_nobody(tmp_path, llm: FakeLLM, dc: FakeDiscord):
    llm.script(Reply.text("Hello **Ann**, say hi to @everyone and <@2002>!"))
    runner = await discord_gateway(tmp_path, llm, dc)
    try:
        assert runner.connections.readiness()["discord"]["state"] == "ready"
        dc.user_message("hi there")
        message = await wait_text(dc, "Hello **Ann**, say hi to @everyone and <@2002>!")
        assert message.channel_id == dc.dm_channel_id(ANN)
        assert message.mentions == [] and not message.mention_everyone
        assert message.allowed_mentions == {"parse": []}
        assert {c["name"] for c in dc.commands} >= {"new", "stop", "status", "help", "approve", "deny", "cron"}
    finally:
        await runner.stop()


async def test_a_long_reply_is_split_under_2000_with_fences_intact(tmp_path, llm: FakeLLM, dc: FakeDiscord):
    code = "\n".join(f"print('line {i:03d}')" for i in range(200))
    body = "Here you go. " * 40 + "\n\n```python\n" + code + "\n```\nThat is all."
    llm.script(Reply.text(body, chunk_size=500))
    runner = await discord_gateway(tmp_path, llm, dc)
    try:
        dc.user_message("give me code")
        await dc.wait_until(lambda: any("That is all." in m.content for m in dc.sent_messages()), 10)
        parts = texts(dc, dc.dm_channel_id(ANN))
        assert len(parts) >= 3 and all(len(p) <= 2000 for p in parts)
        assert all(p.count("```") % 2 == 0 for p in parts)
        joined = "".join(parts)
        assert all(f"print('line {i:03d}')" in joined for i in range(200))
    finally:
        await runner.stop()


async def test_server_channels_need_a_mention_or_a_reply_and_answers_quote_the_user(tmp_path, llm: FakeLLM,
                                                                                   dc: FakeDiscord):
    runner = await discord_gateway(tmp_path, llm, dc)
    try:
        dc.user_message("talking among ourselves", guild_id=DEFAULT_GUILD)
        asked = dc.user_message("what is 2+2?", guild_id=DEFAULT_GUILD, mentions_bot=True)
        answer = await wait_text(dc, "echo: [ann] what is 2+2?")
        assert answer.channel_id == DEFAULT_CHANNEL
        assert int(answer.message_reference["message_id"]) == int(asked["id"])
        assert answer.allowed_mentions == {"parse": [], "replied_user": True}  # only the person it answers
        dc.user_message("and 3+3?", guild_id=DEFAULT_GUILD, reply_to=answer.id)
        await wait_text(dc, "echo: [ann] and 3+3?")
        assert texts(dc, DEFAULT_CHANNEL) == ["echo: [ann] what is 2+2?", "echo: [ann] and 3+3?"]
        assert all("talking among ourselves" not in str(r["messages"]) for r in llm.requests)
    finally:
        await runner.stop()


async def test_two_threads_are_two_sessions(tmp_path, llm: FakeLLM, dc: FakeDiscord):
    runner = await discord_gateway(tmp_path, llm, dc)
    first, second = dc.add_thread(name="apples"), dc.add_thread(name="pears")
    try:
        dc.user_message("apples", thread_id=first, guild_id=DEFAULT_GUILD, mentions_bot=True)
        await wait_text(dc, "echo: [ann] apples")
        dc.user_message("pears", thread_id=second, guild_id=DEFAULT_GUILD, mentions_bot=True)
        await wait_text(dc, "echo: [ann] pears")
        assert "apples" not in str(llm.requests[1]["messages"])
        assert texts(dc, first) == ["echo: [ann] apples"] and texts(dc, second) == ["echo: [ann] pears"]
    finally:
        await runner.stop()


async def test_auto_thread_opens_a_thread_named_from_the_message_and_goes_on_there(tmp_path, llm: FakeLLM,
                                                                                  dc: FakeDiscord):
    runner = await discord_gateway(tmp_path, llm, dc, platforms__discord__auto_thread="true")
    try:
        asked = dc.user_message("plan the trip to Rome", guild_id=DEFAULT_GUILD, mentions_bot=True)
        await wait_text(dc, "echo: [ann] plan the trip to Rome")
        [opened] = dc.calls_to("POST /channels/{channel_id}/messages/{message_id}/threads")
        assert opened.json["name"] == "plan the trip to Rome" and str(opened.param("message_id")) == str(asked["id"])
        thread = int(asked["id"])  # a thread started from a message has the message's id
        assert texts(dc, thread) == ["echo: [ann] plan the trip to Rome"] and texts(dc, DEFAULT_CHANNEL) == []
        dc.user_message("and the hotel?", thread_id=thread, guild_id=DEFAULT_GUILD)  # no mention needed here
        await wait_text(dc, "echo: [ann] and the hotel?")
        assert "plan the trip" in str(llm.requests[1]["messages"])  # one session: the thread
    finally:
        await runner.stop()


async def approval_prompt(dc: FakeDiscord) -> Any:
    await dc.wait_until(lambda: any(m.components for m in dc.sent_messages()), 10)
    return next(m for m in dc.sent_messages() if m.components)


def button(prompt: Any, label: str) -> str:
    return next(b["custom_id"] for row in prompt.components for b in row["components"] if b["label"] == label)


async def test_approval_buttons_answer_the_requester_and_refuse_others(tmp_path, llm: FakeLLM, dc: FakeDiscord):
    llm.responder = delete_then_report
    (tmp_path / "ws" / "victim").mkdir(parents=True)
    runner = await discord_gateway(tmp_path, llm, dc, agent__workspace=tmp_path / "ws",
                                   access__allowed_users=f"{{discord: [{ANN}, {BOB}]}}")
    try:
        dc.user_message("please delete it", guild_id=DEFAULT_GUILD, mentions_bot=True)
        prompt = await approval_prompt(dc)
        assert [b["label"] for row in prompt.components for b in row["components"]] == \
            ["Allow once", "Allow for this session", "Always allow", "Deny"]
        dc.button_press(button(prompt, "Deny"), message_id=prompt.id, channel_id=DEFAULT_CHANNEL, user_id=BOB,
                        username="bob", guild_id=DEFAULT_GUILD)
        [refusal] = await dc.wait_for(FOLLOWUP)
        assert refusal.json["content"] == "This approval is not yours to decide." and refusal.json["flags"] & 64
        assert (tmp_path / "ws" / "victim").exists()
        dc.button_press(button(prompt, "Allow once"), message_id=prompt.id, channel_id=DEFAULT_CHANNEL,
                        guild_id=DEFAULT_GUILD)
        answers = await dc.wait_for(FOLLOWUP, count=2)
        assert answers[1].json["content"] == "Allow once — done."
        assert {r.type for r in dc.interaction_responses()} == {6}  # each press deferred within 3 s
        await wait_text(dc, "done")
        assert not (tmp_path / "ws" / "victim").exists()
        await dc.wait_until(lambda: "Allowed once by ann" in dc.sent_messages(DEFAULT_CHANNEL)[0].content)
        assert dc.sent_messages(DEFAULT_CHANNEL)[0].components == []  # the buttons are gone
    finally:
        await runner.stop()


async def test_a_button_pressed_after_a_restart_is_still_answered(tmp_path, llm: FakeLLM, dc: FakeDiscord):
    llm.responder = delete_then_report
    (tmp_path / "ws" / "victim").mkdir(parents=True)
    settings = {"agent__workspace": tmp_path / "ws"}
    runner = await discord_gateway(tmp_path, llm, dc, **settings)
    dc.user_message("delete it")
    prompt = await approval_prompt(dc)
    allow = button(prompt, "Allow once")
    await runner.stop()  # the request ends with the gateway ("the gateway shut down")
    runner = await discord_gateway(tmp_path, llm, dc, **settings)
    try:
        dc.button_press(allow, message_id=prompt.id, channel_id=dc.dm_channel_id(ANN), force=True)
        [answer] = await dc.wait_for(FOLLOWUP)
        assert answer.json["content"] == "Already decided."  # handled: not "This interaction failed"
        assert [r.type for r in dc.interaction_responses()] == [6]
        assert "Expired: the gateway shut down" in dc.sent_messages(dc.dm_channel_id(ANN))[0].content
        assert (tmp_path / "ws" / "victim").exists()
    finally:
        await runner.stop()


async def test_a_message_delivered_again_after_a_resume_is_answered_once(tmp_path, llm: FakeLLM, dc: FakeDiscord):
    runner = await discord_gateway(tmp_path, llm, dc)
    try:
        event = dc.user_message("only once")
        await wait_text(dc, "echo: only once")
        dc.request_reconnect()  # the client resumes; what was dispatched meanwhile is replayed
        dc.user_message("while away")
        await dc.wait_until(lambda: len(dc.resumes) == 1)
        dc.redeliver(event)
        dc.user_message("after")
        await wait_text(dc, "echo: after")
        assert texts(dc, dc.dm_channel_id(ANN)) == ["echo: only once", "echo: while away", "echo: after"]
        assert len(llm.requests) == 3
    finally:
        await runner.stop()


async def test_a_429_on_send_is_waited_out_and_another_channel_is_not_held_up(tmp_path, llm: FakeLLM,
                                                                              dc: FakeDiscord):
    runner = await discord_gateway(tmp_path, llm, dc)
    dm = dc.dm_channel_id(ANN)
    dc.fail_next(MESSAGES_ROUTE, status=429, retry_after=2.0, count=1, channel_id=dm)
    try:
        dc.user_message("first")
        await dc.wait_for(MESSAGES_ROUTE, lambda c: c.status == 429)
        dc.user_message("meanwhile", guild_id=DEFAULT_GUILD, mentions_bot=True)
        await wait_text(dc, "echo: [ann] meanwhile")
        await wait_text(dc, "echo: first")
        sends = [c for c in dc.calls_to(MESSAGES_ROUTE) if c.status == 200]
        assert [int(c.param("channel_id")) for c in sends] == [DEFAULT_CHANNEL, dm]
        assert texts(dc, dm) == ["echo: first"]
    finally:
        await runner.stop()


async def test_slash_commands_are_acknowledged_and_answered_and_registered_once(tmp_path, llm: FakeLLM,
                                                                               dc: FakeDiscord):
    runner = await discord_gateway(tmp_path, llm, dc)
    try:
        dc.slash_command("status")
        [ack] = await dc.wait_for(CALLBACK)
        assert ack.json["type"] == 4 and ack.json["data"]["flags"] & 64 and ack.json["data"]["content"] == "`/status`"
        await dc.wait_until(lambda: any(m.content.startswith("Session:") for m in dc.sent_messages()))
        dc.slash_command("approve", {"text": "abcd"})
        await dc.wait_until(lambda: any("no approval waiting" in m.content for m in dc.sent_messages()))
    finally:
        await runner.stop()
    puts = len(dc.calls_to("PUT /applications/{application_id}/commands"))
    runner = await discord_gateway(tmp_path, llm, dc)
    await runner.stop()
    assert puts == 1 and len(dc.calls_to("PUT /applications/{application_id}/commands")) == 1  # unchanged: kept


async def test_a_slash_command_the_bot_no_longer_registers_is_still_taken(tmp_path, llm: FakeLLM, dc: FakeDiscord):
    """A person's Discord may still offer a command an earlier version registered: it is acknowledged and
    answered like a typed unknown command, not left to fail ("This interaction failed")."""
    runner = await discord_gateway(tmp_path, llm, dc)
    try:
        dc.slash_command("frobnicate", {"text": "now"})
        [ack] = await dc.wait_for(CALLBACK)
        assert ack.json["type"] == 4 and ack.json["data"]["content"] == "`/frobnicate now`"
        await dc.wait_until(lambda: any(m.content.startswith("Unknown command /frobnicate") for m in dc.sent_messages()))
    finally:
        await runner.stop()


async def test_discord_py_is_pointed_at_the_fake_only_while_the_adapter_runs(tmp_path, llm: FakeLLM,
                                                                              dc: FakeDiscord):
    """discord.py has no per-client address: the two class attributes it reads are set while the adapter
    runs, and what was there before is back once it stops (nothing else in the process is left pointed)."""
    before = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    runner = await discord_gateway(tmp_path, llm, dc)
    try:
        assert discord.http.Route.BASE == dc.api_base
        assert str(discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY) == dc.gateway_url
    finally:
        await runner.stop()
    assert (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY) == before
    assert before[0] == "https://discord.com/api/v10"


async def test_attachments_in_and_files_out(tmp_path, llm: FakeLLM, dc: FakeDiscord):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "report.csv").write_text("a,b\n1,2\n")
    runner = await discord_gateway(tmp_path, llm, dc, agent__workspace=tmp_path / "ws")
    try:
        dc.user_message("what is this?", attachments=[("notes.txt", b"hello notes")])
        await llm.wait_for_requests(1)
        seen = llm.requests[0]["messages"][-1]["content"]
        saved = seen.split("saved at ")[1].rstrip("]")
        assert Path(saved).read_bytes() == b"hello notes"
        llm.script(Reply.tool_calls([("send_file", {"path": "report.csv"})]), Reply.text("Here it is."))
        dc.user_message("send the report")
        [upload] = await dc.wait_for(MESSAGES_ROUTE, lambda c: bool(c.files) and c.status == 200, timeout=10)
        assert upload.files[0].filename == "report.csv" and upload.files[0].content == b"a,b\n1,2\n"
    finally:
        await runner.stop()


async def test_admins_notices_reach_their_dms(tmp_path, llm: FakeLLM, dc: FakeDiscord):
    runner = await discord_gateway(tmp_path, llm, dc, access__admins=f"{{discord: [{BOB}]}}")
    try:
        await runner.parts.delivery.to_admins(runner.config.access.admins, "the curator archived 2 skills")  # what the curator and cron runs use
        [opened] = dc.calls_to("POST /users/@me/channels")
        assert opened.json == {"recipient_id": str(BOB)} or opened.json == {"recipient_id": BOB}
        await dc.wait_until(lambda: texts(dc, dc.dm_channel_id(BOB)) == ["the curator archived 2 skills"])
    finally:
        await runner.stop()


async def test_a_scheduled_job_delivers_into_a_thread(tmp_path, llm: FakeLLM, dc: FakeDiscord):
    runner = await discord_gateway(tmp_path, llm, dc)
    thread = dc.add_thread(name="reports")
    try:
        await runner.parts.jobs.create(name="tea", prompt="tea is ready", schedule="in 1s",
                                 target=f"discord:{DEFAULT_CHANNEL}:{thread}", owner_platform="cli", owner_id="op")
        runner.parts.cron_timers.changed()
        await wait_text(dc, "⏰ tea\n\necho: tea is ready", timeout=10)
        assert texts(dc, thread) == ["⏰ tea\n\necho: tea is ready"]
    finally:
        await runner.stop()


@pytest.mark.parametrize("fault", ["token", "intent"])
async def test_a_bad_token_or_a_missing_intent_stops_start_up_with_what_to_do(tmp_path, llm: FakeLLM,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             fault: str):
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY",
                        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    async with FakeDiscord(enabled_intents=0 if fault == "intent" else discord.Intents.all().value) as dc:
        settings = discord_settings(dc)
        if fault == "token":
            settings["platforms__discord__token"] = "wrong"
        with pytest.raises(RuntimeError) as raised:
            await start_gateway(tmp_path, llm.base_url, **settings)
        expected = "Reset Token" if fault == "token" else "Message Content Intent"
        assert expected in str(raised.value) and "\n" not in str(raised.value)


async def test_killed_mid_turn_replies_exactly_once_after_restart(tmp_path, dc: FakeDiscord):
    async with FakeLLM() as llm:
        llm.script(Reply.hang())
        daemon = Daemon(tmp_path, llm, discord_settings(dc))
        try:
            daemon.start()
            await dc.wait_connected(timeout=20)
            dc.user_message("survive this")
            await llm.wait_for_requests(1, timeout=20)
            daemon.kill()
            daemon.start()
            await wait_text(dc, "echo: survive this", timeout=20)
            await eventually(lambda: daemon.rows("SELECT 1 FROM outbox WHERE state = 'sent'"), what="recorded")
            assert texts(dc, dc.dm_channel_id(ANN)) == ["echo: survive this"]
            assert len(llm.requests) == 2
        finally:
            daemon.close()


async def test_killed_between_the_previews_send_and_its_record_the_rerun_shows_the_answer_in_that_message(
        tmp_path, dc: FakeDiscord):
    """Discord made the preview's first message and chatgate was killed before it heard its id: the
    re-run sends its draft with the same nonce (from the inbox row), Discord answers with the message it
    already made, and the answer replaces what it showed."""
    async with FakeLLM() as llm:
        llm.script(Reply.text("Thinking about it, " * 40, chunk_size=20, chunk_delay=0.5))
        dc.hold_next(MESSAGES_ROUTE, after_processing=True)  # made, its answer held until the kill
        daemon = Daemon(tmp_path, llm, discord_settings(dc))
        try:
            daemon.start()
            await dc.wait_connected(timeout=20)
            dc.user_message("tell me")
            await dc.wait_for(MESSAGES_ROUTE, lambda c: c.status == -3, timeout=20)
            daemon.kill()
            [orphan] = texts(dc, dc.dm_channel_id(ANN))
            assert orphan.startswith("Thinking")
            llm.script(Reply.text("Here is the whole answer, streamed in pieces.", chunk_size=13, chunk_delay=0.3))
            daemon.start()
            await wait_text(dc, "Here is the whole answer, streamed in pieces.", timeout=20)
            assert texts(dc, dc.dm_channel_id(ANN)) == ["Here is the whole answer, streamed in pieces."]
        finally:
            daemon.close()
