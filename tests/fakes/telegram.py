"""A fake Telegram Bot API server for tests: in-process aiohttp on a loopback port.

The real python-telegram-bot client talks to it over a socket::

    async with FakeTelegram(token="123:ABC") as tg:
        app = (Application.builder().token(tg.token).base_url(f"{tg.url}/bot")
               .base_file_url(f"{tg.url}/file/bot").build())
        tg.user_message("hello")
        [call] = await tg.wait_for("sendMessage")

It records every call (``calls``, ``wait_for``), keeps the state of what the bot sent
(``sent_messages``), injects updates (``user_message``, ``callback_query``, ``inject``), serves
files, answers long polls, and injects faults (``fail_next``, ``drop_next``, ``conflict``).
Plain data and the markup validator live in ``telegram_objects.py``.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
from collections.abc import Callable, Coroutine
from typing import Any, Literal

import aiohttp
from aiohttp import web

from tests.fakes.base import RecordingFake
from tests.fakes.telegram_objects import (
    ACTIONS,
    CONFLICT,
    DEFAULT_GROUP_ID,
    DEFAULT_SUPERGROUP_ID,
    JSON,
    MEDIA_METHODS,
    NOT_MODIFIED,
    ApiError,
    Call,
    Fault,
    FileArg,
    MessageStore,
    SentMessage,
    StoredFile,
    UploadedFile,
    auto_entities,
    decode_params,
    now,
    utf16_len,
    validate_text,
)

__all__ = ["FakeTelegram", "Call", "SentMessage", "StoredFile", "UploadedFile", "utf16_len",
           "DEFAULT_GROUP_ID", "DEFAULT_SUPERGROUP_ID"]

Handler = Callable[[Call], Coroutine[Any, Any, Any]]


def _chat(chat_id: int | None) -> str | None:
    return None if chat_id is None else str(chat_id)


class FakeTelegram(RecordingFake):
    """The Bot API of one bot, with recorded calls, injectable updates and faults."""

    def __init__(self, token: str = "123:ABC", bot_username: str = "chatgate_bot",
                 bot_id: int = 123, *, port: int = 0, validate_markup: bool = True) -> None:
        self.token, self.bot_username, self.bot_id, self._port = token, bot_username, bot_id, port
        self.bot_user: JSON = {"id": bot_id, "is_bot": True, "first_name": "Chatgate",
                               "username": bot_username}
        self.calls: list[Call] = []
        self.conflict = False
        self.reject_markup_containing: str | None = None
        self.validate_markup = validate_markup
        self.webhook_url: str | None = None
        self.webhook_secret: str | None = None
        self.store = MessageStore(self.bot_user)
        self.chats, self.files = self.store.chats, self.store.files
        self._commands: dict[tuple[str, str], list[JSON]] = {}
        self._faults: list[Fault] = []
        self._pending: list[tuple[JSON, bool]] = []  # (update, forced re-delivery)
        self._next_update_id = 100_000
        self._open_queries: set[str] = set()
        self._cond = asyncio.Condition()
        self._wake = asyncio.Event()
        self._poll_generation = 0
        self._closing = False
        self._runner: web.AppRunner | None = None
        self._url: str | None = None
        self._handlers: dict[str, Handler] = {
            "getMe": self._get_me,
            "setWebhook": self._set_webhook, "deleteWebhook": self._delete_webhook,
            "getWebhookInfo": self._get_webhook_info, "sendMessage": self._send_message,
            "editMessageText": self._edit_text, "editMessageReplyMarkup": self._edit_markup,
            "deleteMessage": self._delete_message, "sendChatAction": self._send_chat_action,
            "answerCallbackQuery": self._answer_callback, "setMyCommands": self._set_commands,
            "getMyCommands": self._get_commands, "deleteMyCommands": self._delete_commands,
            "getFile": self._get_file, "getChat": self._get_chat,
            "setMessageReaction": self._true,
            **{name: self._send_media for name in MEDIA_METHODS},
        }
        self._canonical = {name.lower(): name for name in [*self._handlers, "getUpdates"]}

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Listen on 127.0.0.1 (a free port unless one was given)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        await self._listen(app)

    async def stop(self) -> None:
        """Answer open long polls with no updates and close the server."""
        self._closing = True
        self._wake_pollers()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ----------------------------------------------------------------- inspection

    def sent_messages(self, chat_id: int | None = None, *,
                      include_deleted: bool = False) -> list[SentMessage]:
        """The bot's messages in ``chat_id`` (every chat if None) as they are now."""
        chats = [chat_id] if chat_id is not None else list(self.store.sent)
        return [m for c in chats for m in self.store.sent.get(c, [])
                if include_deleted or not m.deleted]

    @property
    def commands(self) -> list[JSON]:
        """The commands set for the default scope and no language."""
        return self._commands.get(("default", ""), [])

    @property
    def pending_updates(self) -> list[JSON]:
        """Updates not yet confirmed by an ``offset``."""
        return [u for u, _ in self._pending]

    # ----------------------------------------------------------------- faults

    def fail_next(self, method: str, status: int = 429, retry_after: int | None = 1,
                  description: str | None = None, count: int = 1, chat_id: int | None = None) -> None:
        """Answer the next ``count`` calls of ``method`` ("*" = any) with an error (in one chat if given)."""
        params = None
        if status == 429:
            retry_after = retry_after or 1
            description = description or f"Too Many Requests: retry after {retry_after}"
            params = {"retry_after": retry_after}
        self._faults.append(Fault(method, count, ApiError(status, description, params), _chat(chat_id)))

    def drop_next(self, method: str, count: int = 1, *, chat_id: int | None = None,
                  after_processing: bool = False, match: Callable[[Call], bool] | None = None) -> None:
        """Close the connection of the next ``count`` calls of ``method`` without an answer;
        ``after_processing``: only after the call took effect (the client cannot know it did)."""
        self._faults.append(Fault(method, count, None, _chat(chat_id), after=after_processing, match=match))

    def hold_next(self, method: str, count: int = 1, *, chat_id: int | None = None,
                  match: Callable[[Call], bool] | None = None, after_processing: bool = False) -> asyncio.Event:
        """Keep the next ``count`` calls of ``method`` (that ``match`` accepts) waiting until the returned
        event is set; a held call whose client goes away never takes effect. ``after_processing``: the
        call takes effect first (the message is made) and only its answer waits (status -3); a client
        that goes away meanwhile never learns the message's id."""
        release = asyncio.Event()
        self._faults.append(Fault(method, count, None, _chat(chat_id), hold=release, match=match,
                                  after=after_processing))
        return release

    # ----------------------------------------------------------------- injecting updates

    def inject(self, update: JSON) -> JSON:
        """Queue a raw update; an ``update_id`` is assigned unless present.

        Injecting an update whose id was already used re-delivers it even past the confirmed
        offset (what a restart without confirmation would do), exactly once.
        """
        forced = False
        if update.get("update_id") is None:
            update["update_id"] = self._next_update_id
        else:
            forced = update["update_id"] < self._next_update_id
        self._next_update_id = max(self._next_update_id, update["update_id"] + 1)
        for key in ("message", "edited_message", "channel_post", "business_message"):
            if isinstance(update.get(key), dict):
                self.store.index(update[key])
        self._pending.append((update, forced))
        self._pending.sort(key=lambda entry: entry[0]["update_id"])
        self._wake_pollers()
        return update

    def user_message(
        self, text: str = "", *, chat_id: int | None = None, user_id: int = 1001,
        first_name: str = "Ann", username: str | None = "ann",
        chat_type: Literal["private", "group", "supergroup"] = "private",
        message_thread_id: int | None = None, reply_to_bot: bool = False,
        reply_to: int | None = None, entities: list[JSON] | None = None, photo: FileArg = False,
        document: tuple[str, bytes] | str | None = None, voice: FileArg = False,
        caption: str | None = None, update_id: int | None = None, message_id: int | None = None,
        chat_title: str = "Test group", topic_root_reply: bool = True,
    ) -> JSON:
        """Inject a message a person sent; returns the update.

        ``chat_id`` defaults to ``user_id`` in private chats, else ``DEFAULT_GROUP_ID`` /
        ``DEFAULT_SUPERGROUP_ID``. Commands and ``@bot`` mentions get entities automatically
        (UTF-16 offsets) unless ``entities`` is given. With media, ``caption`` (or ``text``)
        becomes the caption. ``photo``/``voice``: True (small auto file), bytes, or the id of a
        file from ``add_file``; ``document``: (file_name, bytes) or such a file id.
        ``reply_to_bot`` replies to the bot's latest message in the chat (or a made-up one);
        ``reply_to`` to a given message id. A topic message in a forum that is not a reply gets
        ``reply_to_message`` = the topic's creation message, as Telegram does.
        """
        if chat_id is None:
            chat_id = {"private": user_id, "group": DEFAULT_GROUP_ID}.get(
                chat_type, DEFAULT_SUPERGROUP_ID)
        if (chat_type == "private") != (chat_id > 0):
            raise ValueError(f"chat_id {chat_id} does not fit a {chat_type} chat")
        user: JSON = {"id": user_id, "is_bot": False, "first_name": first_name,
                      "language_code": "en"}
        if username:
            user["username"] = username
        forum = chat_type == "supergroup" and message_thread_id is not None
        chat = self.store.register_chat(chat_id, chat_type, user, chat_title, forum=forum)
        if message_id is None:
            message_id = self.store.next_message_id(chat_id)
        msg: JSON = {"message_id": message_id, "from": user, "chat": chat, "date": now()}
        if message_thread_id is not None:
            msg["message_thread_id"] = message_thread_id
            if chat.get("is_forum"):
                msg["is_topic_message"] = True
        media = self.store.media_for(photo, document, voice)
        body_key, entities_key, body = "text", "entities", text
        if media:
            msg.update(media)
            body_key, entities_key, body = "caption", "caption_entities", caption or text or ""
        if body:
            msg[body_key] = body
            found = entities if entities is not None else auto_entities(body, self.bot_username)
            if found:
                msg[entities_key] = found
        replied: JSON | None = None
        if reply_to is not None:
            replied = self.store.message_dict(chat_id, reply_to)
        elif reply_to_bot:
            replied = self.store.last_bot_message(chat_id, message_thread_id)
        elif message_thread_id is not None and chat.get("is_forum") and topic_root_reply:
            replied = {"message_id": message_thread_id, "from": user, "chat": chat,
                       "date": now(), "message_thread_id": message_thread_id,
                       "is_topic_message": True, "forum_topic_created":
                       {"name": f"Topic {message_thread_id}", "icon_color": 7322096}}
        if replied is not None:
            msg["reply_to_message"] = replied
        update: JSON = {"message": msg}
        if update_id is not None:
            update["update_id"] = update_id
        return self.inject(update)

    def callback_query(self, data: str, *, message_id: int, chat_id: int | None = None,
                       user_id: int = 1001, first_name: str = "Ann",
                       username: str | None = "ann", update_id: int | None = None) -> JSON:
        """Inject a press of an inline button on a message the bot sent; returns the update."""
        chat_id = user_id if chat_id is None else chat_id
        sent = self.store.messages.get((chat_id, message_id))
        if not isinstance(sent, SentMessage):
            raise ValueError(f"the bot sent no message {message_id} to chat {chat_id}")
        user: JSON = {"id": user_id, "is_bot": False, "first_name": first_name}
        if username:
            user["username"] = username
        query_id = str(self.store.new_id() + 4_000_000_000)
        self._open_queries.add(query_id)
        query = {"id": query_id, "from": user, "message": self.store.bot_message_dict(sent),
                 "chat_instance": f"ci{chat_id}", "data": data}
        update: JSON = {"callback_query": query}
        if update_id is not None:
            update["update_id"] = update_id
        return self.inject(update)

    def add_file(self, file_id: str, content: bytes, file_path: str | None = None) -> StoredFile:
        """Make a file known to ``getFile`` and downloadable at ``/file/bot<token>/<path>``."""
        return self.store.add_file(file_id, content, file_path)

    async def push_webhook(self, update: JSON) -> int:
        """POST ``update`` to the registered webhook (with the secret header); the HTTP status."""
        if not self.webhook_url:
            raise RuntimeError("no webhook is set (setWebhook was not called)")
        headers = {"X-Telegram-Bot-Api-Secret-Token": self.webhook_secret} \
            if self.webhook_secret else {}
        async with (aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
                    session.post(self.webhook_url, json=update, headers=headers) as response):
            status = response.status
        if 200 <= status < 300:  # delivered: no longer pending
            self._pending = [e for e in self._pending
                             if e[0].get("update_id") != update.get("update_id")]
        return status

    # ----------------------------------------------------------------- HTTP plumbing

    async def _handle(self, request: web.Request) -> web.Response:
        name = request.match_info["method"]
        call = Call(self._canonical.get(name.lower(), name), {},
                    asyncio.get_running_loop().time())
        self.calls.append(call)
        try:
            try:
                call.params = raw = await self._read_params(request, call)
            except ConnectionResetError:  # the client went away mid-request (a killed gateway)
                raise ApiError(499, "Client Closed Request") from None
            call.params = decode_params(raw)
            if request.match_info["token"] != self.token:
                raise ApiError(401)
            fault = self._take_fault(call)
            if fault is not None and fault.hold is not None and not fault.after:
                call.status, call.description = -2, "held"
                await self._notify()
                while not fault.hold.is_set():
                    if self._closing or request.transport is None or request.transport.is_closing():
                        raise ApiError(499, "Client Closed Request")  # the call never takes effect
                    try:
                        await asyncio.wait_for(fault.hold.wait(), 0.05)
                    except TimeoutError:
                        pass
                fault = None
            if fault is not None and fault.error is None and not fault.after:
                await self._drop(call, request)
            if fault is not None and fault.error is not None:
                raise fault.error
            if call.method == "getUpdates":  # the long poll needs to see the connection
                call.result = await self._get_updates(call, request)
            elif (handler := self._handlers.get(call.method)) is not None:
                call.result = await handler(call)
            else:
                raise ApiError(404)
            if fault is not None and fault.after and fault.hold is not None:
                await self._hold_answer(call, request, fault.hold)
            elif fault is not None and fault.after:
                await self._drop(call, request)
            call.status = 200
            body: JSON = {"ok": True, "result": call.result}
        except ApiError as error:
            call.status, call.description, body = error.status, error.description, error.body()
        await self._notify()
        return web.Response(text=json.dumps(body), status=call.status,
                            content_type="application/json")

    @staticmethod
    async def _read_params(request: web.Request, call: Call) -> dict[str, Any]:
        raw: dict[str, Any] = dict(request.query)
        if request.method != "POST":
            return raw
        if request.content_type == "application/json":
            body = await request.read()
            try:
                raw.update(json.loads(body) if body else {})
            except ValueError:
                raise ApiError(400, "Bad Request: can't parse JSON body") from None
            return raw
        for key, value in (await request.post()).items():
            if isinstance(value, web.FileField):
                call.files[key] = UploadedFile(value.filename, value.file.read(),
                                               value.content_type)
            else:
                raw[key] = value
        return raw

    async def _download(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        call = Call("downloadFile", {"file_path": path}, asyncio.get_running_loop().time())
        self.calls.append(call)
        stored = next((f for f in self.files.values() if f.file_path == path), None)
        call.status = 200 if stored and request.match_info["token"] == self.token else 404
        await self._notify()
        if call.status != 200 or stored is None:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=stored.content, content_type="application/octet-stream")

    @staticmethod
    def _answered(call: Call) -> bool:
        return True  # answered calls, and getUpdates (status 0) as soon as the poll arrives

    def _wake_pollers(self) -> None:
        self._wake.set()
        self._wake = asyncio.Event()

    # ----------------------------------------------------------------- updates & webhook

    async def _get_updates(self, call: Call, request: web.Request) -> list[JSON]:
        if self.conflict:
            raise ApiError(409, CONFLICT)
        if self.webhook_url:
            raise ApiError(409, "Conflict: can't use getUpdates method while webhook is active; "
                                "use deleteWebhook to delete the webhook first")
        offset = call.as_int("offset")
        if offset is not None and offset < 0:
            self._pending = self._pending[offset:]
        elif offset is not None:
            self._pending = [e for e in self._pending if e[1] or e[0]["update_id"] >= offset]
        limit = min(max(call.as_int("limit", 100) or 100, 1), 100)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(call.get("timeout") or 0)
        self._poll_generation += 1
        generation = self._poll_generation
        self._wake_pollers()  # an older open poll is terminated with 409, as Telegram does
        await self._notify()
        while not self._pending and not self._closing and loop.time() < deadline:
            wake = self._wake
            try:
                await asyncio.wait_for(wake.wait(), deadline - loop.time())
            except TimeoutError:
                break
            if request.transport is None or request.transport.is_closing():
                raise ApiError(499, "Client Closed Request")  # the client gave up (cancelled)
            if generation != self._poll_generation:
                raise ApiError(409, CONFLICT)
        batch = self._pending[:limit]
        self._pending = [(u, False) for u, _ in batch] + self._pending[limit:]
        return [u for u, _ in batch]

    async def _set_webhook(self, call: Call) -> bool:
        if not call.get("url"):
            return await self._delete_webhook(call)
        self.webhook_url, self.webhook_secret = call.get("url"), call.get("secret_token")
        if call.as_bool("drop_pending_updates"):
            self._pending.clear()
        return True

    async def _delete_webhook(self, call: Call) -> bool:
        self.webhook_url = self.webhook_secret = None
        if call.as_bool("drop_pending_updates"):
            self._pending.clear()
        return True

    async def _get_webhook_info(self, call: Call) -> JSON:
        return {"url": self.webhook_url or "", "has_custom_certificate": False,
                "pending_update_count": len(self._pending)}

    # ----------------------------------------------------------------- messages

    async def _get_me(self, call: Call) -> JSON:
        return {**self.bot_user, "can_join_groups": True, "can_read_all_group_messages": False,
                "supports_inline_queries": False}

    async def _send_message(self, call: Call) -> JSON:
        chat_id = self.store.chat_id_of(call)
        text = str(call.get("text") or "")
        self._check_text(text, call.get("parse_mode"), 4096, "Bad Request: message is too long")
        sent = self.store.new_sent(chat_id, call, text=text, versions=[text])
        return self.store.bot_message_dict(sent)

    async def _send_media(self, call: Call) -> JSON:
        kind = MEDIA_METHODS[call.method]
        chat_id = self.store.chat_id_of(call)
        caption = call.get("caption")
        if caption:
            self._check_text(caption, call.get("parse_mode"), 1024,
                             "Bad Request: message caption is too long", allow_empty=True)
        upload, known = call.files.get(kind), self.files.get(str(call.get(kind)))
        if upload is not None:
            stored = self.add_file(f"file{self.store.new_id()}", upload.content,
                                   f"{kind}s/{upload.filename}")
        elif known is not None:  # a file id sent again
            stored = known
        else:
            raise ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
        name = upload.filename if upload else posixpath.basename(stored.file_path)
        sent = self.store.new_sent(chat_id, call, text=None, media=kind, file_id=stored.file_id,
                              file_name=name, file_bytes=stored.content, caption=caption)
        return self.store.bot_message_dict(sent)

    async def _edit_text(self, call: Call) -> JSON | bool:
        sent = self.store.find_sent(call, "Bad Request: message to edit not found")
        if sent is None:
            return True
        if sent.text is None:
            raise ApiError(400, "Bad Request: there is no text in the message to edit")
        text, parse_mode = str(call.get("text") or ""), call.get("parse_mode")
        self._check_text(text, parse_mode, 4096, "Bad Request: MESSAGE_TOO_LONG")
        new = (text, parse_mode, call.get("entities"), call.get("reply_markup"))
        if new == (sent.text, sent.parse_mode, sent.entities, sent.reply_markup):
            raise ApiError(400, NOT_MODIFIED)
        sent.text, sent.parse_mode, sent.entities, sent.reply_markup = new
        sent.edit_date = now()
        sent.versions.append(text)
        return self.store.bot_message_dict(sent)

    async def _edit_markup(self, call: Call) -> JSON | bool:
        sent = self.store.find_sent(call, "Bad Request: message to edit not found")
        if sent is None:
            return True
        if call.get("reply_markup") == sent.reply_markup:
            raise ApiError(400, NOT_MODIFIED)
        sent.reply_markup, sent.edit_date = call.get("reply_markup"), now()
        return self.store.bot_message_dict(sent)

    async def _delete_message(self, call: Call) -> bool:
        key = (self.store.chat_id_of(call), call.as_int("message_id") or 0)
        found = self.store.messages.pop(key, None)
        if found is None:
            raise ApiError(400, "Bad Request: message to delete not found")
        if isinstance(found, SentMessage):
            found.deleted = True
        return True

    async def _send_chat_action(self, call: Call) -> bool:
        self.store.chat_id_of(call)
        if call.get("action") not in ACTIONS:
            raise ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _answer_callback(self, call: Call) -> bool:
        query_id = str(call.get("callback_query_id"))
        if query_id not in self._open_queries:
            raise ApiError(400, "Bad Request: query is too old and response timeout expired "
                                "or query ID is invalid")
        self._open_queries.discard(query_id)
        return True

    async def _true(self, call: Call) -> bool:
        return True

    # ----------------------------------------------------------------- commands, files, chats

    @staticmethod
    def _commands_key(call: Call) -> tuple[str, str]:
        scope = call.get("scope")
        name = "default" if not scope or scope == {"type": "default"} else json.dumps(
            scope, sort_keys=True)
        return name, str(call.get("language_code") or "")

    async def _set_commands(self, call: Call) -> bool:
        commands = call.get("commands") or []
        for command in commands:
            name, description = str(command.get("command", "")), command.get("description", "")
            if not (0 < len(name) <= 32 and name.replace("_", "").isalnum() and name.islower()
                    and name.isascii()) or not 0 < len(description) <= 256:
                raise ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
        self._commands[self._commands_key(call)] = commands
        return True

    async def _get_commands(self, call: Call) -> list[JSON]:
        return self._commands.get(self._commands_key(call), [])

    async def _delete_commands(self, call: Call) -> bool:
        self._commands.pop(self._commands_key(call), None)
        return True

    async def _get_file(self, call: Call) -> JSON:
        stored = self.files.get(str(call.get("file_id")))
        if stored is None:
            raise ApiError(400, "Bad Request: invalid file_id")
        return stored.to_dict()

    async def _get_chat(self, call: Call) -> JSON:
        chat_id = self.store.chat_id_of(call)
        if chat_id not in self.chats:
            raise ApiError(400, "Bad Request: chat not found")
        return {**self.chats[chat_id], "accent_color_id": 0, "max_reaction_count": 11,
                "accepted_gift_types": {"unlimited_gifts": False, "limited_gifts": False,
                                        "unique_gifts": False, "premium_subscription": False,
                                        "gifts_from_channels": False}}

    # ----------------------------------------------------------------- state helpers

    def _check_text(self, text: str, parse_mode: str | None, limit: int, too_long: str,
                    allow_empty: bool = False) -> None:
        validate_text(text, parse_mode, limit, too_long, allow_empty=allow_empty,
                      reject=self.reject_markup_containing, validate=self.validate_markup)
