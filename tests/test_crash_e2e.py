"""kill -9 at each step of the pipeline, then a restart: no reply lost, none doubled.

The gateway runs as `chatgate run` in a subprocess against the in-process fakes; the test kills
it at a known point (an LLM request hanging, a send held by the fake, a row in the database) and
starts it again on the same state.
"""

from __future__ import annotations

import html
from typing import Any, Callable

from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import ANN, Daemon, each_answered_once, eventually, sent_texts, telegram_settings, wait_for_text


def user_text(body: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


async def test_killed_mid_stream_the_rerun_edits_the_message_already_shown(tmp_path, tg: FakeTelegram):
    async with FakeLLM() as llm:
        llm.script(Reply.text("Thinking about it, " * 40, chunk_size=20, chunk_delay=0.5))
        daemon = Daemon(tmp_path, llm, telegram_settings(tg))
        try:
            daemon.start()
            tg.user_message("tell me")
            await tg.wait_for("sendMessage", timeout=20)  # the streaming preview is out
            await eventually(lambda: daemon.rows("SELECT 1 FROM inbox WHERE draft_message_id IS NOT NULL"),
                             what="the preview's id recorded")
            daemon.kill()
            llm.script(Reply.text("Here is the whole answer."))
            daemon.start()
            await wait_for_text(tg, "Here is the whole answer.", timeout=20)
            assert sent_texts(tg, ANN) == ["Here is the whole answer."]  # one message, edited in place
            assert len(tg.calls_to("sendMessage")) == 1
        finally:
            daemon.close()


async def test_killed_mid_tool_the_turn_is_reported_not_run_again(tmp_path, tg: FakeTelegram):
    workspace = tmp_path / "ws"
    async with FakeLLM() as llm:
        llm.script(Reply.tool_calls([("terminal", {"command": "echo ran >> ran.txt; sleep 3"})]))
        daemon = Daemon(tmp_path, llm, telegram_settings(tg, agent__workspace=workspace))
        try:
            daemon.start()
            tg.user_message("append and wait")
            await eventually(lambda: (workspace / "ran.txt").exists(), timeout=20, what="the command started")
            daemon.kill()
            daemon.start()
            await tg.wait_for("sendMessage", lambda c: "I was interrupted" in str(c.get("text")), timeout=20)
            [shown] = sent_texts(tg, ANN)
            notice = html.unescape(shown)  # sent as Telegram HTML
            assert "terminal: echo ran >> ran.txt; sleep 3" in notice and 'Say "continue"' in notice
            assert (workspace / "ran.txt").read_text() == "ran\n"  # not run a second time
            assert len(llm.requests) == 1
            [row] = daemon.rows("SELECT state FROM inbox")
            assert row["state"] == "interrupted"
            llm.script(Reply.text("Carrying on."))
            tg.user_message("continue")
            await wait_for_text(tg, "Carrying on.", timeout=20)
            history = [m.get("content") for m in llm.requests[1]["messages"]]
            assert "append and wait" in history and notice in history  # the model knows what happened
        finally:
            daemon.close()


async def test_killed_after_the_first_part_of_a_split_reply_only_the_rest_is_sent(tmp_path, tg: FakeTelegram):
    first, second = "A" * 3000, "B" * 3000
    async with FakeLLM() as llm:
        llm.script(Reply.text(f"{first}\n\n{second}\n\nPART-TWO-END"))
        tg.hold_next("sendMessage", match=lambda c: "PART-TWO-END" in str(c.get("text")))
        daemon = Daemon(tmp_path, llm, telegram_settings(tg))
        try:
            daemon.start()
            tg.user_message("a long one please")
            await tg.wait_for("sendMessage", lambda c: c.status == -2, timeout=20)  # part two is held
            daemon.kill()
            daemon.start()
            await tg.wait_for("sendMessage", lambda c: c.status == 200 and "PART-TWO-END" in str(c.get("text")),
                              timeout=20)
            texts = sent_texts(tg, ANN)
            assert len(texts) == 2 and texts[0].startswith("A" * 100) and texts[1].endswith("PART-TWO-END")
            assert len(llm.requests) == 1  # the turn was committed: only its delivery was resumed
        finally:
            daemon.close()


async def test_sigterm_with_turns_in_flight_drains_them(tmp_path, tg: FakeTelegram):
    users = [4001, 4002, 4003, 4004, 4005]
    async with FakeLLM(latency=1.0) as llm:
        daemon = Daemon(tmp_path, llm, telegram_settings(tg, access__dm_policy="open", gateway__drain_seconds=20))
        try:
            daemon.start()
            await tg.wait_for("getUpdates", timeout=20)
            for user in users:
                tg.user_message(f"hi {user}", user_id=user)
            await llm.wait_for_requests(len(users), timeout=20)
            assert await daemon.terminate() == 0
            for user in users:  # answered before it exited
                assert sent_texts(tg, user) == [f"echo: hi {user}"]
            assert not daemon.rows("SELECT 1 FROM inbox WHERE state IN ('received', 'processing')")
            assert not daemon.rows("SELECT 1 FROM outbox WHERE state = 'pending'")
        finally:
            daemon.close()


def storm_model(phase: dict[str, str]) -> Callable[[dict[str, Any]], Reply]:
    """The model of a storm of kills, by `phase["name"]`: "hang" (every turn waits on it), "stream" (a preview
    goes out, then the model stalls), else "answer to <the message>" at once."""
    def model(body: dict[str, Any]) -> Reply:
        text = user_text(body)
        if phase["name"] == "hang":
            return Reply.hang()
        if phase["name"] == "stream":
            return Reply.text(f"partial {text} " + "… " * 200, chunk_size=12, chunk_delay=5.0)
        return Reply.text(f"answer to {text}")
    return model


async def test_a_storm_of_kills_across_thirty_chats_leaves_every_answer_exactly_once(tmp_path, tg: FakeTelegram):
    users = list(range(5001, 5031))
    phase = {"name": "hang"}
    async with FakeLLM() as llm:
        llm.responder = storm_model(phase)
        daemon = Daemon(tmp_path, llm, telegram_settings(tg, access__dm_policy="open"))
        try:
            daemon.start()
            for user in users:
                tg.user_message(f"q{user}", user_id=user)
            # 1: every message stored, every turn waiting on the model
            await llm.wait_for_requests(len(users), timeout=30)
            daemon.kill()
            # 2: every turn has shown (and recorded) a preview, the model still writing
            phase["name"] = "stream"
            daemon.start()
            await eventually(lambda: len(daemon.rows("SELECT 1 FROM inbox WHERE draft_message_id IS NOT NULL"))
                             == len(users), timeout=40, what="30 previews recorded")
            daemon.kill()
            # 3: every answer committed, its edit of the preview held at the platform
            phase["name"] = "answer"
            release = tg.hold_next("editMessageText", count=len(users),
                                   match=lambda c: "answer to" in str(c.get("text")))
            daemon.start()
            await tg.wait_for("editMessageText", lambda c: c.status == -2, count=len(users), timeout=40)
            daemon.kill()
            # 4: half of them held again, the rest delivered
            tg._faults.clear()
            release.set()
            tg.hold_next("editMessageText", count=len(users) // 2,
                         match=lambda c: int(c.get("chat_id")) % 2 == 0 and "answer to" in str(c.get("text")))
            daemon.start()
            await eventually(lambda: len(daemon.rows("SELECT 1 FROM outbox WHERE state = 'sent'")) >= len(users) // 2,
                             timeout=40, what="the odd chats delivered")
            daemon.kill()
            # 5: killed again right after it is back, before it is done
            daemon.start()
            await tg.wait_for("getUpdates", since=len(tg.calls), timeout=20)
            daemon.kill()
            daemon.start()
            await each_answered_once(tg, daemon, {user: f"answer to q{user}" for user in users})
        finally:
            daemon.close()
