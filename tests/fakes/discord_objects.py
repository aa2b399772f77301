"""Plain data and pure helpers behind the fake Discord server (``discord.py`` in this package).

Nothing here does I/O: ids (snowflakes), the route table, recorded calls, error values, the
guilds and channels the fake knows, the ``MessageStore`` that keeps every message (the bot's as
``SentMessage``, as they are now) and renders them as Discord Message objects, interaction
records, the records of the gateway (sessions, connections, frames, dispatches), and the
validation Discord applies to a message body (2,000 characters, empty messages, embed and
component limits) and to application commands.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import mimetypes
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

JSON = dict[str, Any]

DISCORD_EPOCH_MS = 1_420_070_400_000
DEFAULT_GUILD = 7000
DEFAULT_CHANNEL = 7001
DEFAULT_USER = 1001

# Gateway intents (the bits of IDENTIFY's ``intents``).
GUILDS = 1 << 0
GUILD_MEMBERS = 1 << 1
GUILD_PRESENCES = 1 << 8
GUILD_MESSAGES = 1 << 9
DIRECT_MESSAGES = 1 << 12
MESSAGE_CONTENT = 1 << 15
PRIVILEGED_INTENTS = GUILD_MEMBERS | GUILD_PRESENCES | MESSAGE_CONTENT

# Message flags.
EPHEMERAL = 1 << 6
LOADING = 1 << 7
IS_COMPONENTS_V2 = 1 << 15

# Channel types.
GUILD_TEXT, DM, PUBLIC_THREAD, PRIVATE_THREAD = 0, 1, 11, 12
THREAD_TYPES = (10, PUBLIC_THREAD, PRIVATE_THREAD)

# What the @everyone role allows in the fake's guilds: view, send, send in threads, create
# threads, history, embed, attach, react, external emoji, application commands, manage
# messages/threads.
EVERYONE_PERMISSIONS = "397284863040"
ATTACHMENT_SIZE_LIMIT = 10 * 1024 * 1024

# Every REST route the fake answers, relative to ``/api/v10``; ``Call.route`` is
# ``"<METHOD> <template>"``. Literal segments must come before ``{param}`` ones.
ROUTES: tuple[str, ...] = (
    "GET /users/@me",
    "GET /users/{user_id}",
    "POST /users/@me/channels",
    "GET /oauth2/applications/@me",
    "GET /applications/@me",
    "GET /gateway",
    "GET /gateway/bot",
    "GET /channels/{channel_id}",
    "GET /channels/{channel_id}/messages",
    "POST /channels/{channel_id}/messages",
    "GET /channels/{channel_id}/messages/{message_id}",
    "PATCH /channels/{channel_id}/messages/{message_id}",
    "DELETE /channels/{channel_id}/messages/{message_id}",
    "PUT /channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me",
    "DELETE /channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me",
    "POST /channels/{channel_id}/typing",
    "POST /channels/{channel_id}/messages/{message_id}/threads",
    "POST /channels/{channel_id}/threads",
    "GET /applications/{application_id}/commands",
    "PUT /applications/{application_id}/commands",
    "POST /applications/{application_id}/commands",
    "GET /applications/{application_id}/guilds/{guild_id}/commands",
    "PUT /applications/{application_id}/guilds/{guild_id}/commands",
    "POST /interactions/{interaction_id}/{interaction_token}/callback",
    "POST /webhooks/{application_id}/{interaction_token}",
    "GET /webhooks/{application_id}/{interaction_token}/messages/@original",
    "PATCH /webhooks/{application_id}/{interaction_token}/messages/@original",
    "DELETE /webhooks/{application_id}/{interaction_token}/messages/@original",
    "GET /webhooks/{application_id}/{interaction_token}/messages/{message_id}",
    "PATCH /webhooks/{application_id}/{interaction_token}/messages/{message_id}",
    "DELETE /webhooks/{application_id}/{interaction_token}/messages/{message_id}",
)
ATTACHMENT_ROUTE = "GET /attachments/{channel_id}/{attachment_id}/{filename}"
# Routes that take no ``Authorization: Bot`` header (the interaction token is the credential).
UNAUTHENTICATED_PREFIXES = ("/interactions/", "/webhooks/")

_STATUS_TEXT = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
                405: "Method Not Allowed", 500: "Internal Server Error", 502: "Bad Gateway",
                503: "Service Unavailable", 504: "Gateway Timeout"}


def now_iso() -> str:
    """A Discord timestamp (ISO 8601 with microseconds, UTC)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


class Snowflakes:
    """Strictly increasing ids that encode the current time, as Discord's do."""

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        """A fresh snowflake."""
        stamp = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
        self._last = max(self._last + 1, stamp)
        return self._last


class ApiError(Exception):
    """An error answer: ``{"message": ..., "code": ...}`` (+ ``errors`` for invalid bodies).

    A 429 carries ``retry_after``/``global_`` and is answered with Discord's rate-limit body and
    headers (including ``Via``, without which discord.py assumes a Cloudflare ban).
    """

    def __init__(self, status: int, code: int = 0, message: str | None = None,
                 errors: JSON | None = None, *, retry_after: float | None = None,
                 global_: bool = False, body: JSON | None = None) -> None:
        self.status, self.code = status, code
        self.message = message or f"{status}: {_STATUS_TEXT.get(status, 'Error')}"
        self.errors, self.retry_after, self.global_ = errors, retry_after, global_
        self.custom_body = body
        super().__init__(self.message)

    def body(self) -> JSON:
        """The JSON body Discord would answer with."""
        if self.custom_body is not None:
            return self.custom_body
        if self.status == 429:
            return {"message": "You are being rate limited.",
                    "retry_after": self.retry_after or 1.0, "global": self.global_}
        out: JSON = {"message": self.message, "code": self.code}
        if self.errors:
            out["errors"] = self.errors
        return out


def unknown(kind: str) -> ApiError:
    """Discord's 404 for an unknown channel, message, user, interaction, webhook or command."""
    codes = {"Channel": 10003, "Message": 10008, "User": 10013, "Interaction": 10062,
             "Webhook": 10015, "Application": 10002, "Guild": 10004, "Emoji": 10014}
    # Discord spells this one in lower case: "Unknown interaction"
    return ApiError(404, codes[kind], f"Unknown {kind.lower() if kind == 'Interaction' else kind}")


def field_error(code: str, message: str) -> JSON:
    """One leaf of an ``Invalid Form Body`` error tree."""
    return {"_errors": [{"code": code, "message": message}]}


def invalid_form(errors: JSON) -> ApiError:
    """400 ``{"code": 50035, "message": "Invalid Form Body", "errors": {...}}``."""
    return ApiError(400, 50035, "Invalid Form Body", errors)


@dataclass(slots=True)
class Fault:
    """A scripted failure consumed by the next ``count`` calls of ``route`` ("*" = any)."""

    route: str
    count: int
    error: ApiError | None  # None: drop the connection without an answer (or hold it)
    channel_id: str | None = None
    after: bool = False  # drop only after the call took effect
    hold: asyncio.Event | None = None  # the call waits until this is set
    match: Callable[[Call], bool] | None = None

    def applies(self, call: Call) -> bool:
        """Whether this fault is for ``call``."""
        return (self.route in (call.route, "*")
                and (self.channel_id is None or call.params.get("channel_id") == self.channel_id)
                and (self.match is None or self.match(call)))


@dataclass(frozen=True, slots=True)
class UploadedFile:
    """One ``files[n]`` part of a multipart call."""

    field: str
    filename: str
    content: bytes
    content_type: str

    @property
    def size(self) -> int:
        """Size in bytes."""
        return len(self.content)


@dataclass(slots=True)
class Call:
    """One REST call as the fake received it.

    ``route`` is ``"POST /channels/{channel_id}/messages"`` (the raw path for an unknown route),
    ``params`` the path parameters (strings, as in the URL), ``json`` the JSON body (for multipart
    calls, the ``payload_json`` part), ``files`` the uploaded ``files[n]`` parts. ``status`` is 0
    while the call is open, -1 when its connection was dropped, -2 while it is held, else the HTTP
    status answered; ``result`` is the JSON answered on success, ``error`` the error body.
    """

    method: str
    route: str
    params: dict[str, str]
    query: dict[str, str]
    time: float
    json: Any = None
    files: list[UploadedFile] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    status: int = 0
    result: Any = None
    error: JSON | None = None

    @property
    def ok(self) -> bool:
        """True once answered with a 2xx status."""
        return 200 <= self.status < 300

    def get(self, name: str, default: Any = None) -> Any:
        """A field of the JSON body."""
        return self.json.get(name, default) if isinstance(self.json, dict) else default

    def param(self, name: str) -> int:
        """A numeric path parameter as ``int``."""
        return int(self.params[name])

    def __repr__(self) -> str:
        body = repr(self.json)
        body = body if len(body) < 80 else body[:77] + "..."
        return f"Call({self.route} {self.params} {body} -> {self.status or 'open'})"


@dataclass(slots=True)
class StoredAttachment:
    """A file of a message (a person's upload or the bot's), served at ``url``."""

    id: int
    channel_id: int
    filename: str
    content: bytes
    content_type: str
    base_url: str
    description: str | None = None

    @property
    def url(self) -> str:
        """Where the fake serves it (Discord's CDN URL)."""
        return f"{self.base_url}/attachments/{self.channel_id}/{self.id}/{self.filename}"

    @property
    def size(self) -> int:
        """Size in bytes."""
        return len(self.content)

    def to_dict(self) -> JSON:
        """The Attachment object."""
        out: JSON = {"id": str(self.id), "filename": self.filename, "size": self.size,
                     "url": self.url, "proxy_url": self.url, "content_type": self.content_type}
        if self.description:
            out["description"] = self.description
        return out


def guess_type(filename: str) -> str:
    """The content type Discord detects for a file name."""
    return mimetypes.guess_type(filename)[0] or "application/octet-stream"


@dataclass(slots=True)
class SentMessage:
    """The current state of one message of the bot (edits applied).

    ``versions`` keeps every content the message had, oldest first; ``mentions`` the ids of the
    users the message pings (after ``allowed_mentions``); ``interaction_id`` is set for interaction
    responses and follow-ups (``ephemeral`` ones only the user sees); ``loading`` while a deferred
    response still shows "thinking".
    """

    id: int
    channel_id: int
    guild_id: int | None
    content: str
    timestamp: str
    embeds: list[JSON] = field(default_factory=list)
    components: list[JSON] = field(default_factory=list)
    flags: int = 0
    allowed_mentions: JSON | None = None
    message_reference: JSON | None = None
    attachments: list[StoredAttachment] = field(default_factory=list)
    nonce: str | None = None
    tts: bool = False
    edited_timestamp: str | None = None
    deleted: bool = False
    versions: list[str] = field(default_factory=list)
    mentions: list[int] = field(default_factory=list)
    mention_everyone: bool = False
    interaction_id: int | None = None
    interaction_type: int | None = None
    thread_id: int | None = None

    @property
    def ephemeral(self) -> bool:
        """Only the user of the interaction sees it."""
        return bool(self.flags & EPHEMERAL)

    @property
    def loading(self) -> bool:
        """A deferred interaction response not yet filled in."""
        return bool(self.flags & LOADING)

    @property
    def files(self) -> list[StoredAttachment]:
        """Same as ``attachments``."""
        return self.attachments

    @property
    def reply_to(self) -> int | None:
        """The id of the message this one replies to."""
        ref = self.message_reference
        return int(ref["message_id"]) if ref and ref.get("message_id") else None

    def custom_ids(self) -> list[str]:
        """Every ``custom_id`` in the message's components."""
        return [c["custom_id"] for c in walk_components(self.components) if "custom_id" in c]


@dataclass(slots=True)
class Interaction:
    """An interaction the fake created (a button press or a slash command) and its state."""

    id: int
    token: str
    type: int
    payload: JSON
    channel_id: int
    guild_id: int | None
    user_id: int
    created: float  # time.monotonic()
    message_id: int | None = None  # the component's message
    response_type: int | None = None  # the accepted callback
    original_id: int | None = None  # the response message (type 4/5) or the component message
    followups: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class InteractionResponse:
    """One accepted ``POST /interactions/{id}/{token}/callback``: type 4 message, 5 deferred
    message ("thinking"), 6 deferred update, 7 update message, 8 autocomplete, 9 modal."""

    interaction_id: int
    type: int
    data: JSON | None
    time: float


@dataclass(slots=True)
class Channel:
    """A guild text channel, a DM channel or a thread."""

    id: int
    type: int
    name: str = ""
    guild_id: int | None = None
    parent_id: int | None = None
    recipient: JSON | None = None  # DMs: the user
    owner_id: int | None = None  # threads
    created: str = field(default_factory=now_iso)
    position: int = 0

    @property
    def is_thread(self) -> bool:
        """A thread channel."""
        return self.type in THREAD_TYPES

    def to_dict(self, bot_id: int | None = None) -> JSON:
        """The Channel object."""
        if self.type == DM:
            return {"id": str(self.id), "type": DM, "last_message_id": None, "flags": 0,
                    "recipients": [self.recipient] if self.recipient else []}
        out: JSON = {"id": str(self.id), "type": self.type, "guild_id": str(self.guild_id),
                     "name": self.name, "last_message_id": None, "rate_limit_per_user": 0,
                     "flags": 0, "nsfw": False,
                     "parent_id": str(self.parent_id) if self.parent_id else None}
        if self.is_thread:
            out.update(owner_id=str(self.owner_id), message_count=0, member_count=1,
                       total_message_sent=0, thread_metadata={
                           "archived": False, "auto_archive_duration": 1440,
                           "archive_timestamp": self.created, "locked": False,
                           "create_timestamp": self.created})
            if bot_id is not None:
                out["member"] = {"id": str(self.id), "user_id": str(bot_id),
                                 "join_timestamp": self.created, "flags": 1}
        else:
            out.update(position=self.position, permission_overwrites=[], topic=None)
        return out


@dataclass(slots=True)
class Guild:
    """A guild the bot is in, with its text channels and threads."""

    id: int
    name: str
    owner_id: int
    channels: dict[int, Channel] = field(default_factory=dict)
    joined_at: str = field(default_factory=now_iso)

    def to_dict(self, bot_member: JSON, bot_id: int) -> JSON:
        """The GUILD_CREATE payload (the bot is the only member listed)."""
        text = [c for c in self.channels.values() if not c.is_thread]
        threads = [c for c in self.channels.values() if c.is_thread]
        everyone = {"id": str(self.id), "name": "@everyone", "permissions": EVERYONE_PERMISSIONS,
                    "position": 0, "color": 0, "hoist": False, "managed": False,
                    "mentionable": False, "flags": 0}
        return {
            "id": str(self.id), "name": self.name, "icon": None, "splash": None,
            "discovery_splash": None, "owner_id": str(self.owner_id), "afk_channel_id": None,
            "afk_timeout": 300, "verification_level": 0, "default_message_notifications": 0,
            "explicit_content_filter": 0, "roles": [everyone], "emojis": [], "stickers": [],
            "features": [], "mfa_level": 0, "application_id": None, "system_channel_id": None,
            "system_channel_flags": 0, "rules_channel_id": None, "vanity_url_code": None,
            "description": None, "banner": None, "premium_tier": 0,
            "premium_subscription_count": 0, "preferred_locale": "en-US",
            "public_updates_channel_id": None, "nsfw_level": 0,
            "premium_progress_bar_enabled": False, "joined_at": self.joined_at, "large": False,
            "unavailable": False, "member_count": 2, "voice_states": [],
            "members": [bot_member], "presences": [], "stage_instances": [],
            "guild_scheduled_events": [], "soundboard_sounds": [],
            "channels": [c.to_dict() for c in text],
            "threads": [c.to_dict(bot_id) for c in threads],
        }


def user_dict(user_id: int, username: str, *, bot: bool = False) -> JSON:
    """A User object."""
    out: JSON = {"id": str(user_id), "username": username, "global_name": None,
                 "discriminator": "0", "avatar": None, "public_flags": 0}
    if bot:
        out["bot"] = True
    return out


def member_dict(joined_at: str, user: JSON | None = None,
                permissions: str | None = None) -> JSON:
    """A guild Member object (``user`` is left out inside MESSAGE_CREATE)."""
    out: JSON = {"roles": [], "joined_at": joined_at, "deaf": False, "mute": False, "flags": 0,
                 "pending": False, "nick": None, "avatar": None,
                 "communication_disabled_until": None}
    if user is not None:
        out["user"] = user
    if permissions is not None:
        out["permissions"] = permissions
    return out


# ------------------------------------------------------------------------------- stored messages


class MessageStore:
    """Every message the fake knows (people's as the dicts dispatched, the bot's as
    ``SentMessage``), their attachments and the bot's reactions, rendered as Message objects."""

    def __init__(self, bot_user: JSON, app_id: int, users: dict[int, JSON],
                 channels: dict[int, Channel], interactions: dict[int, Interaction]) -> None:
        self.bot_user, self.bot_id, self.app_id = bot_user, int(bot_user["id"]), app_id
        self.users, self.channels, self.interactions = users, channels, interactions
        self.messages: dict[int, JSON | SentMessage] = {}
        self.deleted: set[int] = set()  # people's messages the bot deleted
        self.attachments: dict[int, StoredAttachment] = {}
        self.reactions: dict[int, list[str]] = {}

    def gone(self, message: JSON | SentMessage) -> bool:
        """Deleted (a person's message the bot deleted, or the bot's own)."""
        if isinstance(message, SentMessage):
            return message.deleted
        return message_id_of(message) in self.deleted

    def live(self, message_id: int) -> JSON | SentMessage | None:
        """A message that exists and is not deleted."""
        found = self.messages.get(message_id)
        return None if found is None or self.gone(found) else found

    def author_of(self, message: JSON | SentMessage) -> int:
        """The id of the message's author."""
        return self.bot_id if isinstance(message, SentMessage) else int(message["author"]["id"])

    def render(self, message: JSON | SentMessage, nested: bool = False) -> JSON:
        """A stored message as a Message object, as it is now (``nested``: without its own
        ``referenced_message``)."""
        if not isinstance(message, SentMessage):
            return {k: v for k, v in message.items() if not (nested and k == "referenced_message")}
        sent = message
        kind = 19 if sent.message_reference else 0
        rec = self.interactions.get(sent.interaction_id or 0)
        if rec is not None and rec.type == 2 and sent.id == rec.original_id:
            kind = 20  # the response to a slash command
        out: JSON = {
            "id": str(sent.id), "channel_id": str(sent.channel_id), "type": kind,
            "author": self.bot_user, "content": sent.content, "timestamp": sent.timestamp,
            "edited_timestamp": sent.edited_timestamp, "tts": sent.tts,
            "mention_everyone": sent.mention_everyone,
            "mentions": [self.users.get(u) or user_dict(u, f"user{u}") for u in sent.mentions],
            "mention_roles": [], "attachments": [a.to_dict() for a in sent.attachments],
            "embeds": sent.embeds, "pinned": False, "flags": sent.flags,
            "components": sent.components,
        }
        if sent.nonce is not None:
            out["nonce"] = sent.nonce
        if sent.message_reference:
            out["message_reference"] = sent.message_reference
            if not nested:
                target = self.live(sent.reply_to or 0)
                out["referenced_message"] = None if target is None else \
                    self.render(target, nested=True)
        if rec is not None:
            out.update(webhook_id=str(self.app_id), application_id=str(self.app_id),
                       interaction_metadata={"id": str(rec.id), "type": rec.type,
                                             "user": self.users[rec.user_id],
                                             "authorizing_integration_owners": {}})
        if sent.thread_id is not None and sent.thread_id in self.channels:
            out["thread"] = self.channels[sent.thread_id].to_dict(self.bot_id)
        return out

    def add_attachment(self, attachment_id: int, channel_id: int, filename: str, content: bytes,
                       base_url: str, content_type: str | None = None,
                       description: str | None = None) -> StoredAttachment:
        """Store a file served at ``{base_url}/attachments/...``."""
        stored = StoredAttachment(attachment_id, channel_id, filename, content,
                                  content_type or guess_type(filename), base_url, description)
        self.attachments[stored.id] = stored
        return stored


def message_id_of(message: JSON | SentMessage) -> int:
    """The id of a stored message."""
    return message.id if isinstance(message, SentMessage) else int(message["id"])


def channel_id_of(message: JSON | SentMessage) -> int:
    """The channel of a stored message."""
    return message.channel_id if isinstance(message, SentMessage) else int(message["channel_id"])


# ------------------------------------------------------------------------------- gateway records


@dataclass(slots=True)
class Dispatch:
    """One dispatched gateway event (op 0) of a session, kept for RESUME replays."""

    seq: int
    t: str
    d: Any
    session_id: str


@dataclass(slots=True)
class Frame:
    """One frame the fake wrote to a gateway socket (``conn`` = ``GatewayConnection.number``)."""

    conn: int
    op: int
    t: str | None
    s: int | None
    d: Any
    time: float


@dataclass(eq=False)
class GatewayConnection:
    """One gateway websocket. ``kind`` is "identify" or "resume" once the client said which;
    ``live`` once READY/RESUMED was sent on it and until the fake asked it to go away."""

    number: int
    path: str
    query: dict[str, str]
    opened: float
    kind: str = ""
    live: bool = False
    closed: bool = False
    close_code: int | None = None
    streaming: bool = field(default=False, repr=False)  # dispatches are written to it
    ws: web.WebSocketResponse | None = field(default=None, repr=False)
    request: web.Request | None = field(default=None, repr=False)
    queue: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue, repr=False)

    def send(self, payload: JSON) -> None:
        """Queue a frame (written in order by the connection's writer task)."""
        if not self.closed:  # serialised now: later changes to the dicts do not leak in
            self.queue.put_nowait(("frame", (json.dumps(payload), payload)))

    def close(self, code: int, reason: str) -> None:
        """Queue a close frame with ``code``; nothing is written after it."""
        self.streaming = self.live = False
        self.queue.put_nowait(("close", (code, reason)))


@dataclass(slots=True)
class Session:
    """A gateway session: its intents, sequence, the events it was sent (for RESUME), its socket."""

    id: str
    intents: int
    shard: Any = None
    seq: int = 0
    log: list[Dispatch] = field(default_factory=list)
    conn: GatewayConnection | None = None
    invalid: bool = False


# ------------------------------------------------------------------------------- validation

_MENTION_RE = re.compile(r"<@!?(\d+)>")


def parse_mentions(content: str, allowed: JSON | None, replied_author: int | None) -> tuple[
        list[int], bool]:
    """The user ids a message pings and whether it pings @everyone, honouring ``allowed_mentions``
    (absent = everything allowed, as Discord's default)."""
    ids = [int(m) for m in _MENTION_RE.findall(content)]
    everyone = "@everyone" in content or "@here" in content
    if allowed is not None:
        parse = allowed.get("parse") or []
        listed = {int(u) for u in allowed.get("users") or []}
        ids = [u for u in ids if "users" in parse or u in listed]
        everyone = everyone and "everyone" in parse
    if replied_author is not None and (allowed is None or allowed.get("replied_user", True)):
        ids.append(replied_author)  # a reply pings the replied author unless told not to
    return list(dict.fromkeys(ids)), everyone


def walk_components(components: list[JSON]) -> list[JSON]:
    """Every component, depth first (rows and their children)."""
    out: list[JSON] = []
    for component in components or []:
        out.append(component)
        out.extend(walk_components(component.get("components") or []))
        if isinstance(component.get("accessory"), dict):
            out.append(component["accessory"])
    return out


def _check_embeds(embeds: list[JSON], errors: JSON) -> None:
    if len(embeds) > 10:
        errors["embeds"] = field_error("BASE_TYPE_MAX_LENGTH", "Must be 10 or fewer in length.")
        return
    limits = {"title": 256, "description": 4096}
    total = 0
    for index, embed in enumerate(embeds):
        found: JSON = {}
        for key, limit in limits.items():
            value = embed.get(key) or ""
            total += len(value)
            if len(value) > limit:
                found[key] = field_error("BASE_TYPE_MAX_LENGTH",
                                         f"Must be {limit} or fewer in length.")
        fields = embed.get("fields") or []
        if len(fields) > 25:
            found["fields"] = field_error("BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.")
        for f in fields:
            total += len(f.get("name") or "") + len(f.get("value") or "")
        total += len((embed.get("footer") or {}).get("text") or "")
        total += len((embed.get("author") or {}).get("name") or "")
        if found:
            errors.setdefault("embeds", {})[str(index)] = found
    if total > 6000 and "embeds" not in errors:
        errors["embeds"] = field_error("MAX_EMBED_SIZE_EXCEEDED", "Embed size exceeds maximum size of 6000")


def _check_components(components: list[JSON], flags: int, errors: JSON) -> None:
    if flags & IS_COMPONENTS_V2:
        return  # layout components: not validated here
    if len(components) > 5:
        errors["components"] = field_error("BASE_TYPE_MAX_LENGTH", "Must be 5 or fewer in length.")
        return
    seen: set[str] = set()
    for r, row in enumerate(components):
        path = errors.setdefault("components", {}).setdefault(str(r), {})
        children = row.get("components") or []
        if row.get("type") != 1:
            path["type"] = field_error("UNION_TYPE_CHOICES",
                                       "Value of field \"type\" must be one of (1,).")
        elif not 1 <= len(children) <= 5:
            path["components"] = field_error("BASE_TYPE_BAD_LENGTH",
                                             "Must be between 1 and 5 in length.")
        for c, child in enumerate(children):
            found: JSON = {}
            custom_id = child.get("custom_id")
            if child.get("type") == 2 and child.get("style") != 5 and not custom_id \
                    and child.get("style") != 6:
                found["custom_id"] = field_error("BUTTON_COMPONENT_CUSTOM_ID_REQUIRED",
                                                 "A custom id is required")
            if custom_id is not None:
                if len(custom_id) > 100:
                    found["custom_id"] = field_error("BASE_TYPE_MAX_LENGTH",
                                                     "Must be 100 or fewer in length.")
                elif custom_id in seen:
                    found["custom_id"] = field_error("COMPONENT_CUSTOM_ID_DUPLICATED",
                                                     "Component custom id cannot be duplicated")
                seen.add(custom_id)
            if len(child.get("label") or "") > 80:
                found["label"] = field_error("BASE_TYPE_MAX_LENGTH", "Must be 80 or fewer in length.")
            if found:
                path.setdefault("components", {})[str(c)] = found
        if not path:
            del errors["components"][str(r)]
    if not errors.get("components"):
        errors.pop("components", None)


def check_message(body: JSON, n_files: int, *, keeps_content: bool = False) -> None:
    """Raise the ``ApiError`` Discord gives for an invalid message body (create or edit).

    Content is limited to 2,000 characters, a nonce to 25; embeds and components to Discord's
    limits. A message with no content, embed, file, sticker, component or poll is refused with
    50006 (``keeps_content``: an edit of a message that keeps something else).
    """
    errors: JSON = {}
    content = body.get("content")
    if isinstance(content, str) and len(content) > 2000:
        errors["content"] = field_error("BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.")
    nonce = body.get("nonce")
    if nonce is not None and len(str(nonce)) > 25:
        errors["nonce"] = field_error("BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.")
    _check_embeds(body.get("embeds") or [], errors)
    _check_components(body.get("components") or [], int(body.get("flags") or 0), errors)
    if errors:
        raise invalid_form(errors)
    has_something = (bool(str(content or "").strip()) or bool(body.get("embeds")) or n_files > 0
                     or bool(body.get("sticker_ids")) or bool(body.get("components"))
                     or bool(body.get("poll")) or keeps_content)
    if not has_something:
        raise ApiError(400, 50006, "Cannot send an empty message")


_COMMAND_NAME = re.compile(r"^[-_\w]{1,32}$")


def check_commands(commands: Any) -> None:
    """Raise Discord's 50035 for an invalid bulk overwrite of application commands."""
    if not isinstance(commands, list):
        raise invalid_form({"_errors": [{"code": "BASE_TYPE_ARRAY", "message": "Must be an array."}]})
    errors: JSON = {}
    names: set[tuple[int, str]] = set()
    for index, command in enumerate(commands):
        found: JSON = {}
        name, kind = str(command.get("name", "")), int(command.get("type", 1))
        if kind == 1 and (not _COMMAND_NAME.match(name) or name != name.lower()):
            found["name"] = field_error("APPLICATION_COMMAND_INVALID_NAME",
                                        "Command name is invalid")
        if kind == 1 and not 1 <= len(command.get("description") or "") <= 100:
            found["description"] = field_error("BASE_TYPE_BAD_LENGTH",
                                               "Must be between 1 and 100 in length.")
        if (kind, name) in names:
            found["name"] = field_error("APPLICATION_COMMANDS_DUPLICATE_NAME",
                                        "Application command names must be unique")
        names.add((kind, name))
        if found:
            errors[str(index)] = found
    if len(commands) > 100:
        errors["_errors"] = [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 100 or fewer in length."}]
    if errors:
        raise invalid_form(errors)


def option_list(options: list[JSON] | dict[str, Any] | None) -> list[JSON]:
    """Slash command options as Discord sends them; a ``{name: value}`` dict is converted
    (str → 3, bool → 5, int → 4, float → 10)."""
    if options is None:
        return []
    if isinstance(options, list):
        return options
    out = []
    for name, value in options.items():
        kind = 5 if isinstance(value, bool) else 4 if isinstance(value, int) else \
            10 if isinstance(value, float) else 3
        out.append({"name": name, "type": kind, "value": value})
    return out
