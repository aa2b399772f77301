"""The core under stress, end to end over loopback: blocked chats, poison updates, rate limits,
button presses on the intake path, half-dead web chat tabs, turns that raise, bounded queues."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp

from gateway import cli
from gateway.ops.logs import setup_logging
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import (ANN, Tab, eventually, gateway_env, sent_texts, start_gateway, state_rows, telegram_gateway,
                           wait_for_text)

BOB = 2002
BOTH = f"{{telegram: [{ANN}, {BOB}]}}"


def rows(home: Path, sql: str, *args: Any) -> list[Any]:
    """Read the gateway's database as an operator would, from outside the process (either engine)."""
    return state_rows(home, sql, *args)


def calls_in(tg: FakeTelegram, method: str, chat_id: int) -> list[Any]:
    return [c for c in tg.calls_to(method) if c.get("chat_id") == str(chat_id)]


async def metrics_text(runner: Any) -> str:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{runner.http.port}/metrics") as response:
            return await response.text()


async def test_a_chat_that_blocked_the_bot_is_given_up_and_nothing_keeps_retrying(tmp_path, llm: FakeLLM,
                                                                                  tg: FakeTelegram):
    tg.fail_next("sendMessage", status=403, description="Forbidden: bot was blocked by the user", count=100,
                 chat_id=BOB)
    runner = await telegram_gateway(tmp_path, llm, tg, access__allowed_users=BOTH)
    try:
        tg.user_message("hello from bob", user_id=BOB, first_name="Bob")
        await eventually(lambda: rows(tmp_path, "SELECT 1 FROM outbox WHERE chat_id = ? AND state = 'failed'",
                                      str(BOB)), what="Bob's reply marked failed")
        [failed] = rows(tmp_path, "SELECT error, attempts FROM outbox WHERE chat_id = ?", str(BOB))
        assert "blocked by the user" in failed["error"] and failed["attempts"] == 1
        tg.user_message("hello from ann")
        await wait_for_text(tg, "echo: hello from ann")
        tries = len(calls_in(tg, "sendMessage", BOB))
        tg.user_message("anything new?")  # time and traffic pass; Bob's reply is not tried again
        await wait_for_text(tg, "echo: anything new?")
        assert len(calls_in(tg, "sendMessage", BOB)) == tries
        assert runner.parts.delivery.waiting == 0  # no chat waits on a timer: the retry loop has ended
        assert runner.parts.delivery._retry_task is None or runner.parts.delivery._retry_task.done()
        assert 'chatgate_delivery_failures_total{platform="telegram"} 1.0' in await metrics_text(runner)
    finally:
        await runner.stop()


async def test_a_batch_is_taken_chat_by_chat_in_order_and_one_stuck_update_doubles_nothing(
        tmp_path, llm: FakeLLM, tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message("warm up")
        await wait_for_text(tg, "echo: warm up")
        tg.inject({"message": "not an object"})  # one batch (injected before the poller wakes): this one
        updates = [tg.user_message(text) for text in ("one", "two", "three")]  # fails thrice, the rest is taken
        await eventually(lambda: rows(tmp_path, "SELECT 1 FROM dead_letters"), 30, "the stuck update set aside")
        last = updates[-1]["update_id"]
        await tg.wait_for("getUpdates", lambda c: int(c.get("offset") or 0) > last, timeout=10)  # refetched, confirmed
        await wait_for_text(tg, "echo: three")
        assert sent_texts(tg, ANN) == ["echo: warm up", "echo: one", "echo: two", "echo: three"]
        assert len(llm.requests) == 4
    finally:
        await runner.stop()


async def test_poison_updates_are_set_aside_and_the_next_ones_answered(tmp_path, llm: FakeLLM, tg: FakeTelegram,
                                                                       capsys, monkeypatch):
    runner = await telegram_gateway(tmp_path, llm, tg, platforms__telegram__max_file_mb=1)
    ann = {"id": ANN, "is_bot": False, "first_name": "Ann"}
    dm = {"id": ANN, "type": "private", "first_name": "Ann"}
    try:
        tg.inject({"message": "not an object"})
        tg.inject({"message": {"message_id": 9901, "date": 0, "chat": dm, "from": {"id": ANN}, "text": "no name"}})
        tg.user_message("x" * 1_000_000, message_id=9000)
        tg.inject({"message": {"message_id": 9902, "date": 0, "chat": dm, "from": ann, "caption": "huge",
                               "document": {"file_id": "f-huge", "file_unique_id": "u-huge", "file_size": 10 ** 15,
                                            "file_name": "huge.bin"}}})
        tg.inject({"message": {"message_id": 9903, "date": 0, "chat": dm, "from": ann,
                               "document": {"file_id": "f-gone", "file_unique_id": "u-gone", "file_size": 10,
                                            "file_name": "gone.txt"}}})
        tg.user_message("and now?", message_id=9999)
        await wait_for_text(tg, "echo: and now?", timeout=20)
        texts = sent_texts(tg, ANN)
        assert any("1,000,000 characters long; the limit is 32,000" in t for t in texts)
        assert any("huge.bin is 1000000000.0 MB; the limit is 1 MB" in t for t in texts), texts
        assert any("gone.txt could not be downloaded" in t for t in texts)
        seen = [r["content"] for r in llm.requests[0]["messages"] if r["role"] == "user"][-1]
        assert seen.startswith("huge\n[a document huge.bin was not accepted")  # the agent hears of it too
        dead = rows(tmp_path, "SELECT ref, reason FROM dead_letters ORDER BY id")
        assert len(dead) == 2 and all(r["ref"] for r in dead)
        assert "AttributeError" in dead[0]["reason"] and "TypeError" in dead[1]["reason"]
        assert not tg.calls_to("getFile") or all(c.get("file_id") != "f-huge" for c in tg.calls_to("getFile"))
        tg.inject({"callback_query": {"id": "q-1", "data": "approve:1"}})  # a button press from nobody
        tg.user_message("still here?", message_id=10000)
        await wait_for_text(tg, "echo: still here?", timeout=20)
        await eventually(lambda: len(rows(tmp_path, "SELECT 1 FROM dead_letters")) == 3, 30, "the press set aside")
        third = rows(tmp_path, "SELECT reason FROM dead_letters ORDER BY id")[2]["reason"]
        assert third.startswith("TypeError: CallbackQuery")  # PTB's reading of it: no sender, no chat_instance
        assert not tg.calls_to("answerCallbackQuery")
    finally:
        await runner.stop()
    for key, value in gateway_env(tmp_path, None).items():
        monkeypatch.setenv(key, value)
    capsys.readouterr()
    assert await asyncio.to_thread(cli.main, ["inbox", "dead"]) == 0
    out = capsys.readouterr().out
    assert "3 dead letter(s) shown" in out and "not an object" in out
    monkeypatch.setenv("CHATGATE_PLATFORMS__WEBCHAT__ENABLED", "true")  # doctor needs no Telegram here
    await asyncio.to_thread(cli.main, ["doctor"])
    assert "3 input(s) could not be taken and were set aside: chatgate inbox dead" in capsys.readouterr().out


async def test_a_download_that_fails_on_disk_is_reported_and_the_chat_goes_on(tmp_path, llm: FakeLLM,
                                                                              tg: FakeTelegram):
    (tmp_path / "files").write_text("not a folder: every download fails with an OSError")
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message(caption="keep this", document=("notes.txt", b"hello"))
        await tg.wait_for("sendMessage", lambda c: "could not be downloaded" in str(c.get("text")), timeout=10)
        tg.user_message("still there?")
        await wait_for_text(tg, "echo: still there?")
    finally:
        await runner.stop()


async def test_429_storm_every_reply_exactly_once(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    users = list(range(3001, 3011))
    tg.fail_next("sendMessage", status=429, retry_after=1, count=12)
    tg.fail_next("editMessageText", status=429, retry_after=1, count=6)
    runner = await telegram_gateway(tmp_path, llm, tg, access__dm_policy="open")
    try:
        for user in users:
            tg.user_message(f"storm {user}", user_id=user, first_name=f"U{user}")
        for user in users:
            await wait_for_text(tg, f"echo: storm {user}", timeout=30)
        for user in users:
            assert sent_texts(tg, user) == [f"echo: storm {user}"]
        assert sum(1 for c in tg.calls_to("sendMessage") if c.status == 429) == 12
    finally:
        await runner.stop()


async def test_one_chats_rate_limit_does_not_hold_up_another(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    tg.fail_next("sendMessage", status=429, retry_after=5, count=1, chat_id=ANN)
    runner = await telegram_gateway(tmp_path, llm, tg, access__allowed_users=BOTH)
    try:
        tg.user_message("first")
        await tg.wait_for("sendMessage", lambda c: c.status == 429)
        tg.user_message("me too", user_id=BOB, first_name="Bob")
        await wait_for_text(tg, "echo: me too")
        await wait_for_text(tg, "echo: first", timeout=15)
        sends = [c for c in tg.calls_to("sendMessage") if c.status == 200]
        assert [c.get("chat_id") for c in sends] == [str(BOB), str(ANN)]  # Bob did not wait for Ann's pause
        assert sends[1].time - tg.calls_to("sendMessage")[0].time >= 4.9  # Ann's retry_after was honoured
    finally:
        await runner.stop()


async def test_a_rate_limited_preview_does_not_hold_the_reply_back(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    llm.script(Reply.text("one two three four five six seven eight nine ten", chunk_size=4, chunk_delay=0.3))
    tg.fail_next("editMessageText", status=429, retry_after=60, count=1, chat_id=ANN)
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message("count for me")
        await tg.wait_for("editMessageText", lambda c: c.status == 429, timeout=10)  # the preview is paused
        # the finished reply is committed while the preview waits: durable, and sent when the pause ends
        await eventually(lambda: rows(tmp_path, "SELECT 1 FROM outbox o JOIN inbox i ON i.id = o.inbox_id"
                                                " WHERE i.state = 'done'"), what="the reply committed")
        assert len(tg.sent_messages(ANN)) == 1  # only the preview so far; nothing sent twice
    finally:
        await runner.stop()


async def test_a_flush_while_the_preview_send_is_in_flight_does_not_send_the_reply_twice(tmp_path, llm: FakeLLM,
                                                                                         tg: FakeTelegram):
    # A platform coming back (or a tab reconnecting) flushes the outbox. If that happens after the
    # turn committed its reply but before the preview's first send returned, the flush must leave
    # the reply to the turn, which edits the preview instead of sending a second message.
    runner = await telegram_gateway(tmp_path, llm, tg)
    release = tg.hold_next("sendMessage", chat_id=ANN)
    try:
        tg.user_message("just once")
        await tg.wait_for("sendMessage", lambda c: c.status == -2)  # the preview's send, held
        await eventually(lambda: rows(tmp_path, "SELECT 1 FROM outbox o JOIN inbox i ON i.id = o.inbox_id"
                                                " WHERE i.state = 'done'"), what="the reply committed")
        await runner.parts.delivery.flush("telegram")  # as when the platform is back, while the preview is held
        release.set()
        await wait_for_text(tg, "echo: just once")
        await eventually(lambda: rows(tmp_path, "SELECT 1 FROM outbox WHERE state = 'sent'"), what="sent")
        assert sent_texts(tg, ANN) == ["echo: just once"]
        assert [c.method for c in tg.calls if c.method in ("sendMessage", "editMessageText")].count("sendMessage") == 1
    finally:
        await runner.stop()


def _delete_then_echo(body: dict[str, Any]) -> Reply | None:
    """The model runs a dangerous command when asked to "delete it", then reports; else it echoes."""
    messages = body["messages"]
    last_user = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    if last_user != "delete it":
        return None
    if messages[-1]["role"] == "tool":
        return Reply.text("deleted")
    return Reply.tool_calls([("terminal", {"command": "rm -rf victim"})])


async def test_a_button_press_while_edits_are_rate_limited_does_not_delay_another_chat(tmp_path, llm: FakeLLM,
                                                                                       tg: FakeTelegram):
    llm.responder = _delete_then_echo
    (tmp_path / "ws" / "victim").mkdir(parents=True)
    runner = await telegram_gateway(tmp_path, llm, tg, access__allowed_users=BOTH, agent__workspace=tmp_path / "ws")
    try:
        tg.user_message("delete it")
        [prompt] = await tg.wait_for("sendMessage", lambda c: "Approval needed" in str(c.get("text")))
        tg.fail_next("editMessageText", status=429, retry_after=60, count=5, chat_id=ANN)
        allow = prompt.get("reply_markup")["inline_keyboard"][0][0]
        assert allow["text"] == "Allow once"
        tg.callback_query(allow["callback_data"], message_id=prompt.result["message_id"])
        [answer] = await tg.wait_for("answerCallbackQuery")  # answered at once, not after the edit's pause
        assert answer.get("text") == "Allow once — done."
        tg.user_message("are you free?", user_id=BOB, first_name="Bob")
        await wait_for_text(tg, "echo: are you free?")  # Bob is not stuck behind Ann's rate-limited edit
        await eventually(lambda: not (tmp_path / "ws" / "victim").exists(),  # (well within the edit's 60 s pause)
                         what="Ann's command running as soon as she allowed it")
        await eventually(lambda: rows(tmp_path, "SELECT 1 FROM outbox WHERE chat_id = ? AND state = 'pending'",
                                      str(ANN)), what="Ann's answer waiting out her chat's pause")
    finally:
        await runner.stop()


async def test_strangers_files_are_not_downloaded(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message(caption="look at this", document=("payload.bin", b"\0" * 1000), user_id=BOB)
        await tg.wait_for("sendMessage", lambda c: "pairing code" in str(c.get("text")))
        tg.user_message("and me?")
        await wait_for_text(tg, "echo: and me?")
        assert tg.calls_to("getFile") == [] and tg.calls_to("downloadFile") == []
        assert not (tmp_path / "files").exists()
    finally:
        await runner.stop()


async def test_readyz_says_a_platform_is_down_while_it_cannot_poll(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg)
    url = f"http://127.0.0.1:{runner.http.port}/readyz"
    try:
        async with aiohttp.ClientSession() as http:
            async def status() -> tuple[int, dict[str, Any]]:
                async with http.get(url) as response:
                    return response.status, (await response.json())["platforms"]["telegram"]

            await eventually(lambda: _is(status(), 200), what="ready at first")
            tg.fail_next("getUpdates", status=502, description="Bad Gateway", count=2)
            await eventually(lambda: _is(status(), 503), what="/readyz 503 while getUpdates fails")
            code, telegram = await status()
            assert telegram["state"] == "down" and "Bad Gateway" in telegram["error"]
            await eventually(lambda: _is(status(), 200), timeout=15, what="ready again")
        tg.user_message("back?")
        await wait_for_text(tg, "echo: back?")
    finally:
        await runner.stop()


async def _is(pending: Any, code: int) -> bool:
    return (await pending)[0] == code


async def test_a_turn_that_raises_tells_the_person_logs_no_secret_and_is_not_run_again(tmp_path, llm: FakeLLM,
                                                                                      tg: FakeTelegram, capsys):
    runner = await telegram_gateway(tmp_path, llm, tg)
    setup_logging("INFO", runner.config.secrets())
    secret = tg.token

    async def broken_turn(*args: Any, **kwargs: Any) -> Any:  # fault injection: the agent breaks mid-turn
        raise RuntimeError(f"upstream rejected token={secret}")

    try:
        runner.parts.turns.agent.run_turn = broken_turn  # type: ignore[method-assign]
        tg.user_message("this will break")
        await tg.wait_for("sendMessage", lambda c: "Something went wrong on my side (RuntimeError)"
                          in str(c.get("text")))
        [row] = rows(tmp_path, "SELECT state FROM inbox")
        assert row["state"] == "failed"
    finally:
        await runner.stop()
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: upstream rejected" in err
    assert secret not in err
    runner = await telegram_gateway(tmp_path, llm, tg)  # the next start does not run it again
    try:
        tg.user_message("and this?")
        await wait_for_text(tg, "echo: and this?")
        assert len(llm.requests) == 1 and len(tg.sent_messages(ANN)) == 2
    finally:
        await runner.stop()


async def test_too_many_waiting_messages_are_refused_with_a_reply(tmp_path, tg: FakeTelegram):
    async with FakeLLM() as llm:
        llm.script(Reply.hang())
        runner = await telegram_gateway(tmp_path, llm, tg, gateway__max_waiting_messages=2)
        try:
            tg.user_message("one")
            await llm.wait_for_requests(1)
            for text in ("two", "three", "four"):
                tg.user_message(text)
            await tg.wait_for("sendMessage", lambda c: "2 of your messages are already waiting" in str(c.get("text")))
            assert runner.parts.sessions.waiting(f"telegram:{ANN}") == 2
            [refused] = rows(tmp_path, "SELECT payload, error FROM inbox WHERE state = 'refused'")
            assert json.loads(refused["payload"])["text"] == "four" and refused["error"] == "too_many_waiting"
            assert 'chatgate_refused_messages_total{platform="telegram",reason="too_many_waiting"} 1.0' \
                in await metrics_text(runner)
        finally:
            await runner.stop()


async def test_a_web_chat_reply_counts_only_when_the_page_confirms_it(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url, platforms__webchat__ack_timeout_seconds=0.3)
    try:
        async with Tab(runner, confirm=False) as dead_tab:  # open socket, page gone: nothing confirms
            await dead_tab.say("are you there?")
            first = await dead_tab.wait_for(lambda f: f["type"] in ("message", "edit") and f.get("ack"))
            await eventually(lambda: rows(tmp_path, "SELECT 1 FROM outbox WHERE state = 'pending'"),
                             what="the reply still pending")
            await eventually(lambda: runner.parts.delivery._inflight == set(), what="the unconfirmed send given up")
            assert rows(tmp_path, "SELECT state FROM outbox")[0]["state"] == "pending"
        async with Tab(runner, dead_tab.chat_id) as tab:  # the page comes back
            again = await tab.wait_for(lambda f: f["type"] in ("message", "edit") and f.get("ack"))
            assert again["message_id"] == first["message_id"]  # the page replaces it: shown once
            assert again["text"] == "echo: are you there?"
            await eventually(lambda: rows(tmp_path, "SELECT 1 FROM outbox WHERE state = 'sent'"),
                             what="the reply marked sent once confirmed")
    finally:
        await runner.stop()


async def test_the_heartbeat_goes_on_while_a_tick_hook_is_stuck(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url, gateway__tick_seconds=0.2)
    stuck = asyncio.Event()
    try:
        runner.parts.tick.add_hook("stuck", stuck.wait)  # a hook that never ends (a long curator pass)
        await eventually(lambda: runner.parts.tick.count >= 3, what="ticks going on")
        # a sibling gateway (another process: not on this loop) took this one for dead
        await asyncio.to_thread(rows, tmp_path, "DELETE FROM gateway_instances")
        instance = runner.parts.cron_timers.ledger.instance_id
        await eventually(lambda: rows(tmp_path, "SELECT 1 FROM gateway_instances WHERE id = ?", instance),
                         what="this instance's row back")
        count = runner.parts.tick.count
        await eventually(lambda: runner.parts.tick.count > count + 2, what="the other hooks still running")
    finally:
        stuck.set()
        await runner.stop()


def test_the_database_is_durable_and_private(tmp_path):
    import stat

    from gateway.storage import Store

    async def check(durability: str) -> tuple[int, int, int]:
        store = await Store.open(tmp_path / "home" / durability / "state.db", durability=durability)
        try:
            row = await store.fetchrow("PRAGMA synchronous")
            folder = (tmp_path / "home" / durability).stat().st_mode
            db = (tmp_path / "home" / durability / "state.db").stat().st_mode
            return row[0], stat.S_IMODE(folder), stat.S_IMODE(db)
        finally:
            await store.close()

    assert asyncio.run(check("full")) == (2, 0o700, 0o600)  # 2 = FULL: a commit is on disk when it returns
    assert asyncio.run(check("normal"))[0] == 1


def test_a_platform_without_its_library_is_one_line_saying_what_to_install(tmp_path):
    import subprocess

    env = gateway_env(tmp_path, None, platforms__telegram__token="123:abc")
    script = ("import sys; sys.modules['telegram'] = None\n"  # as if python-telegram-bot were not installed
              "from gateway.cli import main; sys.exit(main(['run']))")
    done = subprocess.run([sys.executable, "-c", script], env={**env, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "chatgate cannot start: platforms.telegram is configured but its library (telegram) is not installed: "
        "pip install 'chatgate[telegram]' (or `make run`, which installs every platform)"]


async def test_an_ambiguous_send_to_telegram_is_found_not_sent_again(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    """Telegram has no idempotency key: when the connection drops after it took a message, the answer
    does not say whether it did. The part's intent was recorded before it was sent, so the next try
    first looks for the message it may have made (the bot's own message after the /help one: an edit
    Telegram accepts) and records that one instead of sending the answer a second time."""
    tg.drop_next("sendMessage", after_processing=True, match=lambda c: "Commands:" in str(c.get("text")))
    runner = await telegram_gateway(tmp_path, llm, tg)
    try:
        tg.user_message("/help")
        await eventually(lambda: [tuple(r) for r in rows(tmp_path, "SELECT state, attempts FROM outbox")]
                         == [("sent", 1)], timeout=15, what="one attempt failed, then its message found")
        [shown] = sent_texts(tg, ANN)
        assert shown.startswith("Commands:")
        assert [c.status for c in tg.calls_to("sendMessage")] == [-1]  # sent once; its answer was lost
        marked, found = tg.calls_to("editMessageText")  # a placeholder first: its topic and reply checked
        assert marked.get("text") == "…" and marked.get("message_id") == found.get("message_id")
        assert found.get("message_id") == json.loads(rows(tmp_path, "SELECT platform_message_ids FROM outbox")[0][0])[0]
    finally:
        await runner.stop()


async def test_the_agent_sends_a_file_after_its_reply(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "report.csv").write_text("a,b\n1,2\n")
    llm.script(Reply.tool_calls([("send_file", {"path": "report.csv"})]), Reply.text("Here is the report."))
    runner = await telegram_gateway(tmp_path, llm, tg, agent__workspace=tmp_path / "ws")
    try:
        tg.user_message("send me the report")
        [upload] = await tg.wait_for("sendDocument", lambda c: c.status == 200, timeout=10)
        assert upload.files["document"].filename == "report.csv"
        assert upload.files["document"].content == b"a,b\n1,2\n"
        texts = [m.text for m in tg.sent_messages(ANN)]
        assert texts[0] == "Here is the report."  # the reply first, then the file
        await eventually(lambda: [(r["state"], len(json.loads(r["platform_message_ids"])))
                                  for r in rows(tmp_path, "SELECT * FROM outbox")] == [("sent", 2)],
                         what="one outbox row: the reply and the file, both sent")
    finally:
        await runner.stop()


async def test_a_file_for_the_web_chat_is_named_with_where_it_is(tmp_path, llm: FakeLLM):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("x")
    llm.script(Reply.tool_calls([("send_file", {"path": "notes.txt"})]), Reply.text("Done."))
    runner = await start_gateway(tmp_path, llm.base_url, agent__workspace=tmp_path / "ws")
    try:
        async with Tab(runner) as tab:
            await tab.say("the notes please")
            assert await tab.reply(2) == f"📎 notes.txt — saved at {tmp_path / 'ws' / 'notes.txt'}"
            assert tab.replies()[0] == "Done."
    finally:
        await runner.stop()


async def test_a_poison_update_on_the_webhook_is_refused_twice_then_set_aside(tmp_path, llm: FakeLLM,
                                                                            tg: FakeTelegram):
    runner = await telegram_gateway(tmp_path, llm, tg, platforms__telegram__mode="webhook",
                                    platforms__telegram__webhook_url="http://placeholder/telegram/webhook")
    try:
        tg.webhook_url = f"http://127.0.0.1:{runner.http.port}/telegram/webhook"
        poison = {"update_id": 77, "message": "not an object"}
        assert [await tg.push_webhook(poison) for _ in range(3)] == [500, 500, 200]  # Telegram retries, then done
        [dead] = rows(tmp_path, "SELECT ref, reason FROM dead_letters")
        assert dead["ref"] == "77" and "AttributeError" in dead["reason"]
    finally:
        await runner.stop()


async def test_reviews_of_one_conversation_do_not_pile_up(tmp_path, llm: FakeLLM):
    def model(body: dict[str, Any]) -> Reply | None:
        reviewing = body["messages"][0]["content"].startswith("You are reviewing a conversation")
        return Reply.hang() if reviewing else None  # a review that never ends holds the only slot

    llm.responder = model
    runner = await start_gateway(tmp_path, llm.base_url, review__memory_every_turns=1, review__max_concurrent=1)
    try:
        async with Tab(runner) as tab:
            for n in range(1, 5):  # each turn makes a review due
                await tab.say(f"message {n}")
                await tab.reply(n)
            await eventually(lambda: len(llm.requests) == 5, what="the first review started")
            assert len(runner.parts.learning._reviews) == 2  # one running, one waiting; the rest folded into it
    finally:
        await runner.stop()
