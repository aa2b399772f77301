"""Plain data and pure helpers behind the fake Telegram Bot API server (``telegram.py``).

Nothing here does I/O: recorded calls, messages the bot sent, stored files, error values,
the ``MessageStore`` that renders chats and messages as Bot API objects, UTF-16 length
counting, the automatic entities of an injected message, and a validator that rejects
malformed HTML / MarkdownV2 the way Telegram's parser does.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import itertools
import json
import mimetypes
import posixpath
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

JSON = dict[str, Any]

# Parameters that PTB sends as JSON strings inside a form body; the fake decodes them.
JSON_FIELDS = frozenset({
    "reply_markup", "reply_parameters", "entities", "caption_entities", "commands", "scope",
    "allowed_updates", "link_preview_options", "media", "reaction", "results",
})

DEFAULT_GROUP_ID = -1001
DEFAULT_SUPERGROUP_ID = -1001000001001
MEDIA_METHODS = {"sendDocument": "document", "sendPhoto": "photo", "sendVoice": "voice",
                 "sendAudio": "audio", "sendVideo": "video", "sendAnimation": "animation"}
ACTIONS = frozenset({
    "typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice",
    "upload_document", "choose_sticker", "find_location", "record_video_note", "upload_video_note",
})
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)
CONFLICT = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance "
    "is running"
)
_DEFAULT_DESCRIPTIONS = {
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden: bot was blocked by the user",
    404: "Not Found", 409: CONFLICT, 500: "Internal Server Error", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout",
}


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units, the unit of Telegram's limits and offsets."""
    return len(text.encode("utf-16-le")) // 2


class ApiError(Exception):
    """An error answer: ``{"ok": false, "error_code": status, "description": ...}``."""

    def __init__(self, status: int, description: str | None = None,
                 parameters: JSON | None = None) -> None:
        self.status = status
        self.description = description or _DEFAULT_DESCRIPTIONS.get(status, f"Error {status}")
        self.parameters = parameters
        super().__init__(self.description)

    def body(self) -> JSON:
        """The JSON body Telegram would answer with."""
        out: JSON = {"ok": False, "error_code": self.status, "description": self.description}
        if self.parameters:
            out["parameters"] = self.parameters
        return out


@dataclass(slots=True)
class Fault:
    """A scripted failure consumed by the next ``count`` calls to ``method`` ("*" = any),
    in one chat when ``chat_id`` is set."""

    method: str
    count: int
    error: ApiError | None  # None: drop the connection without an answer
    chat_id: str | None = None
    after: bool = False  # drop (or hold the answer) only after the call took effect (an ambiguous send)
    hold: "asyncio.Event | None" = None  # the call (its answer, with `after`) waits until this is set
    match: "Callable[[Call], bool] | None" = None  # only calls this accepts

    def applies(self, call: "Call") -> bool:
        return self.method in (call.method, "*") and (self.chat_id is None or str(call.get("chat_id")) == self.chat_id) \
            and (self.match is None or self.match(call))


@dataclass(frozen=True, slots=True)
class UploadedFile:
    """One multipart file part of a call."""

    filename: str
    content: bytes
    content_type: str

    @property
    def size(self) -> int:
        """Size in bytes."""
        return len(self.content)


@dataclass(slots=True)
class Call:
    """One API call as the fake received it.

    ``params`` holds scalars as the strings PTB sent ("123", "true") and the JSON fields in
    ``JSON_FIELDS`` decoded into objects. ``status`` is 0 while the call is still open
    (a long poll), then the HTTP status answered; ``result`` is the ``result`` on success.
    """

    method: str
    params: JSON
    time: float
    files: dict[str, UploadedFile] = field(default_factory=dict)
    status: int = 0
    result: Any = None
    description: str | None = None

    @property
    def ok(self) -> bool:
        """True once the call was answered with 200."""
        return self.status == 200

    def get(self, name: str, default: Any = None) -> Any:
        """A parameter as sent (decoded for JSON fields)."""
        return self.params.get(name, default)

    def as_int(self, name: str, default: int | None = None) -> int | None:
        """A parameter converted to ``int`` (``default`` when absent)."""
        value = self.params.get(name)
        return default if value is None or value == "" else int(value)

    def as_bool(self, name: str, default: bool = False) -> bool:
        """A parameter converted to ``bool`` ("true"/"1" are true)."""
        value = self.params.get(name)
        return default if value is None else str(value).lower() in ("true", "1")

    def __repr__(self) -> str:
        shown = {k: (v if len(repr(v)) < 60 else repr(v)[:57] + "...")
                 for k, v in self.params.items()}
        return f"Call({self.method} {shown} -> {self.status or 'open'})"


@dataclass(slots=True)
class SentMessage:
    """The current state of one message the bot sent (edits applied).

    ``versions`` keeps every text the message had, oldest first; ``media`` is "document",
    "photo", ... for file messages, with ``file_name``/``file_bytes``/``caption``.
    """

    chat_id: int
    message_id: int
    text: str | None
    date: int
    parse_mode: str | None = None
    entities: list[JSON] | None = None
    reply_markup: JSON | None = None
    message_thread_id: int | None = None
    reply_to_message_id: int | None = None
    media: str | None = None
    file_id: str | None = None
    file_name: str | None = None
    file_bytes: bytes | None = None
    caption: str | None = None
    edit_date: int | None = None
    deleted: bool = False
    versions: list[str] = field(default_factory=list)


@dataclass(slots=True)
class StoredFile:
    """A file that ``getFile`` knows and ``/file/bot<token>/<path>`` serves."""

    file_id: str
    content: bytes
    file_path: str
    file_unique_id: str

    def to_dict(self) -> JSON:
        """The ``File`` object of the Bot API."""
        return {"file_id": self.file_id, "file_unique_id": self.file_unique_id,
                "file_size": len(self.content), "file_path": self.file_path}


def decode_params(raw: dict[str, Any]) -> JSON:
    """Decode JSON fields; scalars from JSON bodies become the strings a form would carry."""
    out: JSON = {}
    for key, value in raw.items():
        if key in JSON_FIELDS and isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise ApiError(400, f"Bad Request: can't parse {key} JSON object") from None
        elif isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, int | float):
            value = str(value)
        elif isinstance(value, dict | list) and key not in JSON_FIELDS:
            value = json.dumps(value)
        out[key] = value
    return out


def auto_entities(text: str, bot_username: str) -> list[JSON]:
    """The entities Telegram adds itself: a leading ``/command`` and ``@bot`` mentions."""
    entities: list[JSON] = []
    command_end = 0
    if text.startswith("/"):
        command = text.split(maxsplit=1)[0]
        command_end = len(command)
        entities.append({"type": "bot_command", "offset": 0, "length": utf16_len(command)})
    mention = "@" + bot_username
    for match in re.finditer(re.escape(mention) + r"\b", text, flags=re.IGNORECASE):
        if match.start() >= command_end:
            entities.append({"type": "mention", "offset": utf16_len(text[: match.start()]),
                             "length": utf16_len(mention)})
    return entities


_HTML_TAGS = frozenset({
    "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a",
    "code", "pre", "blockquote", "tg-emoji",
})
_TAG_RE = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)(\s[^<>]*)?>")
_MDV2_RESERVED = ".!-=+#{}()|>"


def check_markup(text: str, parse_mode: str | None) -> tuple[str | None, int]:
    """Validate ``text`` for ``parse_mode``; return (error description or None, visible length).

    HTML follows Telegram's rules (known tags only, properly nested and closed, a bare ``<`` is
    an error, unknown ``&...;`` stays literal) and the length is that of the rendered text.
    MarkdownV2 only checks the reserved characters outside code and link targets and counts the
    raw text without escapes. Other modes are counted raw.
    """
    mode = (parse_mode or "").lower()
    if mode == "html":
        return _check_html(text)
    if mode == "markdownv2":
        return _check_markdown_v2(text)
    return None, utf16_len(text)


def validate_text(text: str, parse_mode: str | None, limit: int, too_long: str, *,
                  allow_empty: bool = False, reject: str | None = None,
                  validate: bool = True) -> None:
    """Raise the ``ApiError`` Telegram gives for an empty, unparsable or too long text.

    ``reject``: a marker that makes any text with a ``parse_mode`` unparsable (fault
    injection); ``validate``: whether to run ``check_markup``.
    """
    if not text.strip() and not allow_empty:
        raise ApiError(400, "Bad Request: message text is empty")
    if parse_mode and reject and reject in text:
        offset = len(text[: text.index(reject)].encode())
        raise ApiError(400, "Bad Request: can't parse entities: Can't find end of the entity "
                            f"starting at byte offset {offset}")
    error, visible = check_markup(text, parse_mode) if validate else (None, utf16_len(text))
    if error:
        raise ApiError(400, error)
    if visible == 0 and not allow_empty:
        raise ApiError(400, "Bad Request: message text is empty")
    if visible > limit:
        raise ApiError(400, too_long)


def _error(detail: str) -> str:
    return f"Bad Request: can't parse entities: {detail}"


def _check_html(text: str) -> tuple[str | None, int]:
    stack: list[str] = []
    visible: list[str] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char == "<":
            offset = len(text[:pos].encode())
            match = _TAG_RE.match(text, pos)
            if match is None:
                word = re.match(r"</?([^\s>]*)", text[pos:])
                name = word.group(1) if word else ""
                return _error(f'Unsupported start tag "{name}" at byte offset {offset}'), 0
            closing, name = match.group(1) == "/", match.group(2).lower()
            if name not in _HTML_TAGS:
                kind = "end" if closing else "start"
                return _error(f'Unsupported {kind} tag "{name}" at byte offset {offset}'), 0
            if not closing:
                stack.append(name)
            elif not stack:
                return _error(f"Unexpected end tag at byte offset {offset}"), 0
            elif stack[-1] != name:
                return _error(f'Unmatched end tag at byte offset {offset}, expected '
                              f'"</{stack[-1]}>", found "</{name}>"'), 0
            else:
                stack.pop()
            pos = match.end()
            continue
        if char == "&":
            entity = re.match(r"&(lt|gt|amp|quot|#\d+|#x[0-9a-fA-F]+);", text[pos:])
            if entity:
                visible.append(html.unescape(entity.group(0)))
                pos += len(entity.group(0))
                continue
        visible.append(char)
        pos += 1
    if stack:
        return _error(f'Can\'t find end tag corresponding to start tag "{stack[-1]}"'), 0
    return None, utf16_len("".join(visible))


def _check_markdown_v2(text: str) -> tuple[str | None, int]:
    pos, escapes = 0, 0
    while pos < len(text):
        char = text[pos]
        if char == "\\":
            pos, escapes = pos + 2, escapes + 1
            continue
        for fence, name in (("```", "Pre"), ("`", "Code")):
            if text.startswith(fence, pos):
                end = text.find(fence, pos + len(fence))
                if end < 0:
                    offset = len(text[:pos].encode())
                    return _error(f"Can't find end of {name} entity at byte offset {offset}"), 0
                pos = end + len(fence)
                break
        else:
            if text.startswith("](", pos):
                end = text.find(")", pos + 2)
                pos = len(text) if end < 0 else end + 1
                continue
            at_line_start = pos == 0 or text[pos - 1] == "\n"
            if text.startswith("||", pos):
                pos += 2
                continue
            if char in _MDV2_RESERVED and not (char == ">" and at_line_start):
                return _error(f"Character '{char}' is reserved and must be escaped with the "
                              "preceding '\\'"), 0
            pos += 1
    return None, utf16_len(text) - escapes


FileArg = bool | bytes | str


def now() -> int:
    """Telegram's ``date``: Unix time in whole seconds."""
    return int(time.time())


class MessageStore:
    """Chats, every known message, the bot's sent messages and files, as Bot API objects."""

    def __init__(self, bot_user: JSON) -> None:
        self.bot_user = bot_user
        self.chats: dict[int, JSON] = {}
        self.files: dict[str, StoredFile] = {}
        self.messages: dict[tuple[int, int], JSON | SentMessage] = {}
        self.sent: dict[int, list[SentMessage]] = {}
        self._last_ids: dict[int, int] = {}
        self._counter = itertools.count(1)

    def new_id(self) -> int:
        """A fresh number for file and query ids."""
        return next(self._counter)

    def register_chat(self, chat_id: int, chat_type: str, user: JSON, title: str,
                      forum: bool = False) -> JSON:
        """The chat object for ``chat_id``, created on first sight."""
        chat = self.chats.get(chat_id)
        if chat is None:
            chat = {"id": chat_id, "type": chat_type}
            if chat_type == "private":
                chat.update({k: user[k] for k in ("first_name", "username") if k in user})
            else:
                chat["title"] = title
            self.chats[chat_id] = chat
        if forum:
            chat["is_forum"] = True
        return chat

    def chat(self, chat_id: int) -> JSON:
        """The chat object, made up (private if positive, else group) when unknown."""
        if chat_id not in self.chats:
            kind = "private" if chat_id > 0 else "group"
            self.register_chat(chat_id, kind, {"first_name": "User"}, "Test group")
        return self.chats[chat_id]

    def next_message_id(self, chat_id: int) -> int:
        """Message ids increase per chat, shared by people and the bot."""
        self._last_ids[chat_id] = self._last_ids.get(chat_id, 0) + 1
        return self._last_ids[chat_id]

    def index(self, msg: JSON) -> None:
        """Remember a message (and its chat) that came in an update."""
        chat = msg.get("chat") or {}
        if "id" in chat and "message_id" in msg:
            self.chats.setdefault(chat["id"], chat)
            self.messages[(chat["id"], msg["message_id"])] = msg
            self._last_ids[chat["id"]] = max(self._last_ids.get(chat["id"], 0), msg["message_id"])

    def add_sent(self, chat_id: int, **fields: Any) -> SentMessage:
        """Record a new message of the bot."""
        self.chat(chat_id)
        sent = SentMessage(chat_id, self.next_message_id(chat_id), date=now(), **fields)
        self.sent.setdefault(chat_id, []).append(sent)
        self.messages[(chat_id, sent.message_id)] = sent
        return sent

    def chat_id_of(self, call: Call) -> int:
        """The ``chat_id`` of a call as a number (``@username`` of a known chat works too)."""
        value = call.get("chat_id")
        if value in (None, ""):
            raise ApiError(400, "Bad Request: chat_id is empty")
        try:
            return int(value)
        except ValueError:
            for chat_id, chat in self.chats.items():
                if "@" + str(chat.get("username")) == value:
                    return chat_id
            raise ApiError(400, "Bad Request: chat not found") from None

    def find_sent(self, call: Call, not_found: str) -> SentMessage | None:
        """The bot message a call edits; None for inline messages (not tracked)."""
        if call.get("inline_message_id"):
            return None
        found = self.messages.get((self.chat_id_of(call), call.as_int("message_id") or 0))
        if found is None:
            raise ApiError(400, not_found)
        if not isinstance(found, SentMessage):
            raise ApiError(400, "Bad Request: message can't be edited")
        return found

    def new_sent(self, chat_id: int, call: Call, **fields: Any) -> SentMessage:
        """Record what a send call created: thread, reply, markup and entities from ``call``."""
        reply_to, thread = self._reply_target(call, chat_id), call.as_int("message_thread_id")
        if thread is None and reply_to is not None:  # a reply goes into the replied topic
            replied = self.messages.get((chat_id, reply_to))
            if isinstance(replied, dict) and replied.get("is_topic_message"):
                thread = replied.get("message_thread_id")
        return self.add_sent(
            chat_id, parse_mode=call.get("parse_mode"),
            entities=call.get("entities") or call.get("caption_entities"),
            reply_markup=call.get("reply_markup"), message_thread_id=thread,
            reply_to_message_id=reply_to, **fields)

    def _reply_target(self, call: Call, chat_id: int) -> int | None:
        params = call.get("reply_parameters")
        allow = call.as_bool("allow_sending_without_reply")
        message_id = call.as_int("reply_to_message_id")
        if isinstance(params, dict):
            message_id = params.get("message_id")
            allow = bool(params.get("allow_sending_without_reply", allow))
        if message_id is None:
            return None
        if (chat_id, int(message_id)) not in self.messages:
            if allow:
                return None
            raise ApiError(400, "Bad Request: message to be replied not found")
        return int(message_id)

    def message_dict(self, chat_id: int, message_id: int) -> JSON:
        """A known message as a Bot API object, without its own ``reply_to_message``."""
        found = self.messages.get((chat_id, message_id))
        if found is None:
            raise ValueError(f"no message {message_id} in chat {chat_id}")
        if isinstance(found, SentMessage):
            return self.bot_message_dict(found, nested=True)
        return {k: v for k, v in found.items() if k != "reply_to_message"}

    def last_bot_message(self, chat_id: int, thread_id: int | None) -> JSON:
        """The bot's latest live message in the chat/thread, or a made-up earlier one."""
        for sent in reversed(self.sent.get(chat_id, [])):
            if not sent.deleted and thread_id in (None, sent.message_thread_id):
                return self.bot_message_dict(sent, nested=True)
        made_up: JSON = {"message_id": self.next_message_id(chat_id), "from": self.bot_user,
                         "chat": self.chat(chat_id), "date": now(),
                         "text": "(earlier bot message)"}
        if thread_id is not None:
            made_up["message_thread_id"] = thread_id
        self.index(made_up)
        return made_up

    def bot_message_dict(self, sent: SentMessage, nested: bool = False) -> JSON:
        """The ``Message`` object for one of the bot's messages, as it is now."""
        chat = self.chat(sent.chat_id)
        out: JSON = {"message_id": sent.message_id, "from": self.bot_user, "chat": chat,
                     "date": sent.date}
        if sent.message_thread_id is not None:
            out["message_thread_id"] = sent.message_thread_id
            if chat.get("is_forum"):
                out["is_topic_message"] = True
        if sent.text is not None:
            out["text"] = sent.text
            if sent.entities:
                out["entities"] = sent.entities
        if sent.media and sent.file_id in self.files:
            out.update(media_value(sent.media, self.files[sent.file_id], sent.file_name or ""))
        if sent.caption is not None:
            out["caption"] = sent.caption
        if sent.reply_markup and "inline_keyboard" in sent.reply_markup:
            out["reply_markup"] = sent.reply_markup
        if sent.edit_date is not None:
            out["edit_date"] = sent.edit_date
        if sent.reply_to_message_id is not None and not nested:
            with contextlib.suppress(ValueError):  # unless the replied message was deleted
                out["reply_to_message"] = self.message_dict(sent.chat_id, sent.reply_to_message_id)
        return out

    def add_file(self, file_id: str, content: bytes, file_path: str | None = None) -> StoredFile:
        """Make a file known to ``getFile`` and downloadable by its path."""
        path = file_path or f"documents/file_{self.new_id()}"
        stored = StoredFile(file_id, content, path, f"U{file_id}"[:32])
        self.files[file_id] = stored
        return stored

    def file_for(self, arg: FileArg | tuple[str, bytes], folder: str, ext: str) -> StoredFile:
        """A file for an injected message: a known file id, (name, bytes), bytes, or True."""
        if isinstance(arg, str):
            return self.files[arg]
        n = self.new_id()
        if isinstance(arg, tuple):
            return self.add_file(f"file{n}", arg[1], f"{folder}/{arg[0]}")
        content = arg if isinstance(arg, bytes) else f"fake {folder} {n}".encode()
        return self.add_file(f"file{n}", content, f"{folder}/file_{n}.{ext}")

    def media_for(self, photo: FileArg, document: tuple[str, bytes] | str | None,
                  voice: FileArg) -> JSON:
        """The media fields of an injected message (photo has a thumbnail and a full size)."""
        if photo:
            thumb = media_value("photo", self.file_for(True, "photos", "jpg"), "", (90, 90))
            full = media_value("photo", self.file_for(photo, "photos", "jpg"), "")
            return {"photo": thumb["photo"] + full["photo"]}
        if document is not None:
            doc = self.file_for(document, "documents", "bin")
            return media_value("document", doc, posixpath.basename(doc.file_path))
        if voice:
            return media_value("voice", self.file_for(voice, "voice", "oga"), "")
        return {}


def media_value(kind: str, stored: StoredFile, name: str,
                size: tuple[int, int] = (800, 600)) -> JSON:
    """The Bot API field for a file message: ``{"document": {...}}``, ``{"photo": [...]}``."""
    base: JSON = {"file_id": stored.file_id, "file_unique_id": stored.file_unique_id,
                  "file_size": len(stored.content)}
    if kind == "photo":
        return {"photo": [{**base, "width": size[0], "height": size[1]}]}
    if kind in ("voice", "audio"):
        base.update(duration=1, mime_type="audio/ogg" if kind == "voice" else "audio/mpeg")
    if kind in ("video", "animation"):
        base.update(width=640, height=480, duration=1)
    if kind != "voice" and name:
        base["file_name"] = name
        base["mime_type"] = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return {kind: base}
