"""Floods and pastes, through the real gateway: a flood of messages in one chat gets one notice a minute (each
extra message still recorded as refused), the waiting limit is each person's own in a shared conversation, and
a paste over the limit in the web chat is refused by the page itself (real Chromium), answered with an error
frame when a client sends it anyway, and never resent."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from tests.browser import Browser
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import DEFAULT_GROUP_ID, FakeTelegram
from tests.harness import ANN, Tab, eventually, sent_texts, start_gateway, telegram_gateway, wait_for_text
from tests.test_webchat_browser import BOT, USER, bot_reply, chat_page, type_and_send

BOB, CAROL = 1002, 1003
GROUP = DEFAULT_GROUP_ID


def rows(home: Path, sql: str, *args: Any) -> list[sqlite3.Row]:
    with sqlite3.connect(home / "state.db") as db:
        db.row_factory = sqlite3.Row
        return db.execute(sql, args).fetchall()


def refused(home: Path) -> list[tuple[str, str]]:
    return [(json.loads(r["payload"])["text"], r["error"])
            for r in rows(home, "SELECT payload, error FROM inbox WHERE state = 'refused' ORDER BY id")]


def holding_the_first_request(llm: FakeLLM) -> asyncio.Event:
    """The first chat request waits until the returned event is set (a turn that runs meanwhile); every
    request is then answered with the default echo."""
    release = asyncio.Event()

    async def respond(body: dict[str, Any]) -> Reply | None:
        if len(llm.requests) == 1:
            await release.wait()
        return None

    llm.responder = respond
    return release


async def test_a_flood_of_121_messages_gets_one_notice_and_each_one_beyond_the_limit_is_refused(tmp_path,
                                                                                                tg: FakeTelegram):
    async with FakeLLM() as llm:
        release = holding_the_first_request(llm)
        # gateway.max_waiting_messages: 20 (the default); no background reviews asking the model meanwhile
        runner = await telegram_gateway(tmp_path, llm, tg, review__enabled="false")
        try:
            tg.user_message("m1")
            await llm.wait_for_requests(1)
            updates = {i: tg.user_message(f"m{i}") for i in range(2, 122)}
            await eventually(lambda: len(refused(tmp_path)) == 100, timeout=30, what="100 messages refused")
            release.set()
            await wait_for_text(tg, "echo: m21", timeout=30)  # the 20 that waited are answered, in order

            notices = [t for t in sent_texts(tg, ANN) if "already waiting" in t]
            assert notices == ["⚠️ 20 of your messages are already waiting here, so this one was not taken, nor are "
                               "more until I get to them (I say this at most once a minute). Send it again then "
                               "(or /stop the running request)."]
            assert refused(tmp_path) == [(f"m{i}", "too_many_waiting") for i in range(22, 122)]
            assert [t for t in sent_texts(tg, ANN) if t.startswith("echo:")] == [f"echo: m{i}" for i in range(1, 22)]
            assert len(rows(tmp_path, "SELECT 1 FROM outbox WHERE payload LIKE '%already waiting%'")) == 1

            # a refused message delivered again by Telegram is dropped, and told nothing
            again = updates[60]["message"]["message_id"]
            tg.user_message("m60", message_id=again)
            tg.user_message("m122")
            await wait_for_text(tg, "echo: m122")
            assert len(refused(tmp_path)) == 100 and len(llm.requests) == 22
            assert [t for t in sent_texts(tg, ANN) if "already waiting" in t] == notices
        finally:
            await runner.stop()


def test_a_notice_is_let_through_once_per_key_and_window():
    from gateway.chat.throttle import Throttle  # (here: the end-to-end tests of this file run on older code too)

    now = [1000.0]
    told = Throttle(60.0, clock=lambda: now[0])
    assert told.allow(("chat", "ann")) and not told.allow(("chat", "ann"))
    assert told.allow(("chat", "bob"))  # each key on its own
    now[0] += 59.9
    assert not told.allow(("chat", "ann"))
    now[0] += 0.2
    assert told.allow(("chat", "ann"))  # a minute later: said again
    now[0] += 3600
    told.allow(("other",))
    assert len(told._last) == 1  # keys of past windows are forgotten


def group_say(tg: FakeTelegram, user: int, name: str, text: str) -> int:
    """`user` says `text` to the bot in the group; the message's id."""
    update = tg.user_message(f"@chatgate_bot {text}", chat_type="group", user_id=user, first_name=name,
                             username=name.lower())
    return update["message"]["message_id"]


def group_notices(tg: FakeTelegram) -> list[tuple[str, int | None]]:
    """The bot's "already waiting" notices in the group, with the message each one answers."""
    return [(m.text or "", m.reply_to_message_id) for m in tg.sent_messages(GROUP)
            if "already waiting" in (m.text or "")]


async def answered_in_group(tg: FakeTelegram, *texts: str) -> None:
    for text in texts:
        await tg.wait_until(lambda: any((m.text or "").startswith("echo:") and text in (m.text or "")
                                        for m in tg.sent_messages(GROUP)), 15, lambda: f"an answer to {text!r}")


async def test_in_a_shared_group_bob_filling_his_queue_does_not_refuse_ann(tmp_path, tg: FakeTelegram):
    async with FakeLLM() as llm:
        release = holding_the_first_request(llm)
        runner = await telegram_gateway(tmp_path, llm, tg, access__allowed_users=f"{{telegram: [{ANN}, {BOB}]}}",
                                        gateway__group_sessions="shared", gateway__max_waiting_messages=2,
                                        review__enabled="false")
        try:
            group_say(tg, ANN, "Ann", "ann one")
            await llm.wait_for_requests(1)
            bobs = [group_say(tg, BOB, "Bob", f"bob {i}") for i in range(1, 5)]  # two wait, two are refused
            await tg.wait_until(lambda: len(group_notices(tg)) == 1, 10, lambda: f"Bob's notice: {group_notices(tg)}")
            anns = group_say(tg, ANN, "Ann", "ann two")  # Bob's full queue is his, not Ann's
            await eventually(lambda: rows(tmp_path, "SELECT 1 FROM inbox WHERE payload LIKE '%ann two%'"),
                             what="Ann's second message stored")
            [ann] = rows(tmp_path, "SELECT state, error FROM inbox WHERE payload LIKE '%ann two%'")
            assert (ann["state"], ann["error"]) != ("refused", "too_many_waiting")
            assert anns not in [answers for _, answers in group_notices(tg)]
            release.set()
            await answered_in_group(tg, "bob 1", "bob 2", "ann two")

            assert group_notices(tg) == [  # one, to Bob's message, and true for him (no /stop of Ann's request)
                ("⚠️ 2 of your messages are already waiting here, so this one was not taken, nor are more until I "
                 "get to them (I say this at most once a minute). Send it again then.", bobs[2])]
            assert [(text.split("@chatgate_bot ")[-1], why) for text, why in refused(tmp_path)] == [
                ("bob 3", "too_many_waiting"), ("bob 4", "too_many_waiting")]
        finally:
            await runner.stop()


async def test_everyone_together_in_a_shared_conversation_has_a_bound_too(tmp_path, tg: FakeTelegram):
    async with FakeLLM() as llm:
        release = holding_the_first_request(llm)
        runner = await telegram_gateway(
            tmp_path, llm, tg, access__allowed_users=f"{{telegram: [{ANN}, {BOB}, {CAROL}]}}",
            gateway__group_sessions="shared", gateway__max_waiting_messages=2,
            gateway__max_waiting_per_conversation=4, review__enabled="false")
        try:
            group_say(tg, ANN, "Ann", "ann one")
            await llm.wait_for_requests(1)
            for text in ("ann two", "bob 1", "bob 2", "carol 1"):  # four wait: the conversation's bound
                group_say(tg, ANN if text.startswith("ann") else BOB if text.startswith("bob") else CAROL,
                          text.split()[0].title(), text)
            carols = [group_say(tg, CAROL, "Carol", f"carol {i}") for i in (2, 3)]
            await tg.wait_until(lambda: len(group_notices(tg)) == 1, 10, lambda: f"the notice: {group_notices(tg)}")
            await eventually(lambda: len(refused(tmp_path)) == 2, what="both of Carol's refused")
            release.set()
            await answered_in_group(tg, "ann two", "bob 1", "bob 2", "carol 1")

            assert group_notices(tg) == [
                ("⚠️ 4 messages are already waiting in this conversation, so this one was not taken, nor are more "
                 "until I get to them (I say this at most once a minute). Send it again then.", carols[0])]
            assert [(text.split("@chatgate_bot ")[-1], why) for text, why in refused(tmp_path)] == [
                ("carol 2", "conversation_full"), ("carol 3", "conversation_full")]
        finally:
            await runner.stop()


# -- the web chat ------------------------------------------------------------------------------


async def test_an_over_long_frame_from_a_raw_client_gets_an_error_and_the_socket_stays_open(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            ack = await tab.say("x" * 300 * 1024)  # 300 KiB in one frame: over 256 KiB, which used to close it
            assert ack["rejected"] is True
            error = await tab.wait_for(lambda f: f["type"] == "error")
            assert error["text"] == "This message is too long (307,200 characters; the limit is 32,000). It was not sent."
            await tab.say("still here")  # the same socket
            assert await tab.reply() == "echo: still here"
            assert tab.frames[0] == {"type": "hello", "chat": tab.chat_id, "title": "chatgate", "max_chars": 32_000}
        assert len(llm.requests) == 1
        assert [json.loads(r["payload"])["text"] for r in rows(tmp_path, "SELECT payload FROM inbox")] == ["still here"]
    finally:
        await runner.stop()


async def test_the_frame_limit_is_far_above_a_larger_text_limit(tmp_path, llm: FakeLLM):
    llm.script(Reply.text("got it"))
    runner = await start_gateway(tmp_path, llm.base_url, gateway__max_message_chars=100_000)
    try:
        async with Tab(runner) as tab:
            text = "😀" * 90_000  # within the limit; 1 MB as the JSON a client library writes (\ud83d\ude00 each)
            ack = await tab.say(text)
            assert ack["rejected"] is False
            assert await tab.reply() == "got it"
        assert llm.requests[0]["messages"][-1]["content"] == text
    finally:
        await runner.stop()


# A recorder of the page's websockets, installed before the page's own script runs: what each socket sent,
# how it closed. With `window.inflate` set, a message frame with that text is padded past the server's frame
# limit on its way out (as a proxy with a smaller limit, or a bug, would make it), every time it is sent.
RECORDER = """(() => {
  const Native = window.WebSocket;
  window.wsLog = {opened: 0, sent: [], closes: []};
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      window.wsLog.opened++;
      this.addEventListener('close', (e) => window.wsLog.closes.push(e.code));
    }
    send(data) {
      let frame = data;
      try {
        const f = JSON.parse(data);
        if (window.inflate && f.type === 'message' && f.text === window.inflate)
          frame = JSON.stringify({...f, pad: 'x'.repeat(2 * 1024 * 1024)});
      } catch {}
      window.wsLog.sent.push({size: frame.length, text: (() => { try { return JSON.parse(data).text; } catch { return null; } })()});
      return super.send(frame);
    }
  };
})()"""

NOTICE = "!document.getElementById('notice').hidden && document.getElementById('notice-text').textContent"


async def recorded_page(browser: Browser, runner: Any) -> str:
    """Install the recorder for every document, and load the page again with it; its address."""
    url = runner.adapters["webchat"].entry_url(f"http://127.0.0.1:{runner.http.port}")
    await browser.send("Page.addScriptToEvaluateOnNewDocument", source=RECORDER)
    await browser.navigate(url)
    await browser.wait_for("document.getElementById('dot').className === 'online'")
    return url


async def test_a_paste_over_the_limit_is_refused_by_the_page_and_never_sent(tmp_path, llm: FakeLLM):
    async with chat_page(tmp_path, llm) as (runner, browser):
        url = await recorded_page(browser, runner)
        paste = ("All work and no play. " * 14_000)[: 300 * 1024]  # 300 KiB
        await browser.evaluate("document.getElementById('input').focus()")
        await browser.insert_text(paste)
        await browser.press_enter()
        assert await browser.wait_for(NOTICE) == ("This message is 307,200 characters long; the limit is 32,000. "
                                                  "It was not sent — shorten it, or split it into parts.")
        assert await browser.evaluate("document.getElementById('input').value.length") == len(paste)  # to shorten
        assert await browser.evaluate(f"{USER}.length") == 0
        assert await browser.evaluate("window.wsLog") == {"opened": 1, "sent": [], "closes": []}  # still open
        assert await browser.evaluate("document.getElementById('dot').className") == "online"

        await browser.navigate(url)  # the tab loaded again (a reload, a reconnect): nothing of it is sent
        await browser.wait_for("document.getElementById('dot').className === 'online'")
        await type_and_send(browser, "a short one")
        assert (await bot_reply(browser, "echo: a short one"))["text"] == "echo: a short one"
        assert [s["text"] for s in await browser.evaluate("window.wsLog.sent") if s.get("text")] == ["a short one"]
        assert [json.loads(r["payload"])["text"] for r in rows(tmp_path, "SELECT payload FROM inbox")] == \
            ["a short one"]


async def test_a_frame_the_server_closes_on_is_shown_and_not_sent_again(tmp_path, llm: FakeLLM):
    async with chat_page(tmp_path, llm) as (runner, browser):
        await recorded_page(browser, runner)
        await browser.evaluate("window.inflate = 'inflate me'")
        await browser.evaluate("document.getElementById('input').focus()")
        await browser.insert_text("inflate me")
        await browser.press_enter()
        assert await browser.wait_for(NOTICE) == ("The server closed the connection because a message was too big "
                                                  "for it; that message was not sent.")
        assert await browser.evaluate("window.wsLog.closes") == [1009]
        marked = await browser.wait_for(f"(() => {{ const m = {USER}.find((m) => m.textContent.includes('inflate me'));"
                                        " return m && [m.className, m.querySelector('.mark').textContent]; })()")
        assert marked == ["msg user failed", "not taken"]
        await browser.wait_for("window.wsLog.opened === 2 && document.getElementById('dot').className === 'online'")
        await type_and_send(browser, "after the close")
        await bot_reply(browser, "echo: after the close")
        assert [s["text"] for s in await browser.evaluate("window.wsLog.sent") if s.get("text")] == \
            ["inflate me", "after the close"]  # sent once, never again
        assert await browser.evaluate("sessionStorage.getItem('chatgate.unacked')") == "[]"
        assert await browser.evaluate(f"{BOT}.length") == 1


async def test_a_group_member_flooding_chat_commands_gets_a_limited_number_of_answers_and_stop_still_works(
        tmp_path, tg: FakeTelegram):
    async with FakeLLM() as llm:
        runner = await telegram_gateway(tmp_path, llm, tg, access__allowed_users=f"{{telegram: [{ANN}, {BOB}]}}",
                                        gateway__group_sessions="shared", gateway__max_commands_per_minute=3,
                                        review__enabled="false")
        try:
            for _ in range(6):
                group_say(tg, BOB, "Bob", "/help")
            await eventually(lambda: len(refused(tmp_path)) == 3, what="three of Bob's six /help refused")
            group_say(tg, BOB, "Bob", "/stop")  # never limited
            group_say(tg, ANN, "Ann", "/help")  # Bob's budget is his own
            await tg.wait_until(lambda: sum("Nothing is running" in (m.text or "")
                                            for m in tg.sent_messages(GROUP)) == 1, 10, lambda: "Bob's /stop answered")
            helps = lambda: [m for m in tg.sent_messages(GROUP) if "/status" in (m.text or "")]  # noqa: E731
            await tg.wait_until(lambda: len(helps()) == 4, 10, lambda: f"four /help answers: {len(helps())}")
            notices = [m.text for m in tg.sent_messages(GROUP) if "commands in a minute" in (m.text or "")]
            assert notices == ["⚠️ You sent more than 3 commands in a minute here; the others go unanswered for now "
                               "(I say this at most once a minute). /stop still works."]
            assert [why for _, why in refused(tmp_path)] == ["too_many_commands"] * 3
        finally:
            await runner.stop()
