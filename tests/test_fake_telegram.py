"""The fake Telegram server against the real python-telegram-bot client (Bot and Application)."""

from __future__ import annotations

import asyncio
import datetime as dtm
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from telegram import Bot, BotCommand, InlineKeyboardButton, InlineKeyboardMarkup, MessageEntity, Update
from telegram.error import BadRequest, Conflict, EndPointNotFound, InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.ext import Application, CallbackContext, CallbackQueryHandler, ContextTypes, MessageHandler, filters

from tests.fakes.telegram import FakeTelegram, utf16_len

TOKEN = "123:ABC"
BAD_HTML = "<b>unclosed"


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    """A started fake, stopped after the test."""
    async with FakeTelegram(token=TOKEN, bot_username="chatgate_bot", bot_id=123) as fake:
        yield fake


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    """A real ``telegram.Bot`` pointed at the fake."""
    async with Bot(TOKEN, base_url=f"{tg.url}/bot", base_file_url=f"{tg.url}/file/bot") as b:
        yield b


def build_app(tg: FakeTelegram) -> Application[Any, Any, Any, Any, Any, Any]:
    """An Application as an adapter would build it, with the fake's URLs."""
    return (Application.builder().token(TOKEN).base_url(f"{tg.url}/bot")
            .base_file_url(f"{tg.url}/file/bot").build())


@asynccontextmanager
async def polling(app: Application[Any, Any, Any, Any, Any, Any],
                  error_callback: Any = None) -> AsyncIterator[None]:
    """initialize/start/start_polling, and always the matching stops."""
    await app.initialize()
    try:
        await app.start()
        try:
            await app.updater.start_polling(timeout=2, error_callback=error_callback)  # type: ignore[union-attr]
            try:
                yield
            finally:
                await app.updater.stop()  # type: ignore[union-attr]
        finally:
            await app.stop()
    finally:
        await app.shutdown()


def seconds(value: int | float | dtm.timedelta) -> float:
    """RetryAfter.retry_after is an int (with a deprecation warning) or a timedelta."""
    return value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)


async def test_get_me_and_auth(tg: FakeTelegram, bot: Bot) -> None:
    me = await bot.get_me()
    assert (me.id, me.username, me.is_bot, me.can_join_groups) == (123, "chatgate_bot", True, True)
    assert tg.calls[0].method == "getMe" and tg.calls[0].ok
    wrong = Bot("999:WRONG", base_url=f"{tg.url}/bot")
    try:
        with pytest.raises(InvalidToken, match="rejected"):  # initialize() calls getMe
            await wrong.initialize()
    finally:
        await wrong.shutdown()
    with pytest.raises(EndPointNotFound):
        await bot.do_api_request("noSuchMethod")
    assert [c.status for c in tg.calls[-2:]] == [401, 404]


async def test_send_message_in_thread_with_reply_and_buttons(tg: FakeTelegram, bot: Bot) -> None:
    update = tg.user_message("question", chat_type="supergroup", message_thread_id=7)
    chat_id, asked = update["message"]["chat"]["id"], update["message"]["message_id"]
    markup = InlineKeyboardMarkup([[InlineKeyboardButton("Yes", callback_data="y")]])
    msg = await bot.send_message(chat_id, "answer", message_thread_id=7,
                                 reply_to_message_id=asked, reply_markup=markup)
    assert (msg.text, msg.message_thread_id, msg.from_user.id) == ("answer", 7, 123)  # type: ignore[union-attr]
    assert msg.message_id == asked + 1 and msg.is_topic_message
    assert msg.reply_to_message is not None and msg.reply_to_message.text == "question"
    assert msg.reply_markup == markup
    [call] = tg.calls_to("sendMessage")
    assert call.params["message_thread_id"] == "7" and call.as_int("chat_id") == chat_id
    assert call.params["reply_parameters"] == {"message_id": asked}  # PTB's conversion
    assert call.params["reply_markup"] == {
        "inline_keyboard": [[{"text": "Yes", "callback_data": "y"}]]}
    [sent] = tg.sent_messages(chat_id)
    assert (sent.text, sent.message_thread_id, sent.reply_to_message_id) == ("answer", 7, asked)
    with pytest.raises(BadRequest, match="(?i)message to be replied not found"):
        await bot.send_message(chat_id, "x", reply_to_message_id=999)
    with pytest.raises(BadRequest, match="(?i)message text is empty"):
        await bot.send_message(chat_id, "  ")


async def test_length_limit_counts_utf16_units(tg: FakeTelegram, bot: Bot) -> None:
    text = "😀" * 2048
    assert len(text) == 2048 and utf16_len(text) == 4096
    msg = await bot.send_message(1001, text)
    assert msg.text == text
    with pytest.raises(BadRequest, match="(?i)message is too long"):
        await bot.send_message(1001, text + "a")
    with pytest.raises(BadRequest, match="(?i)message_too_long"):
        await bot.edit_message_text(text + "a", chat_id=1001, message_id=msg.message_id)
    html = "<b>" + "x" * 4096 + "</b>"  # the limit applies to the text after parsing
    assert (await bot.send_message(1001, html, parse_mode="HTML")).text == html


async def test_edit_rules(tg: FakeTelegram, bot: Bot) -> None:
    msg = await bot.send_message(1001, "draft")
    with pytest.raises(BadRequest, match="(?i)message is not modified"):
        await bot.edit_message_text("draft", chat_id=1001, message_id=msg.message_id)
    edited = await bot.edit_message_text("final", chat_id=1001, message_id=msg.message_id)
    assert edited.text == "final" and edited.edit_date is not None  # type: ignore[union-attr]
    [sent] = tg.sent_messages(1001)
    assert sent.text == "final" and sent.versions == ["draft", "final"]
    with pytest.raises(BadRequest, match="(?i)message to edit not found"):
        await bot.edit_message_text("x", chat_id=1001, message_id=999)
    markup = InlineKeyboardMarkup([[InlineKeyboardButton("Go", callback_data="go")]])
    await bot.edit_message_reply_markup(1001, msg.message_id, reply_markup=markup)
    with pytest.raises(BadRequest, match="(?i)not modified"):
        await bot.edit_message_reply_markup(1001, msg.message_id, reply_markup=markup)
    assert await bot.delete_message(1001, msg.message_id)
    assert tg.sent_messages(1001) == [] and tg.sent_messages(1001, include_deleted=True)[0].deleted
    with pytest.raises(BadRequest, match="(?i)message to delete not found"):
        await bot.delete_message(1001, msg.message_id)


async def test_markup_errors(tg: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match="(?i)can't parse entities.*end tag.*\"b\""):
        await bot.send_message(1001, BAD_HTML, parse_mode="HTML")
    with pytest.raises(BadRequest, match="(?i)character '\\.' is reserved"):
        await bot.send_message(1001, "end.", parse_mode="MarkdownV2")
    assert (await bot.send_message(1001, BAD_HTML)).text == BAD_HTML  # no parse_mode: fine
    ok = r"*bold* `a.b` [link](http://x.y/z) end\."
    assert (await bot.send_message(1001, ok, parse_mode="MarkdownV2")).text == ok
    tg.reject_markup_containing = "<<BAD>>"
    with pytest.raises(BadRequest, match="(?i)can't parse entities"):
        await bot.send_message(1001, "a <<BAD>> b", parse_mode="Markdown")
    assert (await bot.send_message(1001, "a <<BAD>> b")).text == "a <<BAD>> b"


async def test_429_raises_retry_after_then_succeeds(tg: FakeTelegram, bot: Bot) -> None:
    tg.fail_next("sendMessage", status=429, retry_after=1)
    with warnings.catch_warnings():  # PTB warns about int retry_after unless PTB_TIMEDELTA=1
        warnings.simplefilter("ignore")
        with pytest.raises(RetryAfter) as caught:
            await bot.send_message(1001, "hi")
        assert seconds(caught.value.retry_after) == 1
    assert (await bot.send_message(1001, "hi")).text == "hi"
    assert [c.status for c in tg.calls_to("sendMessage")] == [429, 200]
    tg.fail_next("sendMessage", status=400, description="Bad Request: can't parse entities: x")
    with pytest.raises(BadRequest, match="(?i)can't parse entities"):
        await bot.send_message(1001, "hi")


async def test_application_receives_private_group_and_topic_messages(tg: FakeTelegram) -> None:
    app = build_app(tg)
    seen: list[Update] = []

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        seen.append(update)
        assert update.effective_message is not None
        await update.effective_message.reply_text(f"echo: {update.effective_message.text}")

    app.add_handler(MessageHandler(filters.TEXT, echo))
    async with polling(app):
        tg.user_message("hello")
        tg.user_message("hi @chatgate_bot", chat_type="group", user_id=5, first_name="Bo")
        tg.user_message("in topic", chat_type="supergroup", message_thread_id=42)
        calls = await tg.wait_for("sendMessage", count=3)
    by_text = {c.params["text"]: c for c in calls}
    assert set(by_text) == {"echo: hello", "echo: hi @chatgate_bot", "echo: in topic"}
    assert by_text["echo: hello"].as_int("chat_id") == 1001
    assert by_text["echo: hi @chatgate_bot"].as_int("chat_id") == -1001
    assert by_text["echo: in topic"].params["message_thread_id"] == "42"
    private, group, topic = sorted(seen, key=lambda u: u.update_id)
    assert private.effective_chat.type == "private"  # type: ignore[union-attr]
    mention = group.effective_message.parse_entities([MessageEntity.MENTION])  # type: ignore[union-attr]
    assert list(mention.values()) == ["@chatgate_bot"]
    assert topic.effective_message.message_thread_id == 42  # type: ignore[union-attr]
    assert topic.effective_message.is_topic_message  # type: ignore[union-attr]
    chat = topic.effective_chat.id  # type: ignore[union-attr]
    assert [m.message_thread_id for m in tg.sent_messages(chat)] == [42]
    assert topic.effective_message.reply_to_message.forum_topic_created  # type: ignore[union-attr]
    # PTB cancels its open poll on stop; the fake sees the client leave (499), not a conflict
    assert {c.status for c in tg.calls_to("getUpdates")} <= {200, 499}
    # offset confirmation: PTB's last getUpdates confirmed everything; nothing comes back
    assert tg.pending_updates == []
    async with Bot(TOKEN, base_url=f"{tg.url}/bot") as fresh:
        assert await fresh.get_updates(timeout=0) == ()


async def test_redelivered_update_reaches_the_client_again(tg: FakeTelegram, bot: Bot) -> None:
    first = tg.user_message("once", message_id=50)
    [got] = await bot.get_updates(timeout=0)
    assert got.update_id == first["update_id"]
    assert await bot.get_updates(offset=got.update_id + 1, timeout=0) == ()
    tg.inject(first)  # the same update again, as after a restart without confirmation
    again = await bot.get_updates(offset=got.update_id + 1, timeout=0)
    assert [(u.update_id, u.message.message_id) for u in again] == [(got.update_id, 50)]  # type: ignore[union-attr]
    assert await bot.get_updates(offset=got.update_id + 1, timeout=0) == ()


async def test_long_poll_waits_and_stop_does_not_hang(tg: FakeTelegram, bot: Bot) -> None:
    poll = asyncio.create_task(bot.get_updates(timeout=5))
    await tg.wait_for("getUpdates")
    await asyncio.sleep(0.2)
    assert not poll.done()  # held open
    update = tg.user_message("wake up")
    got = await asyncio.wait_for(poll, 2)
    assert [u.update_id for u in got] == [update["update_id"]]
    for _ in range(3):
        tg.user_message("more")
    assert len(await bot.get_updates(offset=update["update_id"] + 1, limit=2, timeout=0)) == 2
    # a poll the client cancels does not swallow the updates that arrive afterwards
    cancelled = asyncio.create_task(bot.get_updates(offset=update["update_id"] + 4, timeout=5))
    [stale] = await tg.wait_for("getUpdates", lambda c: c.status == 0)
    cancelled.cancel()
    await asyncio.sleep(0.1)
    late = tg.user_message("late")
    await tg.wait_for("getUpdates", lambda c: c is stale and c.status == 499, timeout=2)
    got = await bot.get_updates(offset=update["update_id"] + 4, timeout=0)
    assert [u.update_id for u in got] == [late["update_id"]]
    open_poll = asyncio.create_task(bot.get_updates(offset=10**9, timeout=30))
    await tg.wait_for("getUpdates", lambda c: c.params.get("offset") == str(10**9))
    await asyncio.wait_for(tg.stop(), 1.5)  # the open long poll does not hold up the stop
    assert await asyncio.wait_for(open_poll, 2) == ()


async def test_callback_query_reaches_handler_and_is_answered(tg: FakeTelegram) -> None:
    app = build_app(tg)
    pressed: list[tuple[str | None, int]] = []

    async def on_press(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        assert query is not None and query.message is not None
        pressed.append((query.data, query.message.message_id))
        await query.answer("done")
        await query.edit_message_text("approved")

    app.add_handler(CallbackQueryHandler(on_press))
    async with polling(app):
        markup = InlineKeyboardMarkup([[InlineKeyboardButton("Approve", callback_data="ok:1")]])
        msg = await app.bot.send_message(1001, "Run it?", reply_markup=markup)
        update = tg.callback_query("ok:1", message_id=msg.message_id)
        [answer] = await tg.wait_for("answerCallbackQuery")
        await tg.wait_for("editMessageText")
    assert pressed == [("ok:1", msg.message_id)]
    assert answer.params["callback_query_id"] == update["callback_query"]["id"]
    assert answer.params["text"] == "done"
    [sent] = tg.sent_messages(1001)
    assert sent.text == "approved" and sent.reply_markup is None  # an edit without markup drops it
    async with Bot(TOKEN, base_url=f"{tg.url}/bot") as b:
        with pytest.raises(BadRequest, match="(?i)query is too old"):
            await b.answer_callback_query(update["callback_query"]["id"])


async def test_polling_recovers_from_502_and_dropped_connection(tg: FakeTelegram) -> None:
    app = build_app(tg)
    errors: list[TelegramError] = []

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        await update.effective_message.reply_text(update.effective_message.text)  # type: ignore[union-attr,arg-type]

    app.add_handler(MessageHandler(filters.TEXT, echo))
    async with polling(app, error_callback=errors.append):
        await tg.wait_for("getUpdates")
        tg.fail_next("getUpdates", status=502)
        tg.drop_next("getUpdates")
        tg.user_message("first")  # ends the open poll; the next two polls fail
        await tg.wait_for("getUpdates", lambda c: c.status == -1, timeout=5)
        tg.user_message("second")
        calls = await tg.wait_for("sendMessage", count=2, timeout=5)
    assert [c.params["text"] for c in calls] == ["first", "second"]
    statuses = [c.status for c in tg.calls_to("getUpdates")]
    assert statuses[:4] == [200, 502, -1, 200]
    assert [type(e) for e in errors] == [NetworkError, NetworkError]
    assert "Bad Gateway" in str(errors[0])


async def test_conflict_reaches_the_error_handlers(tg: FakeTelegram) -> None:
    app = build_app(tg)
    errors: list[BaseException] = []
    got_one = asyncio.Event()

    async def on_error(update: object, context: CallbackContext[Any, Any, Any, Any]) -> None:
        assert context.error is not None
        errors.append(context.error)
        got_one.set()

    app.add_error_handler(on_error)
    tg.conflict = True
    # With manual start_polling, route polling errors to the Application's error handlers:
    async with polling(app, error_callback=lambda exc: app.create_task(
            app.process_error(update=None, error=exc))):
        await asyncio.wait_for(got_one.wait(), 5)
        tg.conflict = False
    assert isinstance(errors[0], Conflict)
    assert "terminated by other getUpdates request" in str(errors[0])


async def test_the_earlier_of_two_concurrent_polls_is_ended_with_409(tg: FakeTelegram) -> None:
    """As Telegram does: a second poller's getUpdates ends the first's open one with 409 Conflict, and the
    updates go to the second."""
    async with Bot(tg.token, base_url=f"{tg.url}/bot") as first, Bot(tg.token, base_url=f"{tg.url}/bot") as second:
        earlier = asyncio.create_task(first.get_updates(timeout=10, read_timeout=15))
        await tg.wait_until(lambda: len(tg.calls_to("getUpdates")) == 1)
        later = asyncio.create_task(second.get_updates(timeout=10, read_timeout=15))
        with pytest.raises(Conflict, match="terminated by other getUpdates request"):
            await earlier
        tg.user_message("to the later poller")
        [update] = await later
    assert update.message is not None and update.message.text == "to the later poller"
    assert [c.status for c in tg.calls_to("getUpdates")] == [409, 200]


async def test_files_download_and_upload(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_file("doc-1", b"hello bytes", file_path="documents/a.txt")
    file = await bot.get_file("doc-1")
    assert file.file_size == 11 and file.file_path.endswith("/documents/a.txt")  # type: ignore[union-attr]
    assert bytes(await file.download_as_bytearray()) == b"hello bytes"
    update = tg.user_message(photo=b"JPEG-BYTES", caption="look")
    msg = Update.de_json(update, bot).message
    assert msg is not None and msg.caption == "look" and len(msg.photo) == 2
    biggest = await msg.photo[-1].get_file()
    assert bytes(await biggest.download_as_bytearray()) == b"JPEG-BYTES"
    doc = Update.de_json(tg.user_message(document=("notes.md", b"# hi")), bot).message
    assert doc is not None and doc.document is not None and doc.document.file_name == "notes.md"
    assert bytes(await (await doc.document.get_file()).download_as_bytearray()) == b"# hi"
    voice = Update.de_json(tg.user_message(voice=True), bot).message
    assert voice is not None and voice.voice is not None and voice.voice.file_size
    with pytest.raises(BadRequest, match="(?i)invalid file_id"):
        await bot.get_file("nope")
    sent = await bot.send_document(1001, document=b"report body", filename="report.txt",
                                   caption="the report")
    assert sent.document is not None and sent.document.file_name == "report.txt"
    [state] = tg.sent_messages(1001)
    assert (state.media, state.file_name, state.file_bytes, state.caption) == (
        "document", "report.txt", b"report body", "the report")
    [call] = tg.calls_to("sendDocument")
    assert call.files["document"].filename == "report.txt" and call.files["document"].size == 11
    photo = await bot.send_photo(1001, photo=b"\x89PNG fake", filename="p.png")
    assert photo.photo and tg.sent_messages(1001)[-1].media == "photo"


async def test_commands_chat_action_and_chat(tg: FakeTelegram, bot: Bot) -> None:
    assert await bot.set_my_commands([BotCommand("start", "Start"), BotCommand("stop", "Stop")])
    assert tg.commands == [{"command": "start", "description": "Start"},
                           {"command": "stop", "description": "Stop"}]
    assert [c.command for c in await bot.get_my_commands()] == ["start", "stop"]
    with pytest.raises(BadRequest, match="(?i)bot_command_invalid"):
        await bot.set_my_commands([BotCommand("has-dash", "x")])
    assert await bot.send_chat_action(1001, "typing")
    assert tg.calls_to("sendChatAction")[0].params["action"] == "typing"
    tg.user_message("hi", chat_type="group", chat_id=-77)
    chat = await bot.get_chat(-77)
    assert (chat.id, chat.type, chat.title) == (-77, "group", "Test group")


async def test_webhook_push(tg: FakeTelegram, bot: Bot) -> None:
    received: list[tuple[str | None, dict[str, Any]]] = []

    async def receive(request: web.Request) -> web.Response:
        received.append((request.headers.get("X-Telegram-Bot-Api-Secret-Token"),
                         await request.json()))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        url = f"http://127.0.0.1:{port}/hook"
        assert await bot.set_webhook(url, secret_token="s3cret")
        assert (tg.webhook_url, tg.webhook_secret) == (url, "s3cret")
        assert (await bot.get_webhook_info()).url == url
        with pytest.raises(Conflict, match="(?i)webhook is active"):
            await bot.get_updates(timeout=0)
        update = tg.user_message("via hook")
        assert await tg.push_webhook(update) == 200
        assert received == [("s3cret", update)]
        assert tg.pending_updates == []
    finally:
        await runner.cleanup()


async def test_raw_http_json_form_and_errors(tg: FakeTelegram) -> None:
    base = f"{tg.url}/bot{TOKEN}"
    markup = {"inline_keyboard": [[{"text": "A", "callback_data": "a"}]]}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/sendmessage", json={
                "chat_id": 1001, "text": "json body", "reply_markup": markup}) as resp:
            body = await resp.json()
            assert resp.status == 200 and body["result"]["reply_markup"] == markup
        async with http.post(f"{base}/getMe", data={}) as resp:
            assert (await resp.json())["result"]["username"] == "chatgate_bot"
        async with http.post(f"{tg.url}/bot1:NOPE/getMe") as resp:
            assert resp.status == 401 and await resp.json() == {
                "ok": False, "error_code": 401, "description": "Unauthorized"}
        async with http.post(f"{base}/noSuchMethod") as resp:
            assert resp.status == 404 and (await resp.json())["description"] == "Not Found"
        tg.fail_next("*", status=502)
        async with http.post(f"{base}/getMe") as resp:
            assert resp.status == 502 and (await resp.json())["description"] == "Bad Gateway"
    [call] = tg.calls_to("sendMessage")
    assert call.params["chat_id"] == "1001" and call.params["reply_markup"] == markup


async def test_wait_for_timeout_lists_calls(tg: FakeTelegram, bot: Bot) -> None:
    await bot.get_me()
    with pytest.raises(TimeoutError, match="(?s)sendMessage.*getMe"):
        await tg.wait_for("sendMessage", timeout=0.2)


def test_auto_entities_use_utf16_offsets() -> None:
    tg = FakeTelegram()
    update = tg.user_message("/ask@chatgate_bot 😀 hey @chatgate_bot", chat_type="group")
    entities = update["message"]["entities"]
    assert entities == [{"type": "bot_command", "offset": 0, "length": 17},
                        {"type": "mention", "offset": 25, "length": 13}]
    reply = tg.user_message("yes", reply_to_bot=True)["message"]["reply_to_message"]
    assert reply["from"]["id"] == 123
    with pytest.raises(ValueError):
        tg.user_message("x", chat_type="group", chat_id=5)
