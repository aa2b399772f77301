"""kill -9 in the instant between a send and the write that records its message id, then a restart:
the person sees one message with the whole answer, never the same answer twice.

The fake platform makes the message and holds its answer (`hold_next(..., after_processing=True)`);
the test kills `chatgate run` while it waits for that answer, so the platform has the message and
chatgate never learned its id. That is the window issue 33 measured (a few ms idle, over 140 ms
under load), held open deterministically.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import (ANN, Daemon, Tab, bubbles, each_answered_once, eventually, free_port, sent_texts,
                           telegram_settings, wait_for_text)
from tests.test_crash_e2e import user_text
from tests.test_reply_delivery_e2e import Locked

MADE = -3  # a fake's call status: it took effect, its answer is held


def made(call: Any) -> bool:
    return call.status == MADE


async def ready(url: str) -> bool:
    """The daemon at `url` answers /readyz with 200 (its platforms are up)."""
    try:
        async with aiohttp.ClientSession() as http, http.get(f"{url}/readyz") as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def killed_in_the_window_and_restarted(daemon: Daemon, tg: FakeTelegram, text: str) -> None:
    """Start, say `text`, kill as soon as Telegram has made the message whose answer it holds, start
    again, and wait until the reply is recorded as sent."""
    daemon.start()
    tg.user_message(text)
    await tg.wait_for("sendMessage", made, timeout=20)
    daemon.kill()
    daemon.start()
    await eventually(lambda: [r["state"] for r in daemon.rows("SELECT state FROM outbox")] == ["sent"],
                     timeout=20, what="the reply recorded as sent")


async def test_killed_between_the_previews_send_and_its_record_the_rerun_edits_that_message(
        tmp_path, tg: FakeTelegram):
    async with FakeLLM() as llm:
        llm.script(Reply.text("Thinking about it, " * 40, chunk_size=20, chunk_delay=0.5))
        tg.hold_next("sendMessage", after_processing=True)  # the preview's first message: made, answer held
        daemon = Daemon(tmp_path, llm, telegram_settings(tg))
        try:
            daemon.start()
            tg.user_message("tell me")
            await tg.wait_for("sendMessage", made, timeout=20)
            daemon.kill()
            [orphan] = sent_texts(tg, ANN)  # on the platform; its id never reached chatgate
            assert orphan.startswith("Thinking")
            llm.script(Reply.text("Here is the whole answer, streamed in pieces.", chunk_size=13, chunk_delay=0.3))
            daemon.start()
            await wait_for_text(tg, "Here is the whole answer, streamed in pieces.", timeout=20)
            assert sent_texts(tg, ANN) == ["Here is the whole answer, streamed in pieces."]
            assert len(tg.calls_to("sendMessage")) == 1  # the re-run found the orphan and edited it
        finally:
            daemon.close()


async def test_killed_while_the_previews_first_send_waits_after_the_commit_the_reply_edits_it(
        tmp_path, tg: FakeTelegram):
    """The turn's answer is committed while the preview's first send is still on its way: the outbox
    sends the reply after the restart, and finds the preview's message instead of adding one."""
    async with FakeLLM() as llm:
        llm.script(Reply.text("The answer is forty-two.", chunk_size=11, chunk_delay=0.3))
        tg.hold_next("sendMessage", after_processing=True)
        daemon = Daemon(tmp_path, llm, telegram_settings(tg))
        try:
            daemon.start()
            tg.user_message("what is it?")
            await tg.wait_for("sendMessage", made, timeout=20)
            await eventually(lambda: daemon.rows("SELECT 1 FROM outbox"), timeout=20, what="the reply committed")
            daemon.kill()
            [orphan] = sent_texts(tg, ANN)
            assert orphan.startswith("The answer") and "forty-two" not in orphan
            daemon.start()
            await wait_for_text(tg, "The answer is forty-two.", timeout=20)
            assert sent_texts(tg, ANN) == ["The answer is forty-two."]
            assert len(llm.requests) == 1
            await eventually(lambda: [r["state"] for r in daemon.rows("SELECT state FROM outbox")] == ["sent"],
                             what="the reply recorded as sent")
        finally:
            daemon.close()


async def test_killed_between_a_replys_send_and_its_record_the_restart_does_not_send_it_again(
        tmp_path, tg: FakeTelegram):
    """A reply without a draft (a command's answer) is sent as a new message: its id unknown after the
    crash, the restart finds it rather than sending the answer again."""
    async with FakeLLM() as llm:
        tg.hold_next("sendMessage", after_processing=True, match=lambda c: "Commands:" in str(c.get("text")))
        daemon = Daemon(tmp_path, llm, telegram_settings(tg))
        try:
            await killed_in_the_window_and_restarted(daemon, tg, "/help")
            [shown] = sent_texts(tg, ANN)
            assert shown.startswith("Commands:")
            assert len(tg.calls_to("sendMessage")) == 1
        finally:
            daemon.close()


async def test_killed_between_the_second_parts_send_and_its_record_it_is_not_sent_again(
        tmp_path, tg: FakeTelegram):
    first, second = "A" * 3000, "B" * 3000
    async with FakeLLM() as llm:
        llm.script(Reply.text(f"{first}\n\n{second}\n\nPART-TWO-END"))
        tg.hold_next("sendMessage", after_processing=True, match=lambda c: "PART-TWO-END" in str(c.get("text")))
        daemon = Daemon(tmp_path, llm, telegram_settings(tg))
        try:
            await killed_in_the_window_and_restarted(daemon, tg, "a long one please")
            texts = sent_texts(tg, ANN)
            assert len(texts) == 2 and texts[0].startswith("A" * 100) and texts[1].endswith("PART-TWO-END")
            assert len(llm.requests) == 1
        finally:
            daemon.close()


async def test_a_storm_of_kills_in_the_window_across_many_chats_leaves_one_answer_each(tmp_path, tg: FakeTelegram):
    users = list(range(6001, 6025))
    phase = {"name": "stream"}
    answers = {  # what the model says to `text` in each phase
        "stream": lambda text: Reply.text(f"partial {text} " + "… " * 200, chunk_size=12, chunk_delay=5.0),
        "answer": lambda text: Reply.text(f"answer to {text}, in full", chunk_size=10, chunk_delay=0.2),
    }

    async with FakeLLM() as llm:
        llm.responder = lambda body: answers[phase["name"]](user_text(body))
        # 1: every chat's preview made by Telegram, none of their ids known to chatgate
        tg.hold_next("sendMessage", count=len(users), after_processing=True)
        daemon = Daemon(tmp_path, llm, telegram_settings(tg, access__dm_policy="open"))
        try:
            daemon.start()
            for user in users:
                tg.user_message(f"q{user}", user_id=user)
            await tg.wait_for("sendMessage", made, count=len(users), timeout=40)
            daemon.kill()
            assert all(len(tg.sent_messages(user)) == 1 for user in users)
            # 2: back, answering; killed again once a third of the chats are answered
            phase["name"] = "answer"
            daemon.start()
            await eventually(lambda: len(daemon.rows("SELECT 1 FROM outbox WHERE state = 'sent'")) >= len(users) // 3,
                             timeout=40, what="a third of the chats answered")
            daemon.kill()
            # 3: back again: every chat answered, in the one message it already had
            daemon.start()
            await each_answered_once(tg, daemon, {user: f"answer to q{user}, in full" for user in users})
            assert len(tg.calls_to("sendMessage")) == len(users)
        finally:
            daemon.close()


async def test_web_chat_killed_between_the_previews_frame_and_its_record_the_rerun_replaces_that_bubble(tmp_path):
    """The web chat's ids are chatgate's own: the draft's is its inbox row's, so the re-run's draft goes
    out under the id the page already shows, and replaces it. Another process holds the database's
    write lock while the preview's first frame goes out, so the daemon is killed before it records it."""
    port, token = free_port(), "window-test-token"
    url = f"http://127.0.0.1:{port}"
    async with FakeLLM() as llm:
        llm.script(Reply.text("Thinking about it, " * 40, delay=3.0, chunk_size=20, chunk_delay=0.5))
        daemon = Daemon(tmp_path, llm, {"platforms__webchat__enabled": "true", "platforms__webchat__token": token,
                                        "http__port": port})
        locked = Locked(tmp_path)
        try:
            daemon.start()
            await eventually(lambda: ready(url), timeout=30, what="the web chat served")
            async with Tab(None, url=url, token=token) as tab:
                await tab.say("tell me")
                await llm.wait_for_requests(1, timeout=20)  # (its first words come 3 s later)
                await locked.take()  # nothing the daemon writes from now on is committed
                await tab.wait_for(lambda f: f["type"] == "message" and not f["final"], timeout=20)
                daemon.kill()
            await locked.release()
            llm.script(Reply.text("Here is the whole answer."))
            daemon.start()
            await eventually(lambda: ready(url), timeout=30, what="the web chat served again")
            async with Tab(None, tab.chat_id, url=url, token=token) as again:  # the page reconnects
                await again.reply(timeout=20)
            assert [text for text, _ in bubbles(tab.frames + again.frames).values()] == ["Here is the whole answer."]
        finally:
            await locked.release()
            daemon.close()


async def test_two_forum_topics_killed_in_the_window_each_answer_shows_in_its_own_topic(tmp_path, tg: FakeTelegram):
    """Two topics of one forum group, each turn's preview made by Telegram and its id never learned. The
    re-run looks for its message among the bot's unrecorded ones after the newest id it knew — the same
    for both — and the first it could edit was the other topic's: each answer showed in the other topic."""
    from tests.fakes.telegram_objects import DEFAULT_SUPERGROUP_ID as GROUP

    phase = {"name": "stream"}
    asked_both, first_made, first_found = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def answer(body: dict[str, Any]) -> Reply:
        text = user_text(body)
        if phase["name"] == "stream":  # both asked before either preview goes out; topic 22's first
            await asked_both.wait()
            if "q11" in text:
                await first_made.wait()
            return Reply.text(f"partial {text} " + "… " * 200, chunk_size=12, chunk_delay=5.0)
        if "q22" in text:  # topic 11 looks for its message first
            await first_found.wait()
        return Reply.text(f"answer to {text}, in full", chunk_size=10, chunk_delay=0.2)

    async with FakeLLM() as llm:
        llm.responder = answer
        tg.hold_next("sendMessage", count=2, after_processing=True)
        daemon = Daemon(tmp_path, llm, telegram_settings(tg, platforms__telegram__require_mention=False))
        try:
            daemon.start()
            tg.user_message("q11", chat_type="supergroup", message_thread_id=11)
            tg.user_message("q22", chat_type="supergroup", message_thread_id=22)
            await llm.wait_for_requests(2, timeout=20)
            asked_both.set()
            await tg.wait_for("sendMessage", lambda c: made(c) and c.get("message_thread_id") == "22", timeout=20)
            first_made.set()
            await tg.wait_for("sendMessage", made, count=2, timeout=20)
            daemon.kill()
            assert {m.message_thread_id for m in tg.sent_messages(GROUP)} == {11, 22}

            phase["name"] = "answer"
            daemon.start()
            await tg.wait_for("editMessageText", lambda c: "q11" in str(c.get("text")), timeout=20)
            first_found.set()
            await wait_for_text(tg, "answer to [Ann] q11, in full", timeout=20)
            await wait_for_text(tg, "answer to [Ann] q22, in full", timeout=20)
            shown = {m.message_thread_id: m for m in tg.sent_messages(GROUP)}
            assert {topic: m.text for topic, m in shown.items()} == {11: "answer to [Ann] q11, in full",
                                                                      22: "answer to [Ann] q22, in full"}
            assert not any("q11" in version for version in shown[22].versions[1:]), shown[22].versions
            assert not any("q22" in version for version in shown[11].versions[1:]), shown[11].versions
            assert len(tg.calls_to("sendMessage")) == 2  # each re-run found its own preview
        finally:
            daemon.close()
