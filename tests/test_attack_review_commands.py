"""Attack review of the chat-command limit (gateway.max_commands_per_minute, 3172f4a), as an allowed
member of a shared Telegram group: what still made the bot answer each of a flood of commands into it.

- The limit was per session key, and each forum topic (a Slack or Discord thread) is a session of its
  own: a member spreading /help over topics they open got `max_commands_per_minute` answers per topic.
- /stop, /approve and /deny are never limited (they must always act), and a member sending them in a
  loop got "Nothing is running." / "There is no approval waiting here." for each one.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import DEFAULT_SUPERGROUP_ID, FakeTelegram
from tests.harness import ANN, eventually, telegram_gateway
from tests.test_flood_and_paste import BOB, GROUP, group_say, refused

FORUM = DEFAULT_SUPERGROUP_ID


def finished(home: Path) -> int:
    with sqlite3.connect(home / "state.db") as db:
        return db.execute("SELECT count(*) FROM inbox WHERE state NOT IN ('received', 'processing')").fetchone()[0]


def settled(home: Path) -> bool:
    """Every reply queued is sent. A command's reply is queued in the write that finishes its message, so once
    the messages are `finished`, nothing more will be said about them."""
    with sqlite3.connect(home / "state.db") as db:
        return db.execute("SELECT count(*) FROM outbox WHERE state = 'pending'").fetchone()[0] == 0


def texts(tg: FakeTelegram, chat: int, part: str) -> list[str]:
    return [m.text or "" for m in tg.sent_messages(chat) if part in (m.text or "")]


async def test_commands_spread_over_forum_topics_share_the_members_limit_in_that_chat(tmp_path, tg: FakeTelegram):
    async with FakeLLM() as llm:
        runner = await telegram_gateway(tmp_path, llm, tg, access__allowed_users=f"{{telegram: [{ANN}, {BOB}]}}",
                                        gateway__max_commands_per_minute=3, review__enabled="false")
        try:
            for topic in range(11, 17):  # six topics, one /help in each
                tg.user_message("@chatgate_bot /help", chat_type="supergroup", message_thread_id=topic,
                                user_id=BOB, first_name="Bob", username="bob")
            await eventually(lambda: finished(tmp_path) == 6, what="all six /help taken or refused")
            await eventually(lambda: len(texts(tg, FORUM, "/status")) >= 3, what="three /help answers")
            await eventually(lambda: texts(tg, FORUM, "commands in a minute"), what="the notice")
            await eventually(lambda: settled(tmp_path), what="every reply sent")
            assert len(texts(tg, FORUM, "/status")) == 3, texts(tg, FORUM, "/status")
            assert [why for _, why in refused(tmp_path)] == ["too_many_commands"] * 3
            assert len(texts(tg, FORUM, "commands in a minute")) == 1  # one notice, in the chat
        finally:
            await runner.stop()


async def test_a_flood_of_stop_approve_and_deny_that_do_nothing_gets_a_limited_number_of_answers(
        tmp_path, tg: FakeTelegram):
    async with FakeLLM() as llm:
        runner = await telegram_gateway(tmp_path, llm, tg, access__allowed_users=f"{{telegram: [{ANN}, {BOB}]}}",
                                        gateway__group_sessions="shared", gateway__max_commands_per_minute=3,
                                        review__enabled="false")
        try:
            flood = ["/stop", "/stop@chatgate_bot", "/STOP", "/approve", "/deny", "/stop", "/approve 1234", "/deny"]
            for text in flood:
                group_say(tg, BOB, "Bob", text)
            await eventually(lambda: finished(tmp_path) == len(flood), what="the flood taken")
            answers = lambda: texts(tg, GROUP, "Nothing is running") + texts(tg, GROUP, "no approval waiting")  # noqa: E731
            await eventually(lambda: len(answers()) >= 3, what="three answers")
            await eventually(lambda: settled(tmp_path), what="every reply sent")
            assert len(answers()) == 3, answers()
            group_say(tg, ANN, "Ann", "/stop")  # Ann's budget is her own
            await eventually(lambda: len(answers()) == 4, what="Ann's /stop answered")
        finally:
            await runner.stop()


async def test_a_flood_of_bare_noes_at_someone_elses_request_gets_a_limited_number_of_answers(
        tmp_path, tg: FakeTelegram):
    async with FakeLLM() as llm:
        llm.script(Reply.tool_calls([("terminal", {"command": "rm -rf build"})]), Reply.text("done"))
        runner = await telegram_gateway(tmp_path, llm, tg, access__allowed_users=f"{{telegram: [{ANN}, {BOB}]}}",
                                        gateway__group_sessions="shared", gateway__max_commands_per_minute=3,
                                        review__enabled="false", agent__sandbox__mode="off")
        try:
            group_say(tg, ANN, "Ann", "clean up")
            await eventually(lambda: any(m.reply_markup for m in tg.sent_messages(GROUP)), what="Ann's approval prompt")
            for _ in range(6):
                group_say(tg, BOB, "Bob", "no")  # the one request waiting here: a bare no answers it
            not_his = lambda: texts(tg, GROUP, "not yours to decide")  # noqa: E731
            await eventually(lambda: len(not_his()) >= 3, what="three answers")
            await eventually(lambda: finished(tmp_path) == 6, what="Bob's six noes taken")
            await eventually(lambda: settled(tmp_path), what="every reply sent")
            assert len(not_his()) == 3, not_his()
        finally:
            await runner.stop()
