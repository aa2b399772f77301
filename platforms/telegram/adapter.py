"""Telegram on python-telegram-bot: one `telegram.Bot` makes every Bot API call, and
`telegram.Update.de_json` reads every update, once.

Polling is our own loop over `getUpdates` (PTB's `Updater` confirms a batch as soon as it has
fetched it) so that the offset moves past an update only after the gateway has stored it: a
crash between the two means the update comes again and the inbox drops the copy. An update that
cannot be taken after `UPDATE_ATTEMPTS` tries (unreadable, or the gateway refuses it) is handed
over as `Unreadable` (dead-lettered) and skipped, so one bad update never blocks the others. One
the gateway cannot store for its own sake (`StorageUnavailable`: its database locked or failing)
is not counted: the offset stays before it and it is fetched again after a pause (1 s, doubling
to 30 s). The loop runs under `supervise`: an unexpected error restarts it and `/readyz` says the
platform is down meanwhile.

Webhook mode serves `POST /telegram/webhook` on the gateway's HTTP server and answers 200 only
after the update is stored, so Telegram retries anything else (bounded, then dead-lettered; a
gateway that cannot store is no failure of the update's and is not counted).

Calls whose answer the gateway does not read beyond an id (getUpdates, sendMessage,
editMessageText) go through `Bot.do_api_request` and come back as PTB's parsed JSON: building a
`Message` from every send's answer was an eighth of the gateway's CPU on the benchmark. The rest
are PTB's typed methods. PTB's errors (`telegram.error`) are mapped to the adapter contract's in
`_api`. The transport is PTB's `BaseRequest` on aiohttp (`transport.py`).

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
import warnings
from collections import OrderedDict
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence, TypeVar

from telegram import Bot, CallbackQuery, InputFile, Message, Update, User
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    EndPointNotFound,
    Forbidden,
    InvalidToken,
    RetryAfter,
    TelegramError,
)
from telegram.warnings import PTBDeprecationWarning, PTBUserWarning

from platforms.base import (
    Attachment,
    ButtonPress,
    Capabilities,
    ChatRef,
    DeliveryError,
    InboundMessage,
    LengthUnit,
    PlatformAdapter,
    PlatformRefused,
    Reply,
    StorageUnavailable,
    Unreadable,
    shown_url,
)
from platforms.loops import start_supervised
from platforms.ratelimit import RateLimits
from platforms.telegram.reclaim import SendGate, find_own
from platforms.telegram.render import render_for_telegram
from platforms.telegram.transport import AiohttpRequest

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger(__name__)
T = TypeVar("T")

WEBHOOK_PATH = "/telegram/webhook"
ALLOWED_UPDATES = ["message", "callback_query"]
UPDATE_ATTEMPTS = 3  # tries at one update before it is dead-lettered
SHOWN_REMEMBERED = 4096  # messages whose current text is kept to skip edits that change nothing
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
# Refusals that trying again will not change (blocked by the person, a bad token, a chat that moved).
_REFUSED = (Forbidden, InvalidToken, EndPointNotFound, Conflict, ChatMigrated)
# Telegram ends the earlier of two concurrent getUpdates with 409 Conflict: another poller, for the moment of a
# handover between gateway instances or for good (a second chatgate on this token without the shared database).
# Never a reason to stop: the poll is tried again, backing off, and the platform is `down` meanwhile.
_POLL_CONFLICT = ("another process is polling updates for this bot token (409 Conflict); if it is not a "
                  "chatgate instance on this database (storage.url) about to stop, stop it or use another token")
# PTB suggests its typed methods when `do_api_request` names an endpoint it knows: the raw answer
# is what we want there (see above). And PTB 22 warns on every RetryAfter (its own constructor
# reads the attribute) that it will become a timedelta; `_seconds` reads either form.
warnings.filterwarnings("ignore", message="Please use 'Bot\\.", category=PTBUserWarning)
warnings.filterwarnings("ignore", message=".*`retry_after` will be of type", category=PTBDeprecationWarning)


def _seconds(value: int | float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _line_of(raw: Any, update: Update | Exception) -> Any:
    """Whose line an update waits in: its chat's. One that PTB cannot read keeps its place in the
    line of the chat its JSON names (the only thing read from the JSON itself), so that what its
    chat sent after it waits until it is taken or set aside; one without a chat has a line of its own."""
    if isinstance(update, Update):
        chat = update.effective_chat
        return chat.id if chat is not None else ("update", id(raw))
    holder = (raw.get("callback_query") or raw) if isinstance(raw, dict) else None
    message = holder.get("message") if isinstance(holder, dict) else None
    chat = message.get("chat") if isinstance(message, dict) else None
    return chat.get("id") if isinstance(chat, dict) else ("update", id(raw))


def _user_name(user: User) -> str:
    """What a person is called: first and last name, else the username, else the id."""
    name = " ".join(part for part in (user.first_name, user.last_name) if part)
    return name or user.username or str(user.id)


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
        base = base_url.rstrip("/")
        self._token = token
        self.base_url = base
        self._requests = (AiohttpRequest(pool_size=256), AiohttpRequest(pool_size=1, read_timeout=poll_timeout + 10.0))
        self.bot = Bot(token, base_url=f"{base}/bot", base_file_url=f"{base}/file/bot",
                       request=self._requests[0], get_updates_request=self._requests[1])
        self.username: str | None = None  # the bot's, from getMe
        self.bot_id: int | None = None
        self.mode = mode
        self.capabilities = replace(TelegramAdapter.capabilities, single_connection=mode != "webhook")  # (a poller)
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
        self._sends = SendGate()  # a search for an unrecorded message waits for this chat's sends (`reclaim`)

    def _said(self, exc: BaseException) -> str:
        """What an error says, without the token (it is in every URL)."""
        text = exc.message if isinstance(exc, TelegramError) else str(exc)
        return (text or type(exc).__name__).replace(self._token, "<token>")

    # -- lifecycle ------------------------------------------------------------------------

    def connection_settings(self) -> str:
        return f"platforms.telegram.base_url ({shown_url(self.base_url)})"

    async def connect(self) -> None:
        """Open the Bot's connections and learn who it is (`Bot.initialize`: getMe). A refused token is
        `PlatformRefused`; anything else (no answer, a 5xx) may pass, and is raised as it is."""
        try:
            await self.bot.initialize()
        except InvalidToken:
            await self._close()
            raise PlatformRefused("Telegram refused the bot token (platforms.telegram.token / "
                                  "TELEGRAM_BOT_TOKEN)") from None
        self.bot_id, self.username = self.bot.id, self.bot.username or None

    async def _start(self) -> None:
        """getMe, then the webhook set or removed, then polling (a failed start is released by `_stop`)."""
        await self.connect()
        if self.mode == "webhook":
            try:
                await self.bot.set_webhook(self.webhook_url or "", secret_token=self.webhook_secret,
                                           allowed_updates=ALLOWED_UPDATES)
            except BadRequest as exc:  # (e.g. "bad webhook: …": the address, not the moment)
                raise PlatformRefused(f"Telegram refused the webhook address (platforms.telegram.webhook_url): "
                                      f"{self._said(exc)}") from None
        else:
            await self.bot.delete_webhook()
        if self.mode != "webhook":
            self._poller = start_supervised("telegram-poll", self._poll,
                                            on_down=lambda reason: self.set_health("down", reason))
        log.info("telegram: @%s connected (%s)", self.username, self.mode)

    async def _stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
            if self._offset is not None and not self.handing_over:  # confirm what was stored, so it is not sent
                # again (not at a handover: that getUpdates would end the new holder's poll with 409; what it
                # has not confirmed comes to the new holder again, and the inbox drops the copy)
                try:
                    await self.bot.do_api_request("getUpdates", api_kwargs={"offset": self._offset, "timeout": 0})
                except TelegramError as exc:
                    log.debug("telegram: final offset confirmation failed: %s", self._said(exc))
        await self._close()

    async def _close(self) -> None:
        """The Bot's connections, also after a getMe that failed (PTB's `shutdown` then leaves them open)."""
        await self.bot.shutdown()
        for request in self._requests:
            await request.shutdown()

    async def set_commands(self, commands: dict[str, str]) -> None:
        try:
            await self.bot.set_my_commands([(name, text[:256]) for name, text in commands.items()])
        except TelegramError as exc:
            log.warning("telegram: could not register commands: %s", self._said(exc))

    # -- receiving ------------------------------------------------------------------------

    async def _poll(self) -> None:
        backoff = 1.0
        storage_waits = 0  # batches in a row the gateway could not store
        while True:
            try:
                updates = await self.bot.do_api_request("getUpdates", api_kwargs={
                    "offset": self._offset, "timeout": self.poll_timeout, "allowed_updates": ALLOWED_UPDATES},
                    read_timeout=self.poll_timeout + 10.0)
            except (InvalidToken, EndPointNotFound):
                self.fail("Telegram refused the bot token")
                return
            except RetryAfter as exc:
                await asyncio.sleep(_seconds(exc.retry_after))
                continue
            except TelegramError as exc:  # no answer, a timeout, 5xx, 409 (another poller), a refusal that may pass
                reason = _POLL_CONFLICT if isinstance(exc, Conflict) else f"getUpdates failed: {self._said(exc)}"
                self.set_health("down", reason)
                log.warning("telegram: %s; retrying in %.1fs", reason, backoff)
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

    def _read(self, raw: Any) -> Update | Exception:
        """The update as PTB reads it, or what reading it raised (the update's failure, counted in `_take`)."""
        try:
            update = Update.de_json(raw, self.bot)
        except Exception as exc:
            return exc
        return update if isinstance(update, Update) else ValueError("an empty update")

    async def _take_batch(self, updates: list[Any]) -> int | None:
        """Store a batch of updates: chats side by side (their writes share one commit), each chat's
        updates in order. The offset moves past the batch, or to the first update that could not be
        taken yet (returned; None: all were taken)."""
        by_chat: dict[Any, list[tuple[Any, Update | Exception]]] = {}
        for raw in updates:
            update = self._read(raw)
            by_chat.setdefault(_line_of(raw, update), []).append((raw, update))

        async def in_order(taken: list[tuple[Any, Update | Exception]]) -> int | None:
            for raw, update in taken:
                if not await self._take(raw, update):
                    return raw["update_id"]
            return None

        stuck = [u for u in await asyncio.gather(*(in_order(taken) for taken in by_chat.values())) if u is not None]
        if stuck:
            self._offset = min(stuck)
            return self._offset
        ids = [raw["update_id"] for raw in updates if isinstance(raw, dict) and isinstance(raw.get("update_id"), int)]
        if ids:
            self._offset = max(ids) + 1
        return None

    async def _take(self, raw: Any, update: Update | Exception) -> bool:
        """Store one update (or dead-letter it after repeated failures); False: try it again later.
        The gateway unable to store (`StorageUnavailable`) is no failure of the update's: not counted."""
        update_id = raw.get("update_id") if isinstance(raw, dict) else None
        try:
            if not isinstance(update_id, int):
                await self.emit(Unreadable(self.name, "", json.dumps(raw), "an update without an id"))
                return True  # nothing to confirm by offset: it is not asked for again
            try:
                if isinstance(update, Exception):
                    raise update
                await self.handle_update(update)
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
        return web.Response(text="ok") if await self._take(raw, self._read(raw)) \
            else web.Response(status=500, text="try again\n")

    async def handle_update(self, update: Update) -> None:
        if update.callback_query is not None:
            await self._on_callback(update.callback_query)
            return
        message = update.message
        if message is None or message.from_user is None or message.from_user.is_bot:
            return  # edits, channel posts and service messages are not conversations
        if message.chat.type == "channel":
            return
        await self.emit(self._inbound(message))

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
            user_name=_user_name(user), text=text,
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
        """Download a described attachment (getFile, then the file): over the limit, nothing is written."""
        if attachment.ref is None or attachment.error or attachment.path:
            return attachment
        file_id, _, message_id = attachment.ref.rpartition(":")
        path = folder / f"{message_id}-{_SAFE_NAME.sub('_', attachment.name)}"
        limit = f"the limit is {self.max_file_bytes / 1e6:.0f} MB"
        try:
            file = await self.bot.get_file(file_id)
            if (file.file_size or 0) > self.max_file_bytes:
                raise ValueError(f"it is {file.file_size / 1e6:.1f} MB; {limit}")
            content = await file.download_as_bytearray()
            if len(content) > self.max_file_bytes:
                raise ValueError(f"it is {len(content) / 1e6:.1f} MB; {limit}")
            folder.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(path.write_bytes, content)
        except (TelegramError, OSError, ValueError, RuntimeError) as exc:  # (RuntimeError: PTB's "no file_path")
            log.warning("telegram: could not download %s: %s", attachment.name, self._said(exc))
            return Attachment(attachment.kind, attachment.name, attachment.mime_type, attachment.size,
                              error=f"{attachment.name} could not be downloaded ({self._said(exc)})")
        return Attachment(attachment.kind, attachment.name, attachment.mime_type, len(content), str(path))

    async def _on_callback(self, query: CallbackQuery) -> None:
        if query.from_user is None:  # (PTB reads one without `from`; Telegram never sends it: dead-lettered)
            raise ValueError("a callback_query without its sender")
        message = query.message  # (one too old for the bot to see is an InaccessibleMessage: chat and id only)
        thread = message.message_thread_id if isinstance(message, Message) and message.is_topic_message else None

        async def answer(text: str) -> None:
            try:
                await self.bot.answer_callback_query(query.id, text=text[:200] or None)
            except TelegramError as exc:
                log.debug("telegram: answerCallbackQuery failed: %s", self._said(exc))

        await self.emit(ButtonPress(
            platform=self.name, chat_id=str(message.chat.id) if message else "", user_id=str(query.from_user.id),
            user_name=_user_name(query.from_user), message_id=str(message.message_id) if message else "",
            data=query.data or "", thread_id=str(thread) if thread else None, on_answer=answer))

    # -- sending --------------------------------------------------------------------------

    def render(self, markdown: str) -> list[Reply]:
        return render_for_telegram(markdown, self.capabilities.max_length)

    async def _api(self, chat_id: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run one Bot API call within the rate limits, with PTB's errors told as the contract's: a
        chat paused by a 429 is not called at all (the caller is told how long to wait), and a 429
        pauses that chat only. `BadRequest` comes through for the caller to read. No answer (the
        connection broke, perhaps after Telegram took the message), a timeout or the server's own
        trouble can pass: retryable; a refusal for good is not."""
        left = self.limits.paused_for(chat_id)
        if left > 0:
            raise DeliveryError(f"chat {chat_id} is rate limited for {left:.1f}s more", retry_after=left)
        await self.limits.take()
        try:
            return await call()
        except RetryAfter as exc:
            pause = _seconds(exc.retry_after)
            self.limits.pause(chat_id, pause)
            log.warning("telegram: rate limited in chat %s; pausing it for %.0fs", chat_id, pause)
            raise DeliveryError(f"rate limited for {pause:.0f}s", retry_after=pause) from exc
        except BadRequest:
            raise
        except _REFUSED as exc:
            raise DeliveryError(f"telegram refused: {self._said(exc)}", retryable=False) from exc
        except TelegramError as exc:  # NetworkError, TimedOut, 5xx, an answer that is not the Bot API's
            raise DeliveryError(f"telegram unreachable: {self._said(exc)}") from exc

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
                await self._api(chat.chat_id, lambda: self.bot.do_api_request("editMessageText", api_kwargs={
                    "chat_id": chat.chat_id, "message_id": int(edit_id), "text": body, "parse_mode": parse_mode,
                    "reply_markup": markup}))
                self._remember(chat.chat_id, edit_id, look)
                return edit_id
            reply_parameters = ({"message_id": int(reply.reply_to), "allow_sending_without_reply": True}
                                if reply.reply_to else None)
            async with self._sends.sending(chat.chat_id):
                sent = await self._api(chat.chat_id, lambda: self.bot.do_api_request("sendMessage", api_kwargs={
                    "chat_id": chat.chat_id, "text": body, "parse_mode": parse_mode, "reply_markup": markup,
                    "reply_parameters": reply_parameters,
                    "message_thread_id": int(chat.thread_id) if chat.thread_id else None}))
            message_id = str(sent["message_id"])
            self._remember(chat.chat_id, message_id, look)
            return message_id

        try:
            try:
                return await attempt(text, "HTML" if rich else None)
            except BadRequest as exc:
                if not (rich and "can't parse entities" in exc.message.lower()):
                    raise
                log.info("telegram rejected the markup (%s); sending plain text", exc.message)
                return await attempt(reply.plain or reply.text, None)
        except BadRequest as exc:
            if "message is not modified" in exc.message.lower() and edit_id is not None:
                return edit_id
            raise DeliveryError(f"telegram rejected the message: {self._said(exc)}", retryable=False) from exc

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

    async def reclaim(self, chat: ChatRef, reply: Reply, after: str | None, known: set[str]) -> str | None:
        """The bot's own message after `after` that chatgate has no record of, edited to `reply`
        (`platforms.telegram.reclaim`)."""
        if after is None or not after.isdigit():
            return None
        async with self._sends.alone(chat.chat_id):
            mine = known | {message for (shown_in, message) in self._shown if shown_in == chat.chat_id}
            found = await find_own(lambda candidate, text: self._mark(chat.chat_id, candidate, text), int(after),
                                   mine, chat.thread_id, reply.reply_to)
            if found is not None:
                await self._deliver(chat, reply, found)
            return found

    async def _mark(self, chat_id: str, message_id: str, text: str) -> dict[str, Any]:
        """A message edited to plain `text`, as Telegram answers (not remembered as shown: it may be another
        send's, which its own search is to find)."""
        try:
            return await self._api(chat_id, lambda: self.bot.do_api_request("editMessageText", api_kwargs={
                "chat_id": chat_id, "message_id": int(message_id), "text": text}))
        except BadRequest as exc:
            raise DeliveryError(f"telegram rejected the edit: {self._said(exc)}", retryable=False) from exc

    async def send_file(self, chat: ChatRef, path: Path, caption: str = "") -> str:
        if path.stat().st_size > 50 * 1024 * 1024:  # the Bot API's upload limit
            raise DeliveryError(f"{path.name} is larger than Telegram's 50 MB upload limit", retryable=False)
        content = await asyncio.to_thread(path.read_bytes)
        try:
            async with self._sends.sending(chat.chat_id):
                sent = await self._api(chat.chat_id, lambda: self.bot.send_document(
                    chat.chat_id, InputFile(content, filename=path.name), caption=caption[:1024] or None,
                    message_thread_id=int(chat.thread_id) if chat.thread_id else None))
        except BadRequest as exc:
            raise DeliveryError(f"telegram rejected the file: {self._said(exc)}", retryable=False) from exc
        return str(sent.message_id)

    async def typing(self, chat: ChatRef, active: bool) -> None:
        if not active or self.limits.paused_for(chat.chat_id) > 0:
            return  # Telegram clears the indicator with the next message, or after 5 s
        try:
            await self.bot.send_chat_action(chat.chat_id, "typing",
                                            message_thread_id=int(chat.thread_id) if chat.thread_id else None)
        except TelegramError as exc:
            log.debug("telegram: typing failed: %s", self._said(exc))
