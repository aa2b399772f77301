"""Replies that must still go out: committed just before `/stop` or a newer message, sent while the
database refuses the record, refused for good ahead of others in their chat, failing for longer
than a burst of retries, failing while the platform is down, and a steered message whose turn's
model failed. Real clients against the fakes; the database is locked by another process."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from tests import harness
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import Call, FakeTelegram
from tests.fakes.telegram_objects import ApiError, Fault
from tests.harness import (ANN, Daemon, eventually, sent_texts, state_rows, telegram_gateway, telegram_settings,
                           wait_for_text)

KEY = f"telegram:{ANN}"


def rows(home: Path, sql: str, *args: Any) -> list[Any]:
    """Read the gateway's database as an operator would, from outside the process (either engine)."""
    return state_rows(home, sql, *args)


def final(word: str) -> Any:
    """Matches the final send (or edit) of the answer to "**word**": the preview shows plain text,
    the answer goes out as Telegram HTML."""
    return lambda c: c.get("parse_mode") == "HTML" and f"<b>{word}</b>" in str(c.get("text"))


def fail(tg: FakeTelegram, status: int, count: int, match: Any, description: str = "Bad Gateway") -> None:
    """Answer the next `count` calls to ANN that `match` accepts with `status`."""
    tg._faults.append(Fault("*", count, ApiError(status, description), str(ANN), match=match))


def answered(tg: FakeTelegram, word: str) -> list[Call]:
    """The calls that put the final answer to "**word**" on screen."""
    return [c for c in tg.calls if c.status == 200 and final(word)(c)]


async def run(*args: str) -> None:
    """Another program writing the database (an operator's shell would do the same)."""
    done = await asyncio.create_subprocess_exec(sys.executable, "-c", *args)
    assert await done.wait() == 0


async def sql(home: Path, statement: str) -> None:
    """Change the gateway's database as an operator would, from another process (PostgreSQL: `state_rows`)."""
    if harness.STORAGE_URL is not None:
        await asyncio.to_thread(state_rows, home, statement)
        return
    await run(f"import sqlite3\nwith sqlite3.connect({str(home / 'state.db')!r}, timeout=30) as db: "
              f"db.execute({statement!r})")


class Locked:
    """Another process holding the database's write lock (`BEGIN IMMEDIATE`) until `release()`."""

    def __init__(self, home: Path) -> None:
        self.path = home / "state.db"
        self.process: asyncio.subprocess.Process | None = None

    async def take(self) -> None:
        script = ("import sqlite3, sys\n"
                  f"db = sqlite3.connect({str(self.path)!r}, isolation_level=None, timeout=30)\n"
                  "db.execute('BEGIN IMMEDIATE')\nprint('locked', flush=True)\nsys.stdin.readline()\n"
                  "db.execute('COMMIT')\n")
        self.process = await asyncio.create_subprocess_exec(sys.executable, "-c", script, stdin=asyncio.subprocess.PIPE,
                                                            stdout=asyncio.subprocess.PIPE)
        assert self.process.stdout is not None
        assert await asyncio.wait_for(self.process.stdout.readline(), 30) == b"locked\n"

    async def release(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        assert self.process.stdin is not None
        self.process.stdin.write(b"done\n")
        await self.process.stdin.drain()
        await asyncio.wait_for(self.process.wait(), 30)


# -- a reply committed just before it would have been cut off ---------------------------------


async def first_then_second_each_once(home: Path, tg: FakeTelegram) -> Call:
    """The first answer went out once and before the second (not overtaken by it), and the outbox is done;
    the call that delivered the first."""
    first, second = answered(tg, "first"), answered(tg, "second")
    assert len(first) == 1 and len(second) == 1
    assert tg.calls.index(first[0]) < tg.calls.index(second[0])
    await eventually(lambda: {r["state"] for r in rows(home, "SELECT state FROM outbox")} == {"sent"},
                     what="every reply recorded as sent")
    return first[0]


async def _answer_committed_while_its_draft_is_held(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram) -> asyncio.Event:
    """Ann asks; the answer streams into a draft whose first send Telegram holds; the turn commits the
    answer and waits for that send (to edit the draft rather than send a second message)."""
    llm.script(Reply.text("**first** answer, streamed", chunk_size=4, chunk_delay=0.05))
    release = tg.hold_next("sendMessage", chat_id=ANN)  # the draft
    tg.user_message("first")
    await tg.wait_for("sendMessage", lambda c: c.status == -2, timeout=10)
    await eventually(lambda: rows(tmp_path, "SELECT 1 FROM outbox"), what="the answer committed")
    return release


async def test_a_reply_committed_just_before_stop_still_arrives_and_before_the_next_one(tmp_path, llm: FakeLLM,
                                                                                       tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg)
    release = asyncio.Event()
    try:
        release = await _answer_committed_while_its_draft_is_held(tmp_path, llm, tg)
        tg.user_message("/stop")
        await wait_for_text(tg, "The answer was already on its way.", timeout=10)  # /stop answered
        release.set()
        tg.user_message("**second**")
        await wait_for_text(tg, "echo: <b>second</b>", timeout=10)
        await wait_for_text(tg, "<b>first</b> answer, streamed", timeout=10)  # no restart needed
        first = await first_then_second_each_once(tmp_path, tg)
        assert first.method == "editMessageText"  # the draft became the answer: one message, not two
        assert len(tg.sent_messages(ANN)) == 3  # the answer, what /stop said, the second answer
    finally:
        release.set()
        await runner.stop()


async def test_a_newer_message_under_interrupt_does_not_cut_off_a_committed_reply(tmp_path, llm: FakeLLM,
                                                                                 tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg, gateway__busy_policy="interrupt")
    release = asyncio.Event()
    try:
        release = await _answer_committed_while_its_draft_is_held(tmp_path, llm, tg)
        tg.user_message("**second**")
        await eventually(lambda: len(llm.requests) >= 2 or runner.parts.sessions.waiting(KEY) >= 1,
                         what="the newer message taken")
        release.set()
        await wait_for_text(tg, "<b>first</b> answer, streamed", timeout=10)
        await wait_for_text(tg, "echo: <b>second</b>", timeout=10)
        await first_then_second_each_once(tmp_path, tg)
        assert len(tg.sent_messages(ANN)) == 2  # the draft became the first answer
    finally:
        release.set()
        await runner.stop()


async def test_a_reply_left_pending_with_nothing_sending_it_goes_out_at_a_tick(tmp_path, llm: FakeLLM,
                                                                              tg: FakeTelegram):
    # The operator sees a reply given up (`chatgate inbox failed`: the person had blocked the bot),
    # the person unblocks it, and the operator puts the reply back in the outbox from a sqlite3 shell.
    blocked = {"now": True}
    fail(tg, 403, 10**6, lambda c: blocked["now"] and final("blocked")(c), "Forbidden: bot was blocked by the user")
    runner = await telegram_gateway(tmp_path, llm, tg, gateway__tick_seconds=0.2)
    try:
        tg.user_message("**blocked**")
        await eventually(lambda: rows(tmp_path, "SELECT 1 FROM outbox WHERE state = 'failed'"), 10,
                         "the reply given up")
        blocked["now"] = False
        await sql(tmp_path, "UPDATE outbox SET state = 'pending', error = NULL WHERE state = 'failed'")
        await wait_for_text(tg, "echo: <b>blocked</b>", timeout=20)  # nothing else flushes that chat
        assert len(answered(tg, "blocked")) == 1
        await eventually(lambda: rows(tmp_path, "SELECT state FROM outbox")[0]["state"] == "sent", what="sent")
    finally:
        await runner.stop()


# -- a database error after a successful send ---------------------------------------------------


def _write_failed(log: Path) -> bool:
    """The daemon's log says a write failed on the lock (not only that it waits for it)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return any("is locked" in line and "writes wait" not in line for line in text.splitlines())


async def test_a_record_the_database_refuses_after_a_send_neither_fails_the_turn_nor_sends_twice(tmp_path,
                                                                                                 tg: FakeTelegram):
    first, second = "A" * 3000, "B" * 3000
    async with FakeLLM() as llm:
        llm.script(Reply.text(f"{first}\n\n{second}\n\nPART-TWO-END"))
        release = tg.hold_next("sendMessage", match=lambda c: "PART-TWO-END" in str(c.get("text")))
        daemon = Daemon(tmp_path, llm, telegram_settings(tg))
        lock = Locked(tmp_path)
        try:
            daemon.start()
            tg.user_message("a long one please")
            await tg.wait_for("sendMessage", lambda c: c.status == -2, timeout=30)  # part two at the platform
            await lock.take()  # another program takes the write lock: the record of part two cannot be written
            release.set()
            await tg.wait_for("sendMessage", lambda c: c.status == 200 and "PART-TWO-END" in str(c.get("text")),
                              timeout=10)
            await eventually(lambda: _write_failed(tmp_path / "gateway-1.log"), 30, "a write failing on the lock")
            await lock.release()
            tg.user_message("and now?")  # the chat goes on; nothing of the first reply goes out again
            await wait_for_text(tg, "echo: and now?", timeout=40)
            texts = sent_texts(tg, ANN)
            assert not any("Something went wrong" in t for t in texts), texts
            assert len(texts) == 3 and texts[0].startswith("A" * 100) and texts[1].endswith("PART-TWO-END"), texts
            await eventually(lambda: [r["state"] for r in daemon.rows("SELECT state FROM outbox ORDER BY id")]
                             == ["sent", "sent"], 30, "both replies recorded as sent")
            assert [r["state"] for r in daemon.rows("SELECT state FROM inbox ORDER BY id")] == ["done", "done"]
            assert await daemon.terminate() == 0  # a restart sends nothing of it again either
            daemon.start()
            tg.user_message("still there?")
            await wait_for_text(tg, "echo: still there?", timeout=40)
            assert sent_texts(tg, ANN)[:3] == texts and len(sent_texts(tg, ANN)) == 4
        finally:
            release.set()
            await lock.release()
            daemon.close()


# -- given up, or not given up ------------------------------------------------------------------


async def test_a_reply_refused_for_good_does_not_hold_back_the_next_one_in_its_chat(tmp_path, llm: FakeLLM,
                                                                                   tg: FakeTelegram):
    fail(tg, 502, 1, final("one"))  # first a server error: the chat waits for its retry…
    fail(tg, 400, 5, final("one"), "Bad Request: message text is empty")  # …which Telegram then refuses for good
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message("**one**")
        await tg.wait_until(lambda: any(c.status == 502 for c in tg.calls), 10, lambda: "the first failure")
        tg.user_message("**two**")  # its reply waits behind the first, in order
        await wait_for_text(tg, "echo: <b>two</b>", timeout=20)
        await eventually(lambda: [r["state"] for r in rows(tmp_path, "SELECT state FROM outbox ORDER BY id")]
                         == ["failed", "sent"], what="the first given up, the second sent")
        assert "rejected" in rows(tmp_path, "SELECT error FROM outbox ORDER BY id")[0]["error"]
        assert not answered(tg, "one")
    finally:
        await runner.stop()


async def test_a_5xx_storm_past_the_old_twelve_attempts_does_not_give_the_reply_up(tmp_path, llm: FakeLLM,
                                                                                  tg: FakeTelegram):
    fail(tg, 502, 2, final("one"))
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message("**one**")
        await eventually(lambda: [tuple(r) for r in rows(tmp_path, "SELECT state, attempts FROM outbox")]
                         == [("pending", 1)], what="the first attempt failed")
        # eleven failed attempts: what 2 + 4 + … + 300 s of 5xx (some 23 minutes) leave in the row
        await sql(tmp_path, "UPDATE outbox SET attempts = 11")
        await eventually(lambda: rows(tmp_path, "SELECT attempts FROM outbox")[0]["attempts"] == 12, 20,
                         "the twelfth attempt failed")
        [row] = rows(tmp_path, "SELECT state, error FROM outbox")
        assert row["state"] == "pending" and "Bad Gateway" in row["error"]  # not given up: it is an hour old at most
        tg.fail_next("getUpdates", status=502, description="Bad Gateway", count=1)  # Telegram blinks, then is back:
        await wait_for_text(tg, "echo: <b>one</b>", timeout=20)  # what waited goes out at once
        assert len(answered(tg, "one")) == 1
    finally:
        await runner.stop()


async def test_a_reply_failing_for_a_day_is_given_up_and_the_chat_goes_on(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    fail(tg, 502, 2, final("one"))
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message("**one**")
        await eventually(lambda: rows(tmp_path, "SELECT 1 FROM outbox WHERE attempts = 1"), what="a first failure")
        await sql(tmp_path, f"UPDATE outbox SET created_at = {time.time() - 86400 - 60}")  # queued a day ago
        tg.user_message("**two**")
        await wait_for_text(tg, "echo: <b>two</b>", timeout=20)
        await eventually(lambda: rows(tmp_path, "SELECT state FROM outbox ORDER BY id")[0]["state"] == "failed",
                         what="the day-old reply given up")
        [one] = rows(tmp_path, "SELECT attempts, error FROM outbox ORDER BY id LIMIT 1")
        assert one["attempts"] == 2 and "Bad Gateway" in one["error"]
        assert not answered(tg, "one")
    finally:
        await runner.stop()


async def test_failures_while_the_platform_is_down_are_not_counted_and_it_is_flushed_when_back(tmp_path,
                                                                                              tg: FakeTelegram):
    storm = {"on": False}
    gate = asyncio.Event()

    async def model(body: dict[str, Any]) -> Reply | None:
        await gate.wait()
        return None  # the echo

    async with FakeLLM() as llm:
        llm.responder = model
        runner = await telegram_gateway(tmp_path, llm, tg)
        telegram = runner.adapters["telegram"]
        try:
            tg.user_message("**one**")
            await llm.wait_for_requests(1, timeout=10)
            storm["on"] = True  # Telegram answers everything with 502
            tg._faults.append(Fault("getUpdates", 10**6, ApiError(502, "Bad Gateway"), match=lambda c: storm["on"]))
            fail(tg, 502, 10**6, lambda c: storm["on"] and c.method in ("sendMessage", "editMessageText"))
            await eventually(lambda: not telegram.ready, 15, "telegram reported down")
            gate.set()
            await eventually(lambda: rows(tmp_path, "SELECT 1 FROM outbox WHERE error IS NOT NULL"), 10,
                             "a send failed while down")
            [row] = rows(tmp_path, "SELECT state, attempts FROM outbox")
            assert (row["state"], row["attempts"]) == ("pending", 0)  # not counted against the reply
            storm["on"] = False
            await wait_for_text(tg, "echo: <b>one</b>", timeout=40)  # sent once Telegram is ready again
            assert len(answered(tg, "one")) == 1
            assert rows(tmp_path, "SELECT attempts FROM outbox")[0]["attempts"] == 0
        finally:
            gate.set()
            await runner.stop()


# -- steer, then the model fails ------------------------------------------------------------------


async def test_a_steered_message_whose_turn_fails_on_the_model_is_answered_after_it(tmp_path, tg: FakeTelegram):
    gate = asyncio.Event()

    async def model(body: dict[str, Any]) -> Reply | None:
        messages = body["messages"]
        if any(m["role"] == "tool" for m in messages):  # the request that carries the steered message
            return Reply.error(400, message="the model refused the request")
        if messages[-1]["role"] == "user" and messages[-1]["content"] == "start":
            await gate.wait()
            return Reply.tool_calls([("current_time", {})])
        return None  # the echo

    async with FakeLLM() as llm:
        llm.responder = model
        runner = await telegram_gateway(tmp_path, llm, tg, gateway__busy_policy="steer")
        try:
            tg.user_message("start")
            await llm.wait_for_requests(1, timeout=10)
            tg.user_message("also this")
            await eventually(lambda: runner.parts.sessions.get(KEY) is not None and runner.parts.sessions.get(KEY).steered,
                             what="the message steered into the running turn")
            gate.set()
            await wait_for_text(tg, "echo: also this", timeout=20)  # answered by a turn of its own
            told, answer = sent_texts(tg, ANN)
            assert "language model" in told and "400" in told and answer == "echo: also this"  # told, then answered
            await eventually(lambda: [r["state"] for r in rows(tmp_path, "SELECT state FROM inbox ORDER BY id")]
                             == ["done", "done"], what="both messages done")
            said = [r["content"] for r in rows(tmp_path, "SELECT content FROM messages WHERE role = 'user'"
                                                         " AND status = 'ok' ORDER BY id")]
            assert said == ["start", "also this"]  # in the transcript, once each
        finally:
            gate.set()
            await runner.stop()
