"""Telegram: the Bot API over our own client (`botapi.py`), python-telegram-bot for reading updates.

Polling is our own loop over `getUpdates` (raw JSON, one update at a time) so that the offset
moves past an update only after the gateway has stored it: a crash between the two means the
update comes again and the inbox drops the copy. An update that cannot be taken after
`UPDATE_ATTEMPTS` tries (malformed, or the gateway refuses it) is handed over as `Unreadable`
(dead-lettered) and skipped, so one bad update never blocks the others. One the gateway cannot
store for its own sake (`StorageUnavailable`: its database locked or failing) is not counted: the
offset stays before it and it is fetched again after a pause (1 s, doubling to 30 s). The loop
runs under `supervise`: an unexpected error restarts it and `/readyz` says the platform is down
meanwhile.

Webhook mode serves `POST /telegram/webhook` on the gateway's HTTP server and answers 200 only
after the update is stored, so Telegram retries anything else (bounded, then dead-lettered; a
gateway that cannot store is no failure of the update's and is not counted).

A private text message and a button press are read straight from the update's JSON; anything
else (entities, replies, topics, files, groups) through python-telegram-bot's `Update`, which
is imported at the first such update, not at start.

Nothing here waits on a network call on the intake path: attachments are described at intake
and downloaded by `fetch` when their turn starts; a button press is only handed over.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence, TypeVar

from platforms.base import (
    Attachment,
    ButtonPress,
    Capabilities,
    ChatRef,
    DeliveryError,
    InboundMessage,
    LengthUnit,
    PlatformAdapter,
    Reply,
    StorageUnavailable,
    Unreadable,
)
from platforms.loops import start_supervised
from platforms.ratelimit import RateLimits
from platforms.telegram.botapi import BotAPI, BotAPIError
from platforms.telegram.render import render_for_telegram

if TYPE_CHECKING:
    from aiohttp import web
    from telegram import Message

log = logging.getLogger(__name__)
T = TypeVar("T")

WEBHOOK_PATH = "/telegram/webhook"
ALLOWED_UPDATES = ["message", "callback_query"]
_PLAIN_KEYS = frozenset({"message_id", "from", "chat", "date", "text"})  # a message `_plain_dm` reads itself
UPDATE_ATTEMPTS = 3  # tries at one update before it is dead-lettered
SHOWN_REMEMBERED = 4096  # messages whose current text is kept to skip edits that change nothing
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def _chat_of(raw: Any) -> Any:
    """The chat of a message or button-press update (the update itself when it names none)."""
    holder = (raw.get("callback_query") or raw) if isinstance(raw, dict) else None
    message = holder.get("message") if isinstance(holder, dict) else None
    chat = message.get("chat") if isinstance(message, dict) else None
    return chat.get("id") if isinstance(chat, dict) else ("update", id(raw))


def _user_name(user: dict[str, Any]) -> str:
    """What a person is called: first and last name, else the username, else the id."""
    first, last = user.get("first_name"), user.get("last_name")
    name = " ".join(part for part in (first, last) if isinstance(part, str) and part)
    return name or str(user.get("username") or "") or str(user.get("id"))


def webhook_secret_for(token: str) -> str:
    """A stable secret derived from the token (Telegram allows A-Z, a-z, 0-9, _ and -)."""
    return hmac.new(token.encode(), b"chatgate-webhook", hashlib.sha256).hexdigest()


class TelegramAdapter(PlatformAdapter):
    name = "telegram"
    capabilities = Capabilities(max_length=4096, length_unit=LengthUnit.UTF16, markup="html", can_edit=True,
                                can_buttons=True, can_typing=True, can_files=True, edit_interval=1.0)

    def __init__(self, token: str, *, base_url: str = "https://api.telegram.org", mode: str = "polling",
                 webhook_url: str | None = None, webhook_secret: str | None = None,
                 max_file_bytes: int = 20 * 1024 * 1024, poll_timeout: int = 30,
                 max_sends_per_second: float = 0.0) -> None:
        super().__init__()
        self.api = BotAPI(token, base_url)
        self.username: str | None = None  # the bot's, from getMe
        self.bot_id: int | None = None
        self.mode = mode
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret or webhook_secret_for(token)
        self.max_file_bytes = max_file_bytes
        self.poll_timeout = poll_timeout
        self.limits = RateLimits(max_sends_per_second)
        self._poller: asyncio.Task[None] | None = None
        self._offset: int | None = None
        self._failures: dict[int, int] = {}  # update id → failed attempts
        self._not_stored = False  # an update of the last batch found the gateway unable to store it
        self._shown: OrderedDict[tuple[str, str], tuple[Any, ...]] = OrderedDict()  # (chat, message) → its look

    # -- lifecycle ------------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the client and learn who the bot is (getMe)."""
        await self.api.open()
        try:
            me = await self.api.call("getMe")
        except BotAPIError as exc:
            if exc.token_refused:
                raise RuntimeError("Telegram refused the bot token (platforms.telegram.token / "
                                   "TELEGRAM_BOT_TOKEN)") from None
            raise
        if not isinstance(me, dict) or not isinstance(me.get("id"), int):
            raise RuntimeError("Telegram's getMe answered without the bot's id")
        self.bot_id, self.username = me["id"], me.get("username") or None

    async def _start(self) -> None:
        try:
            await self.connect()
            if self.mode == "webhook":
                await self.api.call("setWebhook", {"url": self.webhook_url or "", "secret_token": self.webhook_secret,
                                                   "allowed_updates": ALLOWED_UPDATES})
            else:
                await self.api.call("deleteWebhook")
        except BaseException:
            await self.api.close()  # (a start that failed is not stopped: nothing else closes it)
            raise
        if self.mode != "webhook":
            self._poller = start_supervised("telegram-poll", self._poll,
                                            on_down=lambda reason: self.set_health("down", reason))
        log.info("telegram: @%s connected (%s)", self.username, self.mode)

    async def _stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
            if self._offset is not None:  # confirm what was stored, so it is not sent again
                try:
                    await self.api.call("getUpdates", {"offset": self._offset, "timeout": 0})
                except BotAPIError as exc:
                    log.debug("telegram: final offset confirmation failed: %s", exc)
        await self.api.close()

    async def set_commands(self, commands: dict[str, str]) -> None:
        try:
            await self.api.call("setMyCommands", {"commands": [
                {"command": name, "description": text[:256]} for name, text in commands.items()]})
        except BotAPIError as exc:
            log.warning("telegram: could not register commands: %s", exc)

    # -- receiving ------------------------------------------------------------------------

    async def _poll(self) -> None:
        backoff = 1.0
        storage_waits = 0  # batches in a row the gateway could not store
        while True:
            try:
                updates = await self.api.call("getUpdates", {
                    "offset": self._offset, "timeout": self.poll_timeout, "allowed_updates": ALLOWED_UPDATES},
                    read_timeout=self.poll_timeout + 10.0)
            except BotAPIError as exc:
                if exc.status == 409:
                    self.fail("another process is polling updates for this bot token (409 Conflict); "
                              "stop the other instance or use a different token")
                    return
                if exc.token_refused:
                    self.fail("Telegram refused the bot token")
                    return
                if exc.retry_after is not None:
                    await asyncio.sleep(exc.retry_after)
                    continue
                # no answer, 5xx, or a refusal that may pass
                self.set_health("down", f"getUpdates failed: {exc}")
                log.warning("telegram: getUpdates failed (%s); retrying in %.1fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            backoff = 1.0
            self.set_health("ready")
            if isinstance(updates, list) and updates:
                self._not_stored = False
                again = await self._take_batch(updates)
                await asyncio.sleep(0)  # the turns just dispatched take their first step before the next poll
                storage_waits = storage_waits + 1 if again is not None and self._not_stored else 0
                if again is not None:  # fetch it again (what was taken after it comes again as a duplicate)
                    tries = storage_waits - 1 if storage_waits else self._failures.get(again, 1)
                    await asyncio.sleep(min(2.0 ** tries, 30.0))

    async def _take_batch(self, updates: list[Any]) -> int | None:
        """Store a batch of updates: chats side by side (their writes share one commit), each chat's
        updates in order. The offset moves past the batch, or to the first update that could not be
        taken yet (returned; None: all were taken)."""
        by_chat: dict[Any, list[Any]] = {}
        for raw in updates:
            by_chat.setdefault(_chat_of(raw), []).append(raw)

        async def in_order(raws: list[Any]) -> int | None:
            for raw in raws:
                if not await self._take(raw):
                    return raw["update_id"]
            return None

        stuck = [u for u in await asyncio.gather(*(in_order(raws) for raws in by_chat.values())) if u is not None]
        if stuck:
            self._offset = min(stuck)
            return self._offset
        ids = [raw["update_id"] for raw in updates if isinstance(raw, dict) and isinstance(raw.get("update_id"), int)]
        if ids:
            self._offset = max(ids) + 1
        return None

    async def _take(self, raw: Any) -> bool:
        """Store one raw update (or dead-letter it after repeated failures); False: try it again later.
        The gateway unable to store (`StorageUnavailable`) is no failure of the update's: not counted."""
        update_id = raw.get("update_id") if isinstance(raw, dict) else None
        try:
            if not isinstance(update_id, int):
                await self.emit(Unreadable(self.name, "", json.dumps(raw), "an update without an id"))
                return True  # nothing to confirm by offset: it is not asked for again
            try:
                await self.handle_update(raw)
            except StorageUnavailable:
                raise
            except Exception as exc:
                attempts = self._failures[update_id] = self._failures.get(update_id, 0) + 1
                reason = f"{type(exc).__name__}: {exc}"[:500]
                if attempts < UPDATE_ATTEMPTS:
                    log.warning("telegram: update %s failed (attempt %d of %d): %s", update_id, attempts,
                                UPDATE_ATTEMPTS, reason)
                    return False
                log.error("telegram: update %s failed %d times; dead-lettered: %s", update_id, attempts, reason)
                await self.emit(Unreadable(self.name, str(update_id), json.dumps(raw), reason))
        except StorageUnavailable as exc:
            self._not_stored = True
            log.warning("telegram: update %s not stored (%s); it is fetched again later", update_id, exc)
            return not isinstance(update_id, int)  # (one without an id cannot be asked for again)
        self._failures.pop(update_id, None)
        return True

    def http_routes(self) -> Sequence[Any]:
        if self.mode != "webhook":
            return []
        from aiohttp import web  # (only for webhooks: polling needs no server, and starts before it)

        return [web.post(WEBHOOK_PATH, self._webhook)]

    async def _webhook(self, request: web.Request) -> web.Response:
        from aiohttp import web

        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not hmac.compare_digest(given.encode(), self.webhook_secret.encode()):
            return web.Response(status=403, text="wrong secret token\n")
        try:
            raw = await request.json()
        except ValueError:
            return web.Response(status=400, text="not a Telegram update\n")
        # an exception in `_take` answers 500 and Telegram sends it again
        return web.Response(text="ok") if await self._take(raw) else web.Response(status=500, text="try again\n")

    async def handle_update(self, raw: dict[str, Any]) -> None:
        plain = self._plain_dm(raw)
        if plain is not None:  # the common case, read without building PTB's objects (see `_plain_dm`)
            await self.emit(plain)
            return
        if "callback_query" in raw:
            await self._on_callback(raw["callback_query"])
            return
        from telegram import Update  # (imported at the first update that needs its model)

        message = Update.de_json(raw, None).message
        if message is None or message.from_user is None or message.from_user.is_bot:
            return  # edits, channel posts and service messages are not conversations
        if message.chat.type == "channel":
            return
        await self.emit(self._inbound(message))

    def _plain_dm(self, raw: dict[str, Any]) -> InboundMessage | None:
        """A private text message with nothing else to it (no entities, reply, topic or file), read
        straight from the update: building PTB's objects for it was a tenth of the gateway's CPU
        with 1,000 conversations. None for anything else, which PTB's objects read. Both give the
        same InboundMessage (tests/test_telegram_e2e.py compares them)."""
        message = raw.get("message")
        if raw.keys() != {"update_id", "message"} or not isinstance(message, dict) \
                or not message.keys() <= _PLAIN_KEYS or not isinstance(message.get("text"), str):
            return None
        user, chat = message.get("from"), message.get("chat")
        if not isinstance(user, dict) or not isinstance(chat, dict) or chat.get("type") != "private" \
                or user.get("is_bot") is not False or not isinstance(user.get("id"), int) \
                or not isinstance(chat.get("id"), int) or not isinstance(message.get("message_id"), int) \
                or not isinstance(user.get("first_name"), str):
            return None
        return InboundMessage(
            platform=self.name, chat_id=str(chat["id"]), chat_type="dm", user_id=str(user["id"]),
            user_name=_user_name(user), text=self._without_mention(message["text"]),
            message_id=str(message["message_id"]), bot_mentioned=True)

    def _without_mention(self, text: str) -> str:
        """The text without the bot's @username (a command keeps it: /start@bot is for this bot)."""
        if self.username and not text.startswith("/"):
            return re.sub(rf"(?i)@{re.escape(self.username)}\b", "", text).strip()
        return text

    def _addressed(self, message: Message) -> bool:
        """Mentioned by @username, a reply to the bot, or a command meant for this bot."""
        if message.chat.type == "private":
            return True
        me = (self.username or "").lower()
        entities = message.parse_entities() if message.text else message.parse_caption_entities()
        for entity, text in entities.items():
            if entity.type == "mention" and text[1:].lower() == me:
                return True
            if entity.type == "text_mention" and entity.user and entity.user.id == self.bot_id:
                return True
            if entity.type == "bot_command" and entity.offset == 0:
                target = text.partition("@")[2].lower()
                if not target or target == me:
                    return True
        replied = message.reply_to_message  # in a forum topic this may be the topic's root: not a reply
        return bool(replied and replied.from_user and replied.from_user.id == self.bot_id
                    and replied.forum_topic_created is None)

    def _inbound(self, message: Message) -> InboundMessage:
        user = message.from_user
        assert user is not None
        text = self._without_mention(message.text or message.caption or "")
        chat_type = "dm" if message.chat.type == "private" else "group"
        thread = str(message.message_thread_id) if message.is_topic_message and message.message_thread_id else None
        return InboundMessage(
            platform=self.name, chat_id=str(message.chat.id), chat_type=chat_type, user_id=str(user.id),
            user_name=_user_name(user.to_dict()), text=text,
            message_id=str(message.message_id), thread_id=thread, attachments=self._attachments(message),
            reply_to=str(message.reply_to_message.message_id) if message.reply_to_message else None,
            bot_mentioned=self._addressed(message))

    def _attachments(self, message: Message) -> tuple[Attachment, ...]:
        """What came with the message, described only: `fetch` downloads it when its turn starts."""
        found: list[tuple[str, Any, str, str]] = []  # kind, file object, name, mime
        if message.photo:
            found.append(("image", message.photo[-1], f"photo-{message.message_id}.jpg", "image/jpeg"))
        if message.document:
            doc = message.document
            found.append(("document", doc, doc.file_name or f"document-{message.message_id}",
                          doc.mime_type or "application/octet-stream"))
        if message.voice:
            found.append(("audio", message.voice, f"voice-{message.message_id}.ogg",
                          message.voice.mime_type or "audio/ogg"))
        attachments = []
        for kind, obj, name, mime in found:
            size = obj.file_size if isinstance(obj.file_size, int) and obj.file_size >= 0 else 0
            error = (f"{name} is {size / 1e6:.1f} MB; the limit is {self.max_file_bytes / 1e6:.0f} MB"
                     if size > self.max_file_bytes else None)
            attachments.append(Attachment(kind, name, mime, size, error=error,
                                          ref=None if error else f"{obj.file_id}:{message.message_id}"))
        return tuple(attachments)

    async def fetch(self, attachment: Attachment, folder: Path) -> Attachment:
        if attachment.ref is None or attachment.error or attachment.path:
            return attachment
        file_id, _, message_id = attachment.ref.rpartition(":")
        path = folder / f"{message_id}-{_SAFE_NAME.sub('_', attachment.name)}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            file = await self.api.call("getFile", {"file_id": file_id})
            if not isinstance(file, dict) or not isinstance(file.get("file_path"), str):
                raise ValueError("Telegram gave no path for it")
            stated = file.get("file_size")
            if isinstance(stated, int) and stated > self.max_file_bytes:
                raise ValueError(f"it is {stated / 1e6:.1f} MB; the limit is {self.max_file_bytes / 1e6:.0f} MB")
            size = await self.api.download(file["file_path"], path, self.max_file_bytes)
        except (BotAPIError, OSError, ValueError) as exc:
            log.warning("telegram: could not download %s: %s", attachment.name, exc)
            return Attachment(attachment.kind, attachment.name, attachment.mime_type, attachment.size,
                              error=f"{attachment.name} could not be downloaded ({exc})")
        return Attachment(attachment.kind, attachment.name, attachment.mime_type, size, str(path))

    async def _on_callback(self, query: Any) -> None:
        """A button press, read from the update's JSON (malformed: ValueError, dead-lettered)."""
        user = query.get("from") if isinstance(query, dict) else None
        if not isinstance(user, dict) or not isinstance(user.get("id"), int) or not isinstance(query.get("id"), str):
            raise ValueError("a callback_query without its id or sender")
        message = query.get("message") if isinstance(query.get("message"), dict) else {}
        chat = message.get("chat") if isinstance(message.get("chat"), dict) else {}
        thread = message.get("message_thread_id") if message.get("is_topic_message") else None
        data = query.get("data")

        async def answer(text: str) -> None:
            try:
                await self.api.call("answerCallbackQuery", {"callback_query_id": query["id"],
                                                            "text": text[:200] or None})
            except BotAPIError as exc:
                log.debug("telegram: answerCallbackQuery failed: %s", exc)

        await self.emit(ButtonPress(
            platform=self.name, chat_id=str(chat.get("id", "")), user_id=str(user["id"]), user_name=_user_name(user),
            message_id=str(message.get("message_id", "")), data=data if isinstance(data, str) else "",
            thread_id=str(thread) if thread else None, on_answer=answer))

    # -- sending --------------------------------------------------------------------------

    def render(self, markdown: str) -> list[Reply]:
        return render_for_telegram(markdown, self.capabilities.max_length)

    async def _api(self, chat_id: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run one Bot API call within the rate limits: a chat paused by a 429 is not called at
        all (the caller is told how long to wait), and a 429 pauses that chat only."""
        left = self.limits.paused_for(chat_id)
        if left > 0:
            raise DeliveryError(f"chat {chat_id} is rate limited for {left:.1f}s more", retry_after=left)
        await self.limits.take()
        try:
            return await call()
        except BotAPIError as exc:
            if exc.retry_after is not None:
                self.limits.pause(chat_id, exc.retry_after)
                log.warning("telegram: rate limited in chat %s; pausing it for %.0fs", chat_id, exc.retry_after)
                raise DeliveryError(f"rate limited for {exc.retry_after:.0f}s", retry_after=exc.retry_after) from exc
            if exc.status == 400:
                raise  # the caller reads what Telegram objected to
            if exc.transient:
                raise DeliveryError(f"telegram unreachable: {exc.description}") from exc
            raise DeliveryError(f"telegram refused: {exc.description}", retryable=False) from exc

    @staticmethod
    def _markup(reply: Reply) -> dict[str, Any] | None:
        if not reply.buttons:
            return None
        return {"inline_keyboard": [[{"text": b.text, "callback_data": b.data} for b in row]
                                    for row in reply.buttons]}

    async def _deliver(self, chat: ChatRef, reply: Reply, edit_id: str | None) -> str:
        rich = reply.final and reply.plain is not None and reply.plain != reply.text
        text = reply.text if rich or reply.plain is None else reply.plain
        markup = self._markup(reply)

        async def attempt(body: str, parse_mode: str | None) -> str:
            look = (body, parse_mode, reply.buttons)
            if edit_id is not None:
                if self._shown.get((chat.chat_id, edit_id)) == look:
                    return edit_id  # the message shows exactly this already (the streamed draft, usually)
                await self._api(chat.chat_id, lambda: self.api.call("editMessageText", {
                    "chat_id": chat.chat_id, "message_id": int(edit_id), "text": body, "parse_mode": parse_mode,
                    "reply_markup": markup}))
                self._remember(chat.chat_id, edit_id, look)
                return edit_id
            reply_parameters = ({"message_id": int(reply.reply_to), "allow_sending_without_reply": True}
                                if reply.reply_to else None)
            sent = await self._api(chat.chat_id, lambda: self.api.call("sendMessage", {
                "chat_id": chat.chat_id, "text": body, "parse_mode": parse_mode, "reply_markup": markup,
                "reply_parameters": reply_parameters,
                "message_thread_id": int(chat.thread_id) if chat.thread_id else None}))
            message_id = str(sent["message_id"])
            self._remember(chat.chat_id, message_id, look)
            return message_id

        try:
            try:
                return await attempt(text, "HTML" if rich else None)
            except BotAPIError as exc:  # (only a 400 comes through `_api`)
                if not (rich and "can't parse entities" in exc.description.lower()):
                    raise
                log.info("telegram rejected the markup (%s); sending plain text", exc.description)
                return await attempt(reply.plain or reply.text, None)
        except BotAPIError as exc:
            if "message is not modified" in exc.description.lower() and edit_id is not None:
                return edit_id
            raise DeliveryError(f"telegram rejected the message: {exc.description}", retryable=False) from exc

    def _remember(self, chat_id: str, message_id: str, look: tuple[Any, ...]) -> None:
        """What a message of ours shows now, so that an edit to the same look is not sent (Telegram
        answers it with "message is not modified"). The latest few thousand messages."""
        self._shown[(chat_id, message_id)] = look
        self._shown.move_to_end((chat_id, message_id))
        if len(self._shown) > SHOWN_REMEMBERED:
            self._shown.popitem(last=False)

    async def send(self, chat: ChatRef, reply: Reply) -> str:
        return await self._deliver(chat, reply, None)

    async def edit(self, chat: ChatRef, message_id: str, reply: Reply) -> None:
        await self._deliver(chat, reply, message_id)

    async def send_file(self, chat: ChatRef, path: Path, caption: str = "") -> str:
        if path.stat().st_size > 50 * 1024 * 1024:  # the Bot API's upload limit
            raise DeliveryError(f"{path.name} is larger than Telegram's 50 MB upload limit", retryable=False)
        content = await asyncio.to_thread(path.read_bytes)
        try:
            sent = await self._api(chat.chat_id, lambda: self.api.upload("sendDocument", {
                "chat_id": chat.chat_id, "caption": caption[:1024] or None,
                "message_thread_id": chat.thread_id or None}, "document", path.name, content))
        except BotAPIError as exc:
            raise DeliveryError(f"telegram rejected the file: {exc.description}", retryable=False) from exc
        return str(sent["message_id"])

    async def typing(self, chat: ChatRef, active: bool) -> None:
        if not active or self.limits.paused_for(chat.chat_id) > 0:
            return  # Telegram clears the indicator with the next message, or after 5 s
        try:
            await self.api.call("sendChatAction", {
                "chat_id": chat.chat_id, "action": "typing",
                "message_thread_id": int(chat.thread_id) if chat.thread_id else None})
        except BotAPIError as exc:
            log.debug("telegram: typing failed: %s", exc)
