"""Telegram, on python-telegram-bot's `Bot` driven by the gateway's lifecycle.

Polling is our own loop over `getUpdates` so that the offset moves past an update only after
the gateway has stored it: a crash between the two means the update comes again and the
inbox drops the copy. Webhook mode serves `POST /telegram/webhook` on the gateway's HTTP
server and answers 200 only after the update is stored, so Telegram retries anything else.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any, Awaitable, Callable, Sequence, TypeVar

from aiohttp import web
from telegram import (Bot, BotCommand, CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message,
                      ReplyParameters, Update)
from telegram.constants import ChatAction, MessageEntityType, ParseMode
from telegram.error import BadRequest, Conflict, Forbidden, InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.request import HTTPXRequest
from telegram.warnings import PTBDeprecationWarning

from platforms.base import (Attachment, ButtonPress, Capabilities, ChatRef, DeliveryError, InboundMessage,
                            LengthUnit, PlatformAdapter, Reply)
from platforms.telegram.render import render_for_telegram

log = logging.getLogger(__name__)
T = TypeVar("T")

WEBHOOK_PATH = "/telegram/webhook"
ALLOWED_UPDATES = ["message", "callback_query"]
MAX_RATE_WAIT = 120.0  # seconds one send may spend waiting out 429s before the outbox takes over
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def _retry_after(exc: RetryAfter) -> float:
    """Seconds to wait; PTB 22 returns an int or a timedelta (and warns about the change)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def webhook_secret_for(token: str) -> str:
    """A stable secret derived from the token (Telegram allows A-Z, a-z, 0-9, _ and -)."""
    return hmac.new(token.encode(), b"chatgate-webhook", hashlib.sha256).hexdigest()


class TelegramAdapter(PlatformAdapter):
    name = "telegram"
    capabilities = Capabilities(max_length=4096, length_unit=LengthUnit.UTF16, markup="html", can_edit=True,
                                can_buttons=True, can_typing=True, edit_interval=1.0)

    def __init__(self, token: str, *, base_url: str = "https://api.telegram.org", mode: str = "polling",
                 webhook_url: str | None = None, webhook_secret: str | None = None, files_dir: Path,
                 max_file_bytes: int = 20 * 1024 * 1024, poll_timeout: int = 30) -> None:
        super().__init__()
        base = base_url.rstrip("/")
        self.bot = Bot(token, base_url=f"{base}/bot", base_file_url=f"{base}/file/bot",
                       request=HTTPXRequest(connection_pool_size=64, read_timeout=30.0, connect_timeout=10.0),
                       get_updates_request=HTTPXRequest(read_timeout=poll_timeout + 10.0, connect_timeout=10.0))
        self.mode = mode
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret or webhook_secret_for(token)
        self.files_dir = files_dir
        self.max_file_bytes = max_file_bytes
        self.poll_timeout = poll_timeout
        self._poller: asyncio.Task[None] | None = None
        self._offset: int | None = None
        self._blocked_until = 0.0  # after a 429: nothing is sent before this loop time
        self._chat_blocked: dict[str, float] = {}

    # -- lifecycle ------------------------------------------------------------------------

    async def _start(self) -> None:
        try:
            await self.bot.initialize()
        except InvalidToken:
            raise RuntimeError("Telegram refused the bot token (platforms.telegram.token / TELEGRAM_BOT_TOKEN)") \
                from None
        if self.mode == "webhook":
            await self.bot.set_webhook(self.webhook_url or "", secret_token=self.webhook_secret,
                                       allowed_updates=ALLOWED_UPDATES)
        else:
            await self.bot.delete_webhook()
            self._poller = asyncio.create_task(self._poll(), name="telegram-poll")
        log.info("telegram: @%s connected (%s)", self.bot.username, self.mode)

    async def _stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
            if self._offset is not None:  # confirm what was stored, so it is not sent again
                try:
                    await self.bot.get_updates(offset=self._offset, timeout=0, allowed_updates=ALLOWED_UPDATES)
                except TelegramError as exc:
                    log.debug("telegram: final offset confirmation failed: %s", exc)
        await self.bot.shutdown()

    async def set_commands(self, commands: dict[str, str]) -> None:
        try:
            await self.bot.set_my_commands([BotCommand(name, text[:256]) for name, text in commands.items()])
        except TelegramError as exc:
            log.warning("telegram: could not register commands: %s", exc)

    # -- receiving ------------------------------------------------------------------------

    async def _poll(self) -> None:
        backoff = 1.0
        while True:
            try:
                updates = await self.bot.get_updates(offset=self._offset, timeout=self.poll_timeout,
                                                     allowed_updates=ALLOWED_UPDATES)
            except Conflict:
                self.fail("another process is polling updates for this bot token (409 Conflict); "
                          "stop the other instance or use a different token")
                return
            except InvalidToken:
                self.fail("Telegram refused the bot token")
                return
            except RetryAfter as exc:
                await asyncio.sleep(_retry_after(exc))
                continue
            except (NetworkError, TelegramError) as exc:
                log.warning("telegram: getUpdates failed (%s); retrying in %.1fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            backoff = 1.0
            for update in updates:
                try:
                    await self.handle_update(update)
                except Exception:
                    log.exception("telegram: update %s could not be stored; it will be fetched again",
                                  update.update_id)
                    await asyncio.sleep(1.0)
                    break
                self._offset = update.update_id + 1

    def http_routes(self) -> Sequence[Any]:
        return [web.post(WEBHOOK_PATH, self._webhook)] if self.mode == "webhook" else []

    async def _webhook(self, request: web.Request) -> web.Response:
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not hmac.compare_digest(given, self.webhook_secret):
            return web.Response(status=403, text="wrong secret token\n")
        try:
            update = Update.de_json(await request.json(), self.bot)
        except (ValueError, TypeError, KeyError):
            return web.Response(status=400, text="not a Telegram update\n")
        if update is None:
            return web.Response(status=400, text="not a Telegram update\n")
        await self.handle_update(update)  # an exception answers 500 and Telegram sends it again
        return web.Response(text="ok")

    async def handle_update(self, update: Update) -> None:
        if update.callback_query is not None:
            await self._on_callback(update.callback_query)
            return
        message = update.message
        if message is None or message.from_user is None or message.from_user.is_bot:
            return  # edits, channel posts and service messages are not conversations
        if message.chat.type == "channel":
            return
        await self.emit(await self._inbound(message))

    def _addressed(self, message: Message) -> bool:
        """Mentioned by @username, a reply to the bot, or a command meant for this bot."""
        if message.chat.type == "private":
            return True
        me = (self.bot.username or "").lower()
        entities = message.parse_entities() if message.text else message.parse_caption_entities()
        for entity, text in entities.items():
            if entity.type == MessageEntityType.MENTION and text[1:].lower() == me:
                return True
            if entity.type == MessageEntityType.TEXT_MENTION and entity.user and entity.user.id == self.bot.id:
                return True
            if entity.type == MessageEntityType.BOT_COMMAND and entity.offset == 0:
                target = text.partition("@")[2].lower()
                if not target or target == me:
                    return True
        replied = message.reply_to_message  # in a forum topic this may be the topic's root: not a reply
        return bool(replied and replied.from_user and replied.from_user.id == self.bot.id
                    and replied.forum_topic_created is None)

    async def _inbound(self, message: Message) -> InboundMessage:
        user = message.from_user
        assert user is not None
        text = message.text or message.caption or ""
        if self.bot.username:
            text = re.sub(rf"(?i)@{re.escape(self.bot.username)}\b", "", text).strip() if not text.startswith("/") \
                else text
        chat_type = "dm" if message.chat.type == "private" else "group"
        thread = str(message.message_thread_id) if message.is_topic_message and message.message_thread_id else None
        return InboundMessage(
            platform=self.name, chat_id=str(message.chat.id), chat_type=chat_type, user_id=str(user.id),
            user_name=user.full_name or user.username or str(user.id), text=text,
            message_id=str(message.message_id), thread_id=thread,
            attachments=tuple(await self._attachments(message)),
            reply_to=str(message.reply_to_message.message_id) if message.reply_to_message else None,
            bot_mentioned=self._addressed(message))

    async def _attachments(self, message: Message) -> list[Attachment]:
        found: list[tuple[str, Any, str, str]] = []  # kind, file object, name, mime
        if message.photo:
            photo = message.photo[-1]
            found.append(("image", photo, f"photo-{message.message_id}.jpg", "image/jpeg"))
        if message.document:
            doc = message.document
            found.append(("document", doc, doc.file_name or f"document-{message.message_id}",
                          doc.mime_type or "application/octet-stream"))
        if message.voice:
            found.append(("audio", message.voice, f"voice-{message.message_id}.ogg",
                          message.voice.mime_type or "audio/ogg"))
        attachments = []
        for kind, obj, name, mime in found:
            size = obj.file_size or 0
            if size > self.max_file_bytes:
                attachments.append(Attachment(kind, name, mime, size, error=(
                    f"{name} is {size / 1e6:.1f} MB; the limit is {self.max_file_bytes / 1e6:.0f} MB")))
                continue
            folder = self.files_dir / str(message.chat.id)
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{message.message_id}-{_SAFE_NAME.sub('_', name)}"
            try:
                file = await obj.get_file()
                await file.download_to_drive(path)
                attachments.append(Attachment(kind, name, mime, path.stat().st_size, str(path)))
            except TelegramError as exc:
                attachments.append(Attachment(kind, name, mime, size, error=f"{name} could not be downloaded ({exc})"))
        return attachments

    async def _on_callback(self, query: CallbackQuery) -> None:
        message = query.message
        chat_id = str(message.chat.id) if message is not None else ""

        async def answer(text: str) -> None:
            try:
                await self.bot.answer_callback_query(query.id, text=text[:200] or None)
            except TelegramError as exc:
                log.debug("telegram: answerCallbackQuery failed: %s", exc)

        thread = getattr(message, "message_thread_id", None) if getattr(message, "is_topic_message", False) else None
        await self.emit(ButtonPress(
            platform=self.name, chat_id=chat_id, user_id=str(query.from_user.id),
            user_name=query.from_user.full_name, message_id=str(message.message_id) if message else "",
            data=query.data or "", thread_id=str(thread) if thread else None, answer=answer))

    # -- sending --------------------------------------------------------------------------

    def render(self, markdown: str) -> list[Reply]:
        return render_for_telegram(markdown, self.capabilities.max_length)

    async def _api(self, chat_id: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run one Bot API call, waiting out 429s (per chat and for the whole bot)."""
        loop = asyncio.get_running_loop()
        waited = 0.0
        while True:
            delay = max(self._blocked_until, self._chat_blocked.get(chat_id, 0.0)) - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                result = await call()
                self._chat_blocked.pop(chat_id, None)
                return result
            except RetryAfter as exc:
                pause = _retry_after(exc)
                self._blocked_until = self._chat_blocked[chat_id] = loop.time() + pause
                waited += pause
                log.warning("telegram: rate limited in chat %s; waiting %.0fs", chat_id, pause)
                if waited > MAX_RATE_WAIT:
                    raise DeliveryError(f"rate limited for {waited:.0f}s", retry_after=pause) from exc
            except BadRequest:
                raise
            except Forbidden as exc:
                raise DeliveryError(f"telegram refused: {exc.message}", retryable=False) from exc
            except NetworkError as exc:
                raise DeliveryError(f"telegram unreachable: {exc.message}") from exc

    @staticmethod
    def _markup(reply: Reply) -> InlineKeyboardMarkup | None:
        if not reply.buttons:
            return None
        return InlineKeyboardMarkup([[InlineKeyboardButton(b.text, callback_data=b.data) for b in row]
                                     for row in reply.buttons])

    async def _deliver(self, chat: ChatRef, reply: Reply, edit_id: str | None) -> str:
        rich = reply.final and reply.plain is not None and reply.plain != reply.text
        text = reply.text if rich or reply.plain is None else reply.plain
        markup = self._markup(reply)

        async def attempt(body: str, parse_mode: str | None) -> str:
            if edit_id is not None:
                await self._api(chat.chat_id, lambda: self.bot.edit_message_text(
                    body, chat_id=chat.chat_id, message_id=int(edit_id), parse_mode=parse_mode, reply_markup=markup))
                return edit_id
            reply_parameters = (ReplyParameters(message_id=int(reply.reply_to), allow_sending_without_reply=True)
                                if reply.reply_to else None)
            sent = await self._api(chat.chat_id, lambda: self.bot.send_message(
                chat.chat_id, body, parse_mode=parse_mode, reply_markup=markup, reply_parameters=reply_parameters,
                message_thread_id=int(chat.thread_id) if chat.thread_id else None))
            return str(sent.message_id)

        try:
            try:
                return await attempt(text, ParseMode.HTML if rich else None)
            except BadRequest as exc:
                if not (rich and "can't parse entities" in exc.message.lower()):
                    raise
                log.info("telegram rejected the markup (%s); sending plain text", exc.message)
                return await attempt(reply.plain or reply.text, None)
        except BadRequest as exc:
            reason = exc.message.lower()
            if "message is not modified" in reason and edit_id is not None:
                return edit_id
            raise DeliveryError(f"telegram rejected the message: {exc.message}", retryable=False) from exc

    async def send(self, chat: ChatRef, reply: Reply) -> str:
        return await self._deliver(chat, reply, None)

    async def edit(self, chat: ChatRef, message_id: str, reply: Reply) -> None:
        await self._deliver(chat, reply, message_id)

    async def typing(self, chat: ChatRef, active: bool) -> None:
        if not active:
            return  # Telegram clears the indicator with the next message, or after 5 s
        loop = asyncio.get_running_loop()
        if max(self._blocked_until, self._chat_blocked.get(chat.chat_id, 0.0)) > loop.time():
            return
        try:
            await self.bot.send_chat_action(chat.chat_id, ChatAction.TYPING,
                                            message_thread_id=int(chat.thread_id) if chat.thread_id else None)
        except TelegramError as exc:
            log.debug("telegram: typing failed: %s", exc)
