"""Plain data and pure helpers behind the fake Slack (``slack.py``).

Nothing here does I/O: recorded calls and acks, Socket Mode envelopes, messages and files as
Slack renders them, the scopes each Web API method needs, the message/Block Kit limits that
Slack enforces, request signing, the payloads of what people do (events, button clicks, slash
commands), and a ``SlackStore`` holding the workspace (users, channels, messages, files,
ephemerals, statuses, uploads) that also turns each Web API call into its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import mimetypes
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

APP_ID = "A0FAKEAPP"
VERIFICATION_TOKEN = "fake-verification-token"  # the deprecated `token` field of payloads
TEAM_DOMAIN = "fake-team"
DEFAULT_CHANNEL = "C0001"  # "#general", for channel_type="channel"
DEFAULT_GROUP = "G0001"  # a private channel, for channel_type="group"
DEFAULT_MPIM = "G0002"  # a group DM, for channel_type="mpim"
TEXT_LIMIT = 40_000  # chat.postMessage `text`
SECTION_TEXT_LIMIT = 3_000
MAX_BLOCKS = 50

DEFAULT_SCOPES = frozenset({
    "app_mentions:read", "assistant:write", "channels:history", "channels:read", "chat:write",
    "commands", "files:read", "files:write", "groups:history", "groups:read", "im:history",
    "im:read", "im:write", "mpim:history", "mpim:read", "mpim:write", "reactions:write",
    "users:read",
})

_HISTORY = ("channels:history", "groups:history", "im:history", "mpim:history")
# The bot-token scopes a method accepts (any one of them is enough); () = any valid token.
METHOD_SCOPES: dict[str, tuple[str, ...]] = {
    "auth.test": (),
    "chat.postMessage": ("chat:write",), "chat.update": ("chat:write",),
    "chat.delete": ("chat:write",), "chat.postEphemeral": ("chat:write",),
    "conversations.open": ("im:write", "mpim:write", "channels:manage", "groups:write"),
    "conversations.info": ("channels:read", "groups:read", "im:read", "mpim:read"),
    "conversations.history": _HISTORY, "conversations.replies": _HISTORY,
    "users.info": ("users:read",),
    "assistant.threads.setStatus": ("assistant:write", "chat:write"),
    "files.getUploadURLExternal": ("files:write",),
    "files.completeUploadExternal": ("files:write",),
    "reactions.add": ("reactions:write",),
}
APP_TOKEN_METHODS = frozenset({"apps.connections.open"})  # need the xapp- token instead

# Parameters that arrive as JSON strings inside a form body; the fake decodes them.
JSON_FIELDS = frozenset({"blocks", "attachments", "files", "metadata", "loading_messages"})
_CHANNEL_ID = re.compile(r"^[CDG][A-Z0-9]+$")


def _after(ts: str, oldest: str | None) -> bool:
    """A message's `ts` is after `oldest` (exclusive, as Slack's `oldest` is unless `inclusive`)."""
    return oldest is None or float(ts) > float(oldest)


class SlackError(Exception):
    """An error answer: ``{"ok": false, "error": error, **extra}`` with an HTTP status."""

    def __init__(self, error: str, *, status: int = 200, headers: dict[str, str] | None = None,
                 **extra: Any) -> None:
        self.error, self.status, self.headers, self.extra = error, status, headers or {}, extra
        super().__init__(error)

    def body(self) -> JSON:
        """The JSON body Slack would answer with."""
        return {"ok": False, "error": self.error, **self.extra}


@dataclass(frozen=True, slots=True)
class UploadedFile:
    """One multipart file part of a call."""

    filename: str
    content: bytes
    content_type: str


@dataclass(slots=True)
class Call:
    """One request as the fake received it: a Web API method, or one of the fake's own
    endpoints (``"file_upload"``, ``"file_download"``, ``"response_url"``).

    ``params`` merges the query string, form fields and JSON body; the fields in
    ``JSON_FIELDS`` are decoded from JSON strings. ``status`` is the HTTP status answered
    (0 while open, -1 when the connection was dropped, -2 while held); ``result`` is the JSON
    body answered and ``error`` its ``error`` when ``ok`` was false.
    """

    method: str
    params: JSON
    time: float
    token: str | None = None
    files: dict[str, UploadedFile] = field(default_factory=dict)
    status: int = 0
    result: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True once answered with HTTP 200 and ``"ok": true``."""
        return self.status == 200 and isinstance(self.result, dict) and bool(self.result.get("ok"))

    @property
    def http_status(self) -> int:
        """Same as ``status``."""
        return self.status

    def get(self, name: str, default: Any = None) -> Any:
        """A parameter as sent (decoded for JSON fields)."""
        return self.params.get(name, default)

    def as_bool(self, name: str, default: bool = False) -> bool:
        """A parameter as a bool (true, "true", "1" are true)."""
        value = self.params.get(name)
        return default if value is None else str(value).lower() in ("true", "1")

    def __repr__(self) -> str:
        shown = {k: (v if len(repr(v)) < 80 else repr(v)[:77] + "...") for k, v in self.params.items()}
        return f"Call({self.method} {shown} -> {self.status} {self.error or ''})"


@dataclass(slots=True)
class Fault:
    """A scripted failure consumed by the next ``count`` calls to ``method`` ("*" = any),
    in one channel when ``channel`` is set."""

    method: str
    count: int
    error: SlackError | None  # None: drop the connection (or hold the call)
    channel: str | None = None
    after: bool = False  # drop only after the call took effect
    hold: asyncio.Event | None = None
    match: Callable[[Call], bool] | None = None

    def applies(self, call: Call) -> bool:
        channel = call.get("channel") or call.get("channel_id")
        return self.method in (call.method, "*") and self.channel in (None, channel) \
            and (self.match is None or self.match(call))


@dataclass(slots=True)
class Ack:
    """One acknowledgement the app sent over Socket Mode."""

    envelope_id: str
    time: float
    payload: JSON | None  # the optional response payload (slash commands, view submissions)
    retry_attempt: int  # of the envelope when it was acked


@dataclass(slots=True)
class Envelope:
    """An event, interaction or command wrapped for Socket Mode.

    A redelivery reuses the envelope (same ``envelope_id``) with ``retry_attempt`` + 1.
    """

    envelope_id: str
    type: str  # events_api | interactive | slash_commands
    payload: JSON
    accepts_response_payload: bool
    retry_attempt: int = 0
    retry_reason: str = ""
    deliveries: int = 0  # how many times it was sent
    acked: bool = False
    given_up: bool = False  # not acked after the last retry

    def to_message(self) -> JSON:
        """The websocket message."""
        return {"envelope_id": self.envelope_id, "type": self.type, "payload": self.payload,
                "accepts_response_payload": self.accepts_response_payload,
                "retry_attempt": self.retry_attempt, "retry_reason": self.retry_reason}


@dataclass(slots=True)
class StoredFile:
    """A file in the workspace, downloadable at ``url_private`` with the bot token."""

    file_id: str
    name: str
    content: bytes
    user: str
    title: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def mimetype(self) -> str:
        """Guessed from the name."""
        return mimetypes.guess_type(self.name)[0] or "application/octet-stream"

    def to_dict(self, base_url: str, team_id: str) -> JSON:
        """The file object Slack puts in messages and file methods."""
        ext = self.name.rsplit(".", 1)[-1].lower() if "." in self.name else "binary"
        private = f"{base_url}/files-pri/{team_id}-{self.file_id}"
        return {
            "id": self.file_id, "created": self.created, "timestamp": self.created,
            "name": self.name, "title": self.title or self.name, "mimetype": self.mimetype,
            "filetype": ext, "pretty_type": ext.upper(), "user": self.user, "user_team": team_id,
            "editable": False, "size": len(self.content), "mode": "hosted", "is_external": False,
            "external_type": "", "is_public": False, "public_url_shared": False,
            "display_as_bot": False, "username": "",
            "url_private": f"{private}/{self.name}",
            "url_private_download": f"{private}/download/{self.name}",
            "permalink": f"https://{TEAM_DOMAIN}.slack.com/files/{self.user}/{self.file_id}/{self.name}",
            "has_rich_preview": False, "file_access": "visible",
        }


@dataclass(slots=True)
class Message:
    """A message in a channel as it is now: the bot's (``bot_id`` set) or a person's."""

    channel: str
    ts: str
    text: str
    user: str
    bot_id: str | None = None
    blocks: list[JSON] | None = None
    thread_ts: str | None = None
    files: list[StoredFile] = field(default_factory=list)
    subtype: str | None = None
    reply_broadcast: bool = False
    mrkdwn: bool | None = None
    unfurl_links: bool | None = None
    deleted: bool = False
    edited_ts: str | None = None
    versions: list[str] = field(default_factory=list)  # every text it had, first to last
    metadata: JSON | None = None  # chat.postMessage's `metadata` (event_type, event_payload)


@dataclass(slots=True)
class Ephemeral:
    """A chat.postEphemeral (or ephemeral response_url) message: seen by ``user`` only."""

    channel: str
    user: str | None
    text: str
    blocks: list[JSON] | None
    thread_ts: str | None
    message_ts: str


@dataclass(slots=True)
class Status:
    """One assistant.threads.setStatus call ("" clears the status)."""

    channel_id: str
    thread_ts: str
    status: str
    loading_messages: list[str] | None
    time: float


@dataclass(slots=True)
class Upload:
    """A file uploaded with files.getUploadURLExternal + upload URL + completeUploadExternal."""

    file_id: str
    filename: str
    length: int
    content: bytes | None = None  # None until POSTed to the upload URL
    title: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    initial_comment: str | None = None
    completed: bool = False
    message_ts: str | None = None  # the file-share message, when shared in a channel


@dataclass(slots=True)
class Response:
    """A POST the app made to a ``response_url``."""

    body: JSON
    time: float
    channel: str
    message_ts: str | None  # the message the interaction came from (None for commands)
    user: str

    @property
    def text(self) -> str | None:
        return self.body.get("text")

    @property
    def blocks(self) -> list[JSON] | None:
        return self.body.get("blocks")

    @property
    def replace_original(self) -> bool:
        return str(self.body.get("replace_original", "")).lower() in ("true", "1")

    @property
    def delete_original(self) -> bool:
        return str(self.body.get("delete_original", "")).lower() in ("true", "1")

    @property
    def response_type(self) -> str:
        return str(self.body.get("response_type") or "ephemeral")


def signature(secret: str, timestamp: str, body: str | bytes) -> str:
    """``v0=`` + HMAC-SHA256(secret, ``v0:{timestamp}:{body}``), Slack's request signature."""
    raw = body.encode() if isinstance(body, str) else body
    digest = hmac.new(secret.encode(), b"v0:" + timestamp.encode() + b":" + raw, hashlib.sha256)
    return "v0=" + digest.hexdigest()


def decode_params(raw: JSON) -> JSON:
    """Decode the JSON-string fields of a form body."""
    out = dict(raw)
    for key in JSON_FIELDS & out.keys():
        if isinstance(out[key], str):
            with contextlib.suppress(ValueError):  # else left as sent; validation reports it
                out[key] = json.loads(out[key])
    return out


def is_channel_id(value: str) -> bool:
    """A well-formed conversation id (C…, D… or G…)."""
    return bool(_CHANNEL_ID.match(value))


def dm_channel(user: str) -> str:
    """The id of the bot's DM with ``user`` (U1001 -> D1001)."""
    return "D" + user[1:]


def _text_of(obj: Any) -> str:
    return str(obj.get("text", "")) if isinstance(obj, dict) else ""


def block_errors(blocks: Any) -> list[str]:
    """The ``invalid_blocks`` messages Slack gives for ``blocks`` (a subset of its schema)."""
    if not isinstance(blocks, list):
        return ["must be an array [json-pointer:/blocks]"]
    errors = []
    if len(blocks) > MAX_BLOCKS:
        errors.append(f"no more than {MAX_BLOCKS} items allowed [json-pointer:/blocks]")
    block_ids: set[str] = set()
    for i, block in enumerate(blocks):
        at = f"/blocks/{i}"
        if not isinstance(block, dict) or not block.get("type"):
            errors.append(f"missing required field: type [json-pointer:{at}]")
            continue
        kind, block_id = block["type"], block.get("block_id")
        if block_id is not None:
            if block_id in block_ids:
                errors.append(f"duplicate block_id [json-pointer:{at}/block_id]")
            block_ids.add(block_id)
        if kind == "section":
            if "text" not in block and "fields" not in block:
                errors.append(f"must provide either text or fields [json-pointer:{at}]")
            if len(_text_of(block.get("text"))) > SECTION_TEXT_LIMIT:
                errors.append(f"must be less than {SECTION_TEXT_LIMIT + 1} characters "
                              f"[json-pointer:{at}/text/text]")
            for j, item in enumerate(block.get("fields") or []):
                if len(_text_of(item)) > 2000:
                    errors.append(f"must be less than 2001 characters [json-pointer:{at}/fields/{j}/text]")
        elif kind == "header" and len(_text_of(block.get("text"))) > 150:
            errors.append(f"must be less than 151 characters [json-pointer:{at}/text/text]")
        elif kind == "actions":
            elements = block.get("elements") or []
            if not 0 < len(elements) <= 25:
                errors.append(f"must have 1 to 25 elements [json-pointer:{at}/elements]")
            action_ids: set[str] = set()
            for j, element in enumerate(elements):
                errors += _element_errors(element, f"{at}/elements/{j}", action_ids)
        elif kind == "context" and not 0 < len(block.get("elements") or []) <= 10:
            errors.append(f"must have 1 to 10 elements [json-pointer:{at}/elements]")
        if kind == "section" and isinstance(block.get("accessory"), dict):
            errors += _element_errors(block["accessory"], f"{at}/accessory", set())
    return errors


def _element_errors(element: Any, at: str, action_ids: set[str]) -> list[str]:
    if not isinstance(element, dict):
        return [f"must be an object [json-pointer:{at}]"]
    errors = []
    action_id = element.get("action_id")
    if action_id is not None:
        if len(str(action_id)) > 255:
            errors.append(f"must be less than 256 characters [json-pointer:{at}/action_id]")
        if action_id in action_ids:
            errors.append(f"duplicate action_id [json-pointer:{at}/action_id]")
        action_ids.add(action_id)
    if element.get("type") == "button":
        if len(_text_of(element.get("text"))) > 75:
            errors.append(f"must be less than 76 characters [json-pointer:{at}/text/text]")
        if len(str(element.get("value", ""))) > 2000:
            errors.append(f"must be less than 2001 characters [json-pointer:{at}/value]")
    return errors


def check_message(text: Any, blocks: Any, attachments: Any = None, *, require: bool = True) -> None:
    """Raise what Slack answers for an over-long text, bad blocks or (``require``) no content."""
    if require and not text and not blocks and not attachments:
        raise SlackError("no_text")
    if text is not None and len(str(text)) > TEXT_LIMIT:
        raise SlackError("msg_too_long")
    if blocks is not None:
        errors = block_errors(blocks)
        if errors:
            raise SlackError("invalid_blocks", errors=errors,
                             response_metadata={"messages": [f"[ERROR] {e}" for e in errors]})


def find_element(blocks: list[JSON] | None, action_id: str) -> tuple[str, JSON] | None:
    """The (block_id, element) carrying ``action_id`` in ``blocks``."""
    for block in blocks or []:
        candidates = list(block.get("elements") or []) if block.get("type") == "actions" else []
        if isinstance(block.get("accessory"), dict):
            candidates.append(block["accessory"])
        for element in candidates:
            if isinstance(element, dict) and element.get("action_id") == action_id:
                return str(block.get("block_id", "")), element
    return None


def rich_text(text: str, mention: str | None = None) -> list[JSON]:
    """The rich_text block Slack clients attach to what a person typed."""
    elements: list[JSON] = []
    if mention:
        elements += [{"type": "user", "user_id": mention}, {"type": "text", "text": " "}]
        text = text.removeprefix(f"<@{mention}> ")
    if text:
        elements.append({"type": "text", "text": text})
    return [{"type": "rich_text", "block_id": "rt" + hashlib.md5(text.encode()).hexdigest()[:5],
             "elements": [{"type": "rich_text_section", "elements": elements}]}]


class SlackStore:
    """The workspace: users, conversations, messages and files, rendered as Slack objects."""

    def __init__(self, team_id: str, bot_user_id: str, bot_id: str) -> None:
        self.team_id, self.bot_user_id, self.bot_id = team_id, bot_user_id, bot_id
        self.users: dict[str, JSON] = {}
        self.channels: dict[str, JSON] = {}
        self.history: dict[str, list[Message]] = {}  # per channel, in ts order
        self.files: dict[str, StoredFile] = {}
        self.ephemerals: list[Ephemeral] = []
        self.statuses: list[Status] = []
        self.uploads: list[Upload] = []
        self.reactions: list[tuple[str, str, str]] = []  # (channel, ts, name)
        self.base_url = ""  # the fake's URL, set when it starts (file URLs point there)
        self._counter = itertools.count(1)
        self._ts_base = int(time.time())
        self.add_user(bot_user_id, "chatgate", is_bot=True)
        self.add_channel(DEFAULT_CHANNEL, "general")

    def new_id(self, prefix: str) -> str:
        """A fresh id like ``F0000007``."""
        return f"{prefix}{next(self._counter):07d}"

    def new_ts(self) -> str:
        """A fresh, increasing message timestamp ("1700000000.000123")."""
        n = next(self._counter)
        return f"{self._ts_base + n // 1_000_000}.{n % 1_000_000:06d}"

    def add_user(self, user_id: str, name: str | None = None, *, real_name: str | None = None,
                 is_bot: bool = False, tz: str = "Europe/London") -> JSON:
        """Register (or return) a user for users.info."""
        if user_id in self.users:
            return self.users[user_id]
        name = name or f"user{user_id[1:].lower()}"
        real_name = real_name or name.title()
        self.users[user_id] = {
            "id": user_id, "team_id": self.team_id, "name": name, "deleted": False,
            "real_name": real_name, "tz": tz, "tz_offset": 0, "is_bot": is_bot,
            "is_admin": False, "is_app_user": False, "updated": 1700000000,
            "profile": {"real_name": real_name, "display_name": name, "team": self.team_id,
                        "email": None if is_bot else f"{name}@example.com",
                        **({"bot_id": self.bot_id} if is_bot else {})},
        }
        return self.users[user_id]

    def add_channel(self, channel_id: str, name: str | None = None, *, user: str | None = None) -> JSON:
        """Register (or return) a conversation; the kind follows the id (C/D/G) and ``user``."""
        if channel_id in self.channels:
            return self.channels[channel_id]
        is_im, is_group = channel_id.startswith("D"), channel_id.startswith("G")
        is_mpim = is_group and channel_id == DEFAULT_MPIM
        info: JSON = {"id": channel_id, "created": 1700000000, "is_archived": False,
                      "is_im": is_im, "is_mpim": is_mpim, "is_private": is_im or is_group,
                      "is_channel": not (is_im or is_group), "is_group": is_group and not is_mpim,
                      "is_member": True, "context_team_id": self.team_id}
        if is_im:
            info.update(user=user or "U" + channel_id[1:], is_open=True)
        else:
            info.update(name=name or channel_id.lower(), is_general=channel_id == DEFAULT_CHANNEL,
                        topic={"value": ""}, purpose={"value": ""}, num_members=2)
        self.channels[channel_id] = info
        return info

    def channel_type(self, channel_id: str) -> str:
        """im, mpim, group or channel: the ``channel_type`` of message events."""
        info = self.add_channel(channel_id)
        return "im" if info["is_im"] else "mpim" if info["is_mpim"] else \
            "group" if info["is_private"] else "channel"

    def add(self, message: Message) -> Message:
        """Store a message in its channel."""
        self.add_channel(message.channel)
        self.history.setdefault(message.channel, []).append(message)
        return message

    def find(self, channel: str, ts: str) -> Message | None:
        """The message ``ts`` in ``channel`` (deleted ones too)."""
        return next((m for m in self.history.get(channel, []) if m.ts == ts), None)

    def add_file(self, name: str, content: bytes, user: str, title: str = "") -> StoredFile:
        """Store a file, served at its url_private."""
        stored = StoredFile(self.new_id("F"), name, content, user, title)
        self.files[stored.file_id] = stored
        return stored

    def message_dict(self, message: Message, *, metadata: bool = False) -> JSON:
        """A message as conversations.history and chat.postMessage render it (its `metadata` only when
        asked for: `include_all_metadata`)."""
        out: JSON = {"type": "message", "ts": message.ts, "text": message.text, "user": message.user,
                     "team": self.team_id}
        if message.bot_id:
            out.update(bot_id=message.bot_id, app_id=APP_ID)
            if message.bot_id == self.bot_id:
                out["bot_profile"] = {"id": self.bot_id, "app_id": APP_ID, "name": "chatgate",
                                      "team_id": self.team_id, "deleted": False}
        if message.subtype:
            out["subtype"] = message.subtype
        if message.blocks is not None:
            out["blocks"] = message.blocks
        if message.thread_ts:
            out["thread_ts"] = message.thread_ts
        if message.files:
            out.update(files=[f.to_dict(self.base_url, self.team_id) for f in message.files], upload=False)
        if message.edited_ts:
            out["edited"] = {"user": message.user, "ts": message.edited_ts}
        if metadata and message.metadata:
            out["metadata"] = message.metadata
        replies = [m for m in self.history.get(message.channel, [])
                   if m.thread_ts == message.ts and m.ts != message.ts and not m.deleted]
        if replies:
            out.update(thread_ts=message.ts, reply_count=len(replies), latest_reply=replies[-1].ts)
        return out

    # ---------------------------------------------------------------- read-only Web API answers

    def visible(self, channel: str) -> list[Message]:
        """The messages of ``channel`` that were not deleted."""
        return [m for m in self.history.get(channel, []) if not m.deleted]

    def history_page(self, channel: str, limit: int, oldest: str | None = None, metadata: bool = False) -> JSON:
        """conversations.history: top-level messages (and broadcast replies) after `oldest`, newest first."""
        top = [m for m in self.visible(channel)
               if (not m.thread_ts or m.thread_ts == m.ts or m.reply_broadcast) and _after(m.ts, oldest)]
        newest_first = [self.message_dict(m, metadata=metadata) for m in reversed(top)]
        return {"messages": newest_first[:limit], "has_more": len(newest_first) > limit,
                "pin_count": 0, "response_metadata": {"next_cursor": ""}}

    def replies_page(self, channel: str, ts: str, limit: int, oldest: str | None = None,
                     metadata: bool = False) -> JSON:
        """conversations.replies: the parent, then its replies (after `oldest`), oldest first."""
        thread = [m for m in self.visible(channel) if m.ts == ts or m.thread_ts == ts]
        if not thread:
            raise SlackError("thread_not_found")
        thread = [m for m in thread if m.ts == ts or _after(m.ts, oldest)]
        return {"messages": [self.message_dict(m, metadata=metadata) for m in thread][:limit],
                "has_more": len(thread) > limit, "response_metadata": {"next_cursor": ""}}

    def open_conversation(self, users: list[str], return_im: bool) -> JSON:
        """conversations.open with ``users``: the DM (one user) or the group DM."""
        if not users:
            raise SlackError("users_list_not_supplied")
        for user in users:
            self.add_user(user)
        channel = dm_channel(users[0]) if len(users) == 1 else DEFAULT_MPIM
        already = channel in self.channels
        info = self.add_channel(channel, user=users[0] if len(users) == 1 else None)
        return {"no_op": already, "already_open": already,
                "channel": info if return_im else {"id": channel}}


    # ---------------------------------------------------------------- Web API methods (the call -> result)

    def channel_of(self, call: Call, key: str = "channel") -> str:
        """The conversation a call names: an id, ``#name``, or a user id (the bot's DM with them)."""
        value = str(call.get(key) or "")
        if value.startswith("#"):
            value = next((c for c, i in self.channels.items() if i.get("name") == value[1:]), "")
        elif value[:1] in ("U", "W"):
            value = dm_channel(value)
        if not is_channel_id(value):
            raise SlackError("channel_not_found")
        self.add_channel(value)
        return value

    def _own_message(self, call: Call, verb: str) -> Message:
        message = self.find(self.channel_of(call), str(call.get("ts") or ""))
        if message is None or message.deleted:
            raise SlackError("message_not_found")
        if message.bot_id != self.bot_id:
            raise SlackError(f"cant_{verb}_message")
        return message

    @staticmethod
    def edit(message: Message, text: str, blocks: list[JSON] | None) -> None:
        """Change a message's text, and its blocks when given (else they are kept, as Slack does)."""
        message.text = text
        if blocks is not None:
            message.blocks = blocks
        message.versions.append(text)

    def post_message(self, call: Call) -> JSON:
        """chat.postMessage."""
        channel = self.channel_of(call)
        text, blocks = call.get("text"), call.get("blocks")
        check_message(text, blocks, call.get("attachments"))
        optional = {k: call.as_bool(k) for k in ("mrkdwn", "unfurl_links") if call.get(k) is not None}
        metadata = call.get("metadata")
        if metadata is not None and not (isinstance(metadata, dict) and isinstance(metadata.get("event_type"), str)
                                         and isinstance(metadata.get("event_payload"), dict)):
            raise SlackError("invalid_metadata_format")
        message = self.add(Message(channel, self.new_ts(), str(text or ""), self.bot_user_id, self.bot_id,
                                   blocks, call.get("thread_ts") or None,
                                   reply_broadcast=call.as_bool("reply_broadcast"), metadata=metadata, **optional))
        message.versions.append(message.text)
        return {"channel": channel, "ts": message.ts, "message": self.message_dict(message)}

    def update(self, call: Call) -> JSON:
        """chat.update (only the bot's own messages)."""
        message = self._own_message(call, "update")
        text, blocks = call.get("text"), call.get("blocks")
        check_message(text, blocks, call.get("attachments"))
        self.edit(message, str(text) if text is not None else message.text, blocks)
        message.edited_ts = self.new_ts()
        return {"channel": message.channel, "ts": message.ts, "text": message.text,
                "message": self.message_dict(message)}

    def delete(self, call: Call) -> JSON:
        """chat.delete: the message stays, flagged ``deleted``."""
        message = self._own_message(call, "delete")
        message.deleted = True
        return {"channel": message.channel, "ts": message.ts}

    def post_ephemeral(self, call: Call) -> JSON:
        """chat.postEphemeral."""
        channel, user = self.channel_of(call), str(call.get("user") or "")
        if not user:
            raise SlackError("user_not_found")
        check_message(call.get("text"), call.get("blocks"), call.get("attachments"))
        ephemeral = Ephemeral(channel, user, str(call.get("text") or ""), call.get("blocks"),
                              call.get("thread_ts"), self.new_ts())
        self.ephemerals.append(ephemeral)
        return {"message_ts": ephemeral.message_ts}

    def conversations_open(self, call: Call) -> JSON:
        """conversations.open."""
        if call.get("channel"):
            return {"channel": {"id": self.channel_of(call)}, "already_open": True}
        users = [u for u in str(call.get("users") or "").split(",") if u]
        return self.open_conversation(users, call.as_bool("return_im"))

    def conversations_info(self, call: Call) -> JSON:
        """conversations.info (known conversations only)."""
        channel = str(call.get("channel") or "")
        if channel not in self.channels:
            raise SlackError("channel_not_found")
        return {"channel": self.channels[channel]}

    def conversations_history(self, call: Call) -> JSON:
        """conversations.history."""
        return self.history_page(self.channel_of(call), int(call.get("limit") or 100), call.get("oldest"),
                                 call.as_bool("include_all_metadata"))

    def conversations_replies(self, call: Call) -> JSON:
        """conversations.replies."""
        return self.replies_page(self.channel_of(call), str(call.get("ts") or ""), int(call.get("limit") or 1000),
                                 call.get("oldest"), call.as_bool("include_all_metadata"))

    def users_info(self, call: Call) -> JSON:
        """users.info."""
        user = self.users.get(str(call.get("user") or ""))
        if user is None:
            raise SlackError("user_not_found")
        return {"user": user}

    def set_status(self, call: Call) -> JSON:
        """assistant.threads.setStatus."""
        channel, thread_ts = self.channel_of(call, "channel_id"), call.get("thread_ts")
        if not thread_ts or call.get("status") is None:
            raise SlackError("invalid_arguments")
        self.statuses.append(Status(channel, str(thread_ts), str(call.get("status")),
                                    call.get("loading_messages"), call.time))
        return {}

    def get_upload_url(self, call: Call) -> JSON:
        """files.getUploadURLExternal: an upload URL on the fake."""
        filename, length = call.get("filename"), call.get("length")
        if not filename or length is None or not str(length).isdigit():
            raise SlackError("invalid_arguments")
        upload = Upload(self.new_id("F"), str(filename), int(length))
        self.uploads.append(upload)
        return {"upload_url": f"{self.base_url}/upload/v1/{upload.file_id}", "file_id": upload.file_id}

    def complete_upload(self, call: Call) -> JSON:
        """files.completeUploadExternal: the files become downloadable; shared in a channel,
        they make one message from the bot (``initial_comment`` as its text)."""
        items = call.get("files")
        if not isinstance(items, list) or not items:
            raise SlackError("invalid_arguments")
        channel = self.channel_of(call, "channel_id") if call.get("channel_id") else None
        if channel is None and call.get("channels"):
            call.params["channel"] = str(call.get("channels")).split(",")[0]
            channel = self.channel_of(call)
        by_id = {u.file_id: u for u in self.uploads}
        chosen = [(by_id.get(str(item.get("id"))), item) for item in items if isinstance(item, dict)]
        pairs = [(u, item) for u, item in chosen if u is not None and not u.completed and u.content is not None]
        if len(pairs) != len(items):
            raise SlackError("file_not_found")
        done: list[StoredFile] = []
        for upload, item in pairs:
            upload.title, upload.completed = item.get("title") or upload.filename, True
            upload.channel, upload.thread_ts = channel, call.get("thread_ts")
            upload.initial_comment = call.get("initial_comment")
            stored = StoredFile(upload.file_id, upload.filename, upload.content or b"", self.bot_user_id,
                                upload.title)
            self.files[stored.file_id] = stored
            done.append(stored)
        if channel is not None:
            message = self.add(Message(channel, self.new_ts(), str(call.get("initial_comment") or ""),
                                       self.bot_user_id, self.bot_id, thread_ts=call.get("thread_ts"),
                                       files=done))
            for upload, _ in pairs:
                upload.message_ts = message.ts
        return {"files": [f.to_dict(self.base_url, self.team_id) for f in done]}

    def reactions_add(self, call: Call) -> JSON:
        """reactions.add."""
        channel, ts = self.channel_of(call), str(call.get("timestamp") or "")
        name = str(call.get("name") or "")
        message = self.find(channel, ts)
        if message is None or message.deleted:
            raise SlackError("message_not_found")
        if not name:
            raise SlackError("invalid_name")
        if (channel, ts, name) in self.reactions:
            raise SlackError("already_reacted")
        self.reactions.append((channel, ts, name))
        return {}

# -------------------------------------------------------------------- payloads people cause

def event_callback(event: JSON, team_id: str, bot_user_id: str, event_id: str) -> JSON:
    """The Events API envelope of ``event`` (the body of an HTTP push, the socket payload)."""
    return {
        "token": VERIFICATION_TOKEN, "team_id": team_id, "context_team_id": team_id,
        "context_enterprise_id": None, "api_app_id": APP_ID, "event": event,
        "type": "event_callback", "event_id": event_id, "event_time": int(time.time()),
        "is_ext_shared_channel": False,
        "authorizations": [{"enterprise_id": None, "team_id": team_id, "user_id": bot_user_id,
                            "is_bot": True, "is_enterprise_install": False}],
    }


def message_fields(store: SlackStore, message: Message) -> JSON:
    """The fields a ``message`` event and its ``app_mention`` share."""
    out: JSON = {"user": message.user, "text": message.text, "ts": message.ts,
                 "team": store.team_id, "blocks": message.blocks, "channel": message.channel,
                 "event_ts": message.ts}
    if message.bot_id is None:
        out["client_msg_id"] = hashlib.md5(f"{message.channel}{message.ts}".encode()).hexdigest()
    else:
        out["bot_id"] = message.bot_id
    if message.thread_ts:
        parent = store.find(message.channel, message.thread_ts)
        out.update(thread_ts=message.thread_ts, parent_user_id=parent.user if parent else message.user)
    if message.files:
        out.update(files=[f.to_dict(store.base_url, store.team_id) for f in message.files], upload=False,
                   display_as_bot=False)
    return out


def block_actions(store: SlackStore, message: Message, action: JSON, user: str, *,
                  response_url: str, trigger_id: str) -> JSON:
    """The ``block_actions`` payload of a click on ``action`` in the bot's ``message``."""
    container: JSON = {"type": "message", "message_ts": message.ts, "channel_id": message.channel,
                       "is_ephemeral": False}
    if message.thread_ts:
        container["thread_ts"] = message.thread_ts
    name = store.users[user]["name"]
    return {
        "type": "block_actions",
        "user": {"id": user, "username": name, "name": name, "team_id": store.team_id},
        "api_app_id": APP_ID, "token": VERIFICATION_TOKEN, "container": container,
        "trigger_id": trigger_id, "team": {"id": store.team_id, "domain": TEAM_DOMAIN},
        "enterprise": None, "is_enterprise_install": False,
        "channel": {"id": message.channel,
                    "name": store.channels[message.channel].get("name", "directmessage")},
        "message": store.message_dict(message), "state": {"values": {}},
        "response_url": response_url, "actions": [action],
    }


def slash_command(store: SlackStore, command: str, text: str, user: str, channel: str, *,
                  response_url: str, trigger_id: str) -> JSON:
    """A ``slash_commands`` payload: flat string fields, as the HTTP form sends them."""
    return {
        "token": VERIFICATION_TOKEN, "team_id": store.team_id, "team_domain": TEAM_DOMAIN,
        "channel_id": channel, "channel_name": store.channels[channel].get("name", "directmessage"),
        "user_id": user, "user_name": store.users[user]["name"], "command": command, "text": text,
        "api_app_id": APP_ID, "is_enterprise_install": "false", "response_url": response_url,
        "trigger_id": trigger_id,
    }


def hello(num_connections: int) -> JSON:
    """The first message on a Socket Mode connection."""
    return {"type": "hello", "num_connections": num_connections,
            "debug_info": {"host": "applink-fake", "build_number": 1,
                           "approximate_connection_time": 18060},
            "connection_info": {"app_id": APP_ID}}
