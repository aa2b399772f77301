"""End to end on Telegram: the real python-telegram-bot against the fake Bot API, over loopback."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway import cli
from gateway.ops.collector import YOUNG_THRESHOLD
from gateway.ops.process import EXIT_REFUSED
from platforms.text import text_length
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import ANN, eventually, gateway_env, sent_texts, telegram_gateway, telegram_settings, wait_for_text


async def test_dm_message_gets_a_formatted_reply(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    llm.script(Reply.text("Hello **Ann**!"))
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message("hi there")
        await wait_for_text(tg, "Hello <b>Ann</b>!")
        [message] = tg.sent_messages(ANN)
        assert message.parse_mode == "HTML"
        assert {c["command"] for c in tg.commands} >= {"new", "stop", "status", "help"}
    finally:
        await runner.stop()


async def test_group_needs_a_mention_or_a_reply_to_the_bot(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message("talking among ourselves", chat_type="group")
        mention = tg.user_message("@chatgate_bot what is 2+2?", chat_type="group")
        await wait_for_text(tg, "echo: [Ann] what is 2+2?")
        group = mention["message"]["chat"]["id"]
        [answer] = tg.sent_messages(group)
        assert answer.reply_to_message_id == mention["message"]["message_id"]  # quotes what it answers
        tg.user_message("and 3+3?", chat_type="group", reply_to_bot=True)
        await wait_for_text(tg, "echo: [Ann] and 3+3?")
        assert sent_texts(tg, group) == ["echo: [Ann] what is 2+2?", "echo: [Ann] and 3+3?"]
        assert all("talking among ourselves" not in str(r["messages"]) for r in llm.requests)
    finally:
        await runner.stop()


async def test_two_forum_topics_are_two_sessions(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg, platforms__telegram__require_mention=False)
    try:
        tg.user_message("apples", chat_type="supergroup", message_thread_id=11)
        await wait_for_text(tg, "echo: [Ann] apples")
        tg.user_message("pears", chat_type="supergroup", message_thread_id=22)
        await wait_for_text(tg, "echo: [Ann] pears")
        second = str(llm.requests[1]["messages"])
        assert "apples" not in second  # the other topic's conversation is not in this one
        threads = {m.text: m.message_thread_id for m in tg.sent_messages()}
        assert threads == {"echo: [Ann] apples": 11, "echo: [Ann] pears": 22}
    finally:
        await runner.stop()


async def test_long_reply_is_split_under_the_utf16_limit_with_fences_intact(tmp_path, llm: FakeLLM,
                                                                         tg: FakeTelegram):
    code = "\n".join(f"print('line {i:03d} 😀')" for i in range(240))
    body = "Here you go 😀 " * 40 + "\n\n```python\n" + code + "\n```\nThat is all."
    assert len(body) > 5000
    llm.script(Reply.text(body, chunk_size=400))
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message("give me code")
        await tg.wait_for("sendMessage", lambda c: "That is all." in str(c.get("text")), timeout=10)
        await asyncio.sleep(0.2)
        messages = tg.sent_messages(ANN)
        assert len(messages) >= 2
        for m in messages:
            assert text_length(m.text or "", "utf16") <= 4096
            assert m.text.count("<pre>") == m.text.count("</pre>")
        joined = "".join(m.text or "" for m in messages)
        for i in range(240):
            assert f"print(&#x27;line {i:03d} 😀&#x27;)" in joined or f"print('line {i:03d} 😀')" in joined
    finally:
        await runner.stop()


async def test_rejected_markup_is_resent_as_plain_text(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    tg.reject_markup_containing = "<b>"
    llm.script(Reply.text("a **bold** claim"))
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message("say it")
        await wait_for_text(tg, "a **bold** claim")
        [message] = tg.sent_messages(ANN)
        assert message.parse_mode is None
    finally:
        await runner.stop()


async def test_429_on_send_is_honoured_and_the_reply_arrives(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    tg.fail_next("sendMessage", status=429, retry_after=1)
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message("hello")
        await wait_for_text(tg, "echo: hello")
        attempts = tg.calls_to("sendMessage")
        assert attempts[0].status == 429 and attempts[-1].ok
        assert attempts[-1].time - attempts[0].time >= 0.9  # waited out retry_after
        assert sent_texts(tg, ANN) == ["echo: hello"]
    finally:
        await runner.stop()


@pytest.mark.parametrize("fault", ["502", "drop"])
async def test_get_updates_failures_recover(tmp_path, llm: FakeLLM, tg: FakeTelegram, fault: str):
    if fault == "502":
        tg.fail_next("getUpdates", status=502, description="Bad Gateway")
    else:
        tg.drop_next("getUpdates")
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message("are you there?")
        await wait_for_text(tg, "echo: are you there?", timeout=10)
        assert any(c.status != 200 for c in tg.calls_to("getUpdates"))
    finally:
        await runner.stop()


async def test_the_same_update_twice_gets_one_reply(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        update = tg.user_message("only once")
        await wait_for_text(tg, "echo: only once")
        tg.inject({"update_id": update["update_id"], "message": update["message"]})
        tg.user_message("next")
        await wait_for_text(tg, "echo: next")
        assert sent_texts(tg, ANN) == ["echo: only once", "echo: next"]
        assert len(llm.requests) == 2
    finally:
        await runner.stop()


async def test_streaming_edits_are_coalesced_and_the_final_text_lands(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    words = " ".join(f"word{i}" for i in range(60))
    llm.script(Reply.text(words, chunk_size=6, chunk_delay=0.05))  # 70 chunks
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message("stream please")
        await wait_for_text(tg, words, timeout=10)
        edits = tg.calls_to("editMessageText")
        assert 2 <= len(edits) <= 10  # the reply grew in a few edits, not one per chunk
        assert len(tg.sent_messages(ANN)) == 1  # in place
        assert [e.get("text") for e in edits] == sorted((e.get("text") for e in edits), key=len)  # only grows
    finally:
        await runner.stop()


async def test_typing_is_shown_during_a_turn_and_stops_after_it(tmp_path, tg: FakeTelegram):
    async with FakeLLM(latency=1.0) as llm:
        runner = await telegram_gateway(tmp_path, llm, tg)
        runner.parts.delivery.typing.refresh = 0.2  # Telegram shows it 5 s; chatgate refreshes it every 4 s
        try:
            tg.user_message("think hard")
            await wait_for_text(tg, "echo: think hard", timeout=10)
            during = len(tg.calls_to("sendChatAction"))
            assert during >= 2  # refreshed while the turn ran
            await asyncio.sleep(1.0)  # five refresh periods in which nothing may happen
            assert len(tg.calls_to("sendChatAction")) == during
        finally:
            await runner.stop()


async def test_a_reply_quicker_than_the_typing_delay_sends_no_typing_indicator(tmp_path, llm: FakeLLM,
                                                                                tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg)
    runner.parts.delivery.typing.delay = 3600.0  # (every turn here is quicker than that)
    try:
        for n in range(3):
            tg.user_message(f"quick {n}")
            await wait_for_text(tg, f"echo: quick {n}", timeout=10)
        assert tg.calls_to("sendChatAction") == []
    finally:
        await runner.stop()


async def test_unknown_dm_user_gets_a_code_then_is_served_after_approval(tmp_path, llm: FakeLLM,
                                                                        tg: FakeTelegram, monkeypatch, capsys):
    runner = await telegram_gateway(tmp_path, llm, tg)
    stranger = 2002
    try:
        tg.user_message("hello bot", user_id=stranger, first_name="Bob")
        await tg.wait_for("sendMessage", lambda c: c.get("chat_id") == str(stranger))
        [offer] = sent_texts(tg, stranger)
        code = re.search(r"pairing code is ([A-Z2-9]{8})", offer).group(1)  # type: ignore[union-attr]
        assert not set(code) & set("01OIL")
        tg.user_message("hello again", user_id=stranger, first_name="Bob")
        await asyncio.sleep(0.3)
        assert len(sent_texts(tg, stranger)) == 1 and llm.requests == []  # nothing else, no agent

        for key, value in gateway_env(tmp_path, None).items():
            monkeypatch.setenv(key, value)
        assert await asyncio.to_thread(cli.main, ["pair", "approve", "telegram", code.lower()]) == 0
        assert "approved Bob" in capsys.readouterr().out

        tg.user_message("now?", user_id=stranger, first_name="Bob")
        await wait_for_text(tg, "echo: now?")
    finally:
        await runner.stop()


async def test_unknown_users_in_groups_are_ignored_silently(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message("@chatgate_bot hi", chat_type="group", user_id=3003)
        tg.user_message("@chatgate_bot hi from Ann", chat_type="group")
        await wait_for_text(tg, "echo: [Ann] hi from Ann")
        assert len(tg.calls_to("sendMessage")) == 1
    finally:
        await runner.stop()


async def test_webhook_mode_checks_the_secret(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg, platforms__telegram__mode="webhook",
                                    platforms__telegram__webhook_url="http://placeholder/telegram/webhook",
                                    http__port=0)
    try:
        [hook] = tg.calls_to("setWebhook")
        assert hook.get("secret_token")
        tg.webhook_url = f"http://127.0.0.1:{runner.http.port}/telegram/webhook"  # where the gateway listens
        update = {"update_id": 5, "message": {"message_id": 1, "date": 0, "text": "via webhook",
                                              "chat": {"id": ANN, "type": "private"},
                                              "from": {"id": ANN, "is_bot": False, "first_name": "Ann"}}}
        assert await tg.push_webhook(update) == 200
        await wait_for_text(tg, "echo: via webhook")
        tg.webhook_secret = "wrong"
        assert await tg.push_webhook({**update, "update_id": 6}) == 403
        assert tg.calls_to("getUpdates") == []
    finally:
        await runner.stop()


async def test_button_press_reaches_the_runner_and_is_answered(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg)
    pressed: list[Any] = []

    async def handler(press: Any) -> str:
        pressed.append(press)
        return "Noted."

    runner.parts.inbound.buttons["demo:"] = handler
    try:
        from platforms.base import ChatRef
        await runner.parts.delivery.reply(ChatRef("telegram", str(ANN)), "Pick one",
                                    buttons=[[{"text": "Yes", "data": "demo:yes"}, {"text": "No", "data": "demo:no"}]])
        [message] = tg.sent_messages(ANN)
        assert [b["text"] for b in message.reply_markup["inline_keyboard"][0]] == ["Yes", "No"]
        tg.callback_query("demo:yes", message_id=message.message_id)
        [answer] = await tg.wait_for("answerCallbackQuery")
        assert answer.get("text") == "Noted."
        assert pressed[0].user_id == str(ANN) and pressed[0].data == "demo:yes"
        tg.callback_query("stale:zzz", message_id=message.message_id)
        answers = await tg.wait_for("answerCallbackQuery", count=2)
        assert answers[1].get("text") == "This button is no longer active."
    finally:
        await runner.stop()


async def test_photo_is_given_to_the_agent_and_oversized_files_are_refused(tmp_path, llm: FakeLLM,
                                                                          tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg, platforms__telegram__max_file_mb=0.001)
    try:
        tg.user_message(caption="what is this?", photo=b"\xff\xd8small-jpeg")
        await llm.wait_for_requests(1)
        content = llm.requests[0]["messages"][-1]["content"]
        assert content.startswith("what is this?") and "[attached image" in content
        saved = re.search(r"saved at (\S+)\]", content).group(1)  # type: ignore[union-attr]
        assert Path(saved).read_bytes() == b"\xff\xd8small-jpeg"
        tg.user_message(document=("big.bin", b"x" * 5000))
        await tg.wait_for("sendMessage", lambda c: "could not take this file" in str(c.get("text")))
        assert len(llm.requests) == 1
    finally:
        await runner.stop()


async def test_a_409_conflict_is_another_poller_said_and_tried_again_never_fatal(tmp_path, llm: FakeLLM,
                                                                                 tg: FakeTelegram):
    """Telegram ends the earlier of two concurrent getUpdates with 409 Conflict. With instances on one database,
    the platform's lease keeps a second chatgate from polling beside the first but for a handover's moment; a
    second chatgate on the same token without that database gets 409s for as long as both run. Either way it is
    another poller, never a reason to stop for good: the platform is down with the reason (what to check), the
    poll is tried again, backing off, and once the other poller is gone the messages are answered."""
    tg.conflict = True
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        await tg.wait_for("getUpdates", lambda c: c.status == 409, count=2, timeout=10)  # tried again
        health = runner.adapters["telegram"].health
        assert health.state == "down" and "409 Conflict" in (health.error or "")
        assert not runner.connections.failed.is_set()
        tg.conflict = False  # the other poller stopped
        tg.user_message("hello after the conflict")
        await wait_for_text(tg, "echo: hello after the conflict", timeout=20)
        assert runner.adapters["telegram"].health.state == "ready"
    finally:
        await runner.stop()


async def test_killed_after_storing_the_update_replies_exactly_once_after_restart(tmp_path, tg: FakeTelegram):
    async with FakeLLM() as llm:
        llm.script(Reply.hang())
        env = {**os.environ, **gateway_env(tmp_path, llm.base_url, **telegram_settings(tg))}
        cmd = [sys.executable, "-m", "gateway", "run"]
        first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            tg.user_message("survive this")
            await llm.wait_for_requests(1, timeout=15)  # stored, and the turn is running
            first.send_signal(signal.SIGKILL)
            first.wait(5)
        finally:
            first.kill()
        second = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            await wait_for_text(tg, "echo: survive this", timeout=20)
            await asyncio.sleep(1.5)
            assert sent_texts(tg, ANN) == ["echo: survive this"]
            assert len(llm.requests) == 2
        finally:
            second.terminate()
            second.wait(10)


async def test_an_edit_that_changes_nothing_is_not_sent_and_one_that_does_is(tg: FakeTelegram):
    from platforms.base import Button, ChatRef
    from platforms.base import Reply as Out
    from platforms.telegram.adapter import TelegramAdapter

    adapter = TelegramAdapter(tg.token, base_url=tg.url)
    await adapter.connect()
    chat = ChatRef("telegram", str(ANN))
    try:
        draft = await adapter.send(chat, Out(text="All done.", plain="All done.", final=False))
        await adapter.edit(chat, draft, Out(text="All done.", plain="All done.", final=True))  # the draft as is
        assert tg.calls_to("editMessageText") == []
        await adapter.edit(chat, draft, Out(text="All <b>done</b>.", plain="All done.", final=True))
        await adapter.edit(chat, draft, Out(text="All <b>done</b>.", plain="All done.", final=True,
                                            buttons=((Button("Again", "again"),),)))
        edits = tg.calls_to("editMessageText")
        assert [(e.get("text"), e.get("parse_mode"), "reply_markup" in e.params) for e in edits] == [
            ("All <b>done</b>.", "HTML", False), ("All <b>done</b>.", "HTML", True)]
    finally:
        await adapter.bot.shutdown()


# `chatgate run` (gateway.cli.launch, as the console script starts it) with a thread that reports on a
# line of its stdin what the tests below ask of the process.
_REPORTING_GATEWAY = (
    "import gc, json, os, sys, threading\n"
    "def report():\n"
    "    for _ in sys.stdin:\n"
    "        print('REPORT', json.dumps({'ptb': 'telegram' in sys.modules, 'gc_on': gc.isenabled(),\n"
    "                                    'prometheus': 'prometheus_client' in sys.modules,\n"
    "                                    'frozenlist_c': 'frozenlist._frozenlist' in sys.modules,\n"
    "                                    'openai': 'openai' in sys.modules,\n"
    "                                    'frozenlist_env': 'FROZENLIST_NO_EXTENSIONS' in os.environ,\n"
    "                                    'frozen': gc.get_freeze_count(), 'young': gc.get_threshold()[0]}),\n"
    "              flush=True)\n"
    "threading.Thread(target=report, daemon=True).start()\n"
    "from gateway.cli.launch import main; sys.exit(main(['run']))")


async def _report(gateway: asyncio.subprocess.Process) -> dict[str, Any]:
    import json

    assert gateway.stdin is not None and gateway.stdout is not None
    gateway.stdin.write(b"?\n")
    while not (line := await asyncio.wait_for(gateway.stdout.readline(), 15)).startswith(b"REPORT "):
        assert line, "the gateway exited"
    return json.loads(line.split(b" ", 1)[1])


async def test_start_up_leaves_metrics_to_their_first_use_and_collects_once_up(tmp_path, tg: FakeTelegram):
    """`chatgate run` starts with python-telegram-bot loaded (Telegram is configured: its `Bot` makes
    every call), imports the openai SDK once it is ready (not on the way there: see test_llm_client; not
    at the first message either) and answers a private message, a button press and a group mention. By then the
    collector is on again, with what start-up made frozen (gateway/cli/launch.py). The metrics' library
    waits for the first message. frozenlist's extension is not loaded at all, and
    frozenlist's switch is not left in the environment of the agent's commands."""
    async with FakeLLM() as llm:
        env = {**os.environ, **gateway_env(tmp_path, llm.base_url, **telegram_settings(tg))}
        gateway = await asyncio.create_subprocess_exec(sys.executable, "-c", _REPORTING_GATEWAY, env=env,
                                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                       stderr=subprocess.DEVNULL)
        try:
            await tg.wait_for("getUpdates", timeout=20)
            idle = await _report(gateway)
            assert {k: v for k, v in idle.items() if k in ("ptb", "prometheus")} == {"ptb": True, "prometheus": False}
            # what else kept memory at rest: frozenlist's compiled form (its C++ runtime)
            assert (idle["frozenlist_c"], idle["frozenlist_env"]) == (False, False)

            async def the_sdk_loaded() -> bool:
                return (await _report(gateway))["openai"]

            await eventually(the_sdk_loaded, what="the openai SDK imported once ready, before any message")
            assert llm.requests == []
            tg.user_message("hello")
            await wait_for_text(tg, "echo: hello", timeout=20)
            assert (await _report(gateway))["prometheus"] is True
            [reply] = tg.sent_messages(ANN)
            tg.callback_query("no-such-button", message_id=reply.message_id)
            await tg.wait_for("answerCallbackQuery", timeout=15)
            tg.user_message("@chatgate_bot and in the group?", chat_type="group")
            await wait_for_text(tg, "echo: [Ann] and in the group?", timeout=20)

            async def collector_on_and_startup_frozen() -> bool:
                report = await _report(gateway)
                return report["gc_on"] and report["frozen"] > 10_000 and report["young"] == YOUNG_THRESHOLD

            await eventually(collector_on_and_startup_frozen, what="the collector on, start-up frozen")
        finally:
            gateway.terminate()
            await gateway.wait()


async def test_a_refused_token_is_one_line_at_start_and_nothing_left_open(tmp_path, tg: FakeTelegram):
    env = {**os.environ, **gateway_env(tmp_path, None, **telegram_settings(tg)),
           "CHATGATE_PLATFORMS__TELEGRAM__TOKEN": "999:WRONG-SECRET-PART"}
    gateway = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway", "run", env=env,
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(gateway.communicate(), 30)
    assert gateway.returncode == EXIT_REFUSED  # (nothing else can serve: a restart would not help)
    errors = err.decode()
    assert "chatgate cannot start: telegram: Telegram refused the bot token (platforms.telegram.token / " \
        "TELEGRAM_BOT_TOKEN)" in errors.splitlines()
    assert "Traceback" not in errors and "Unclosed" not in errors and "WRONG-SECRET-PART" not in errors + out.decode()
    assert [c.status for c in tg.calls] == [401]  # getMe, refused; nothing after it
