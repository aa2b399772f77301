"""A fake Discord (REST API v10 + gateway websocket) for tests: in-process aiohttp on loopback.

The real discord.py client talks to it over sockets; point it at the fake with two class
attributes before ``login``/``start``::

    async with FakeDiscord(token="fake-token") as dc:
        discord.http.Route.BASE = dc.api_base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(dc.gateway_url)
        client = discord.Client(intents=discord.Intents.default(), guild_ready_timeout=0.05)
        await client.login(dc.token); task = asyncio.create_task(client.connect())
        await dc.wait_connected()
        dc.user_message("hello")                      # MESSAGE_CREATE in the user's DM
        [call] = await dc.wait_for("POST /channels/{channel_id}/messages")

It records every REST call (``calls``, ``calls_to``, ``wait_for``) and every gateway frame
(``frames``, ``identifies``, ``resumes``, ``connections``), keeps what users see
(``sent_messages``, ``interaction_responses``), injects what people do (``user_message``,
``button_press``, ``slash_command``, ``redeliver``), drives the gateway (``request_reconnect``,
``invalidate_session``, ``drop_connection``) and injects REST faults (``fail_next``,
``drop_next``, ``hold_next``). Data classes and validation live in ``discord_objects.py``.

Gateway semantics: one session at a time. Every dispatch gets the session's next sequence
number and is kept, so a RESUME replays what the client missed; a client that IDENTIFYs again
instead starts a new session and loses them, as on Discord. Events injected while there is no
session (before the first IDENTIFY, or after ``invalidate_session()``) wait and are dispatched
right after the next READY and GUILD_CREATEs. Frames are uncompressed text whatever the
``compress`` query asks (discord.py accepts both).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import re
import secrets
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import unquote

from aiohttp import WSMsgType, web

from tests.fakes.base import RecordingFake
from tests.fakes.discord_objects import (
    ATTACHMENT_ROUTE,
    ATTACHMENT_SIZE_LIMIT,
    DEFAULT_CHANNEL,
    DEFAULT_GUILD,
    DEFAULT_USER,
    DIRECT_MESSAGES,
    DM,
    EPHEMERAL,
    EVERYONE_PERMISSIONS,
    GUILD_MESSAGES,
    GUILD_TEXT,
    GUILDS,
    JSON,
    LOADING,
    MESSAGE_CONTENT,
    PRIVATE_THREAD,
    PRIVILEGED_INTENTS,
    PUBLIC_THREAD,
    ROUTES,
    UNAUTHENTICATED_PREFIXES,
    ApiError,
    Call,
    Channel,
    Dispatch,
    Fault,
    Frame,
    GatewayConnection,
    Guild,
    Interaction,
    InteractionResponse,
    MessageStore,
    SentMessage,
    Session,
    Snowflakes,
    StoredAttachment,
    UploadedFile,
    channel_id_of,
    check_commands,
    check_message,
    field_error,
    guess_type,
    invalid_form,
    member_dict,
    message_id_of,
    now_iso,
    option_list,
    parse_mentions,
    unknown,
    user_dict,
    walk_components,
)

__all__ = [
    "ATTACHMENT_ROUTE",
    "DEFAULT_CHANNEL",
    "DEFAULT_GUILD",
    "DEFAULT_USER",
    "MESSAGES_ROUTE",
    "ROUTES",
    "Call",
    "Dispatch",
    "FakeDiscord",
    "Frame",
    "GatewayConnection",
    "InteractionResponse",
    "SentMessage",
    "StoredAttachment",
    "UploadedFile",
]

Handler = Callable[[Call], Coroutine[Any, Any, Any]]
MESSAGES_ROUTE = "POST /channels/{channel_id}/messages"
_CALLBACK_TYPES = {2: {4, 5, 9}, 3: {4, 5, 6, 7, 9}, 4: {8}, 5: {4, 5, 6, 7}}


class FakeDiscord(RecordingFake):
    """Discord's REST API and gateway for one bot, with recorded calls, injected events and faults."""

    key = "route"  # calls are matched by "POST /channels/{channel_id}/messages" and the like

    DEFAULT_GUILD = DEFAULT_GUILD  # "Test server", created by default
    DEFAULT_CHANNEL = DEFAULT_CHANNEL  # its text channel "general"
    DEFAULT_USER = DEFAULT_USER  # "ann", the default author of injected events

    def __init__(self, token: str = "fake-token", *, bot_id: int = 9000, app_id: int = 9001,
                 bot_name: str = "chatgate", require_message_content: bool = False,
                 enabled_intents: int = PRIVILEGED_INTENTS, port: int = 0,
                 heartbeat_interval: float = 41.25) -> None:
        """``require_message_content``: IDENTIFY without the MESSAGE_CONTENT intent is closed
        with 4014; ``enabled_intents``: the privileged intents switched on in the developer
        portal (asking for any other one is closed with 4014, as Discord does)."""
        self.token, self.bot_id, self.app_id, self.bot_name = token, bot_id, app_id, bot_name
        self.require_message_content = require_message_content
        self.enabled_intents = enabled_intents
        self.heartbeat_interval = heartbeat_interval
        self.ack_deadline = 3.0  # seconds to answer an interaction callback
        self.token_lifetime = 900.0  # seconds an interaction token works for follow-ups
        self._port = port
        self.ids = Snowflakes()
        self.bot_user = user_dict(bot_id, bot_name, bot=True)
        self.users: dict[int, JSON] = {bot_id: self.bot_user,
                                       DEFAULT_USER: user_dict(DEFAULT_USER, "ann")}
        self.guilds: dict[int, Guild] = {}
        self.channels: dict[int, Channel] = {}
        self.interactions: dict[int, Interaction] = {}
        self.store = MessageStore(self.bot_user, app_id, self.users, self.channels,
                                  self.interactions)
        self.messages, self.attachments = self.store.messages, self.store.attachments
        self.reactions = self.store.reactions
        self._dms: dict[int, int] = {}
        self._responses: list[InteractionResponse] = []
        self._commands: dict[int | None, list[JSON]] = {}
        self._nonces: dict[tuple[int, str], tuple[int, float]] = {}
        self.calls: list[Call] = []
        self._faults: list[Fault] = []
        # gateway
        self.identifies: list[JSON] = []
        self.resumes: list[JSON] = []
        self.presence_updates: list[JSON] = []
        self.heartbeats = 0
        self.connections: list[GatewayConnection] = []
        self.frames: list[Frame] = []
        self.dispatched: list[Dispatch] = []
        self._session: Session | None = None
        self._backlog: list[tuple[str, JSON]] = []
        self._injected: list[tuple[str, JSON]] = []
        # plumbing
        self._cond = asyncio.Condition()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._runner: web.AppRunner | None = None
        self._url: str | None = None
        self._routes = [(r.split(" ", 1)[0], r, self._template_re(r.split(" ", 1)[1]))
                        for r in ROUTES]
        self._handlers: dict[str, Handler] = self._handler_table()
        self.add_guild(DEFAULT_GUILD, "Test server", channels=((DEFAULT_CHANNEL, "general"),))

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Listen on 127.0.0.1 (a free port unless one was given)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/resume", self._gateway)
        app.router.add_get("/attachments/{channel_id}/{attachment_id}/{filename}",
                           self._download)
        app.router.add_route("*", r"/api{tail:(/v\d+)?/.*}", self._handle_api)
        await self._listen(app)

    async def stop(self) -> None:
        """Close open gateway sockets (1001) and the server."""
        self._closing = True
        for conn in self.connections:
            if not conn.closed and conn.ws is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.ws.close(code=1001, message=b"going away"), 1.0)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for task in list(self._tasks):
            task.cancel()

    @property
    def api_base(self) -> str:
        """The value for ``discord.http.Route.BASE``."""
        return f"{self.url}/api/v10"

    @property
    def gateway_url(self) -> str:
        """The value for ``DiscordWebSocket.DEFAULT_GATEWAY`` (as a ``yarl.URL``)."""
        return self.url.replace("http://", "ws://", 1) + "/gateway"

    @property
    def resume_gateway_url(self) -> str:
        """The ``resume_gateway_url`` READY gives; discord.py RESUMEs there."""
        return self.url.replace("http://", "ws://", 1) + "/resume"

    # ----------------------------------------------------------------- inspection

    def sent_messages(self, channel_id: int | None = None, *,
                      include_deleted: bool = False) -> list[SentMessage]:
        """The bot's messages (in ``channel_id`` if given) as they are now, oldest first."""
        return [m for m in self.messages.values() if isinstance(m, SentMessage)
                and (channel_id is None or m.channel_id == channel_id)
                and (include_deleted or not m.deleted)]

    def interaction_responses(self, interaction_id: int | None = None) -> list[InteractionResponse]:
        """Accepted interaction callbacks (of one interaction if given), in order."""
        return [r for r in self._responses
                if interaction_id is None or r.interaction_id == interaction_id]

    @property
    def commands(self) -> list[JSON]:
        """The global application commands as last overwritten."""
        return self._commands.get(None, [])

    def guild_commands(self, guild_id: int) -> list[JSON]:
        """The application commands of one guild."""
        return self._commands.get(guild_id, [])

    @property
    def connected(self) -> bool:
        """A gateway socket is live (READY or RESUMED sent, not asked to go away)."""
        session = self._session
        return bool(session and session.conn and session.conn.live and not session.conn.closed)

    async def wait_connected(self, timeout: float = 5.0) -> GatewayConnection:
        """Wait until READY (with the GUILD_CREATEs) or RESUMED was written to a live socket."""
        try:
            await self.wait_until(lambda: self.connected, timeout)
        except TimeoutError:
            raise TimeoutError(f"no live gateway connection after {timeout}s; connections: "
                               f"{self.connections}") from None
        assert self._session is not None and self._session.conn is not None
        return self._session.conn

    def deliveries(self, t: str, object_id: Any = None) -> list[Frame]:
        """Frames of event ``t`` written to sockets (whose ``d.id`` is ``object_id`` if given)."""
        return [f for f in self.frames if f.t == t and (
            object_id is None or (isinstance(f.d, dict) and str(f.d.get("id")) == str(object_id)))]

    # ----------------------------------------------------------------- guilds, channels, users

    def add_guild(self, guild_id: int, name: str = "Test server",
                  channels: tuple[tuple[int, str], ...] | list[tuple[int, str]] = (),
                  owner_id: int = DEFAULT_USER) -> Guild:
        """Register a guild with text channels; sent in READY/GUILD_CREATE (at once if connected)."""
        guild = Guild(guild_id, name, owner_id)
        for position, (channel_id, channel_name) in enumerate(channels):
            channel = Channel(channel_id, GUILD_TEXT, channel_name, guild_id, position=position)
            guild.channels[channel_id] = self.channels[channel_id] = channel
        self.guilds[guild_id] = guild
        if self._session is not None and not self._session.invalid:
            self._dispatch("GUILD_CREATE", self._guild_payload(guild))
        return guild

    def add_thread(self, thread_id: int | None = None, *, parent_id: int = DEFAULT_CHANNEL,
                   name: str = "thread", owner_id: int = DEFAULT_USER,
                   private: bool = False) -> int:
        """Register a thread (a person created it) under a guild text channel; its id."""
        parent = self.channels[parent_id]
        if parent.type != GUILD_TEXT:
            raise ValueError(f"channel {parent_id} cannot have threads")
        thread = Channel(thread_id or self.ids.next(), PRIVATE_THREAD if private else PUBLIC_THREAD,
                         name, parent.guild_id, parent_id=parent_id, owner_id=owner_id)
        self._register_thread(thread)
        return thread.id

    def dm_channel_id(self, user_id: int = DEFAULT_USER) -> int:
        """The id of the DM channel between the bot and ``user_id`` (created on first use)."""
        return self._dm_channel(user_id).id

    def _dm_channel(self, user_id: int) -> Channel:
        if user_id not in self._dms:
            recipient = self.users.get(user_id) or user_dict(user_id, f"user{user_id}")
            channel = Channel(self.ids.next(), DM, recipient=recipient)
            self.channels[channel.id] = channel
            self._dms[user_id] = channel.id
        return self.channels[self._dms[user_id]]

    def _user(self, user_id: int, username: str) -> JSON:
        self.users[user_id] = user_dict(user_id, username)
        return self.users[user_id]

    def _register_thread(self, thread: Channel) -> None:
        assert thread.guild_id is not None
        self.channels[thread.id] = self.guilds[thread.guild_id].channels[thread.id] = thread
        if self._session is not None and not self._session.invalid:
            self._dispatch("THREAD_CREATE", {**thread.to_dict(self.bot_id), "newly_created": True})

    def _channel_for(self, user_id: int, channel_id: int | None, guild_id: int | None,
                     thread_id: int | None = None) -> Channel:
        """The channel an injected event happens in: a thread, a given channel, the first text
        channel of ``guild_id``, or the user's DM."""
        if thread_id is not None:
            channel = self.channels.get(thread_id)
            if channel is None or not channel.is_thread:
                raise ValueError(f"unknown thread {thread_id} (use add_thread)")
        elif channel_id is not None:
            if channel_id not in self.channels:
                raise ValueError(f"unknown channel {channel_id}")
            channel = self.channels[channel_id]
        elif guild_id is not None:
            channel = next(c for c in self.guilds[guild_id].channels.values()
                           if c.type == GUILD_TEXT)
        else:
            channel = self._dm_channel(user_id)
        if guild_id is not None and channel.guild_id != guild_id:
            raise ValueError(f"channel {channel.id} is not in guild {guild_id}")
        return channel

    # ----------------------------------------------------------------- faults

    def fail_next(self, route: str, status: int = 429, *, retry_after: float = 1.0,
                  global_: bool = False, count: int = 1, channel_id: int | None = None,
                  body: JSON | None = None, match: Callable[[Call], bool] | None = None) -> None:
        """Answer the next ``count`` calls of ``route`` ("*" = any) with ``status``.

        429 comes with ``Via``, ``Retry-After``, ``X-RateLimit-*`` headers and
        ``{"message", "retry_after", "global"}``, so discord.py waits ``retry_after`` and retries;
        other statuses with a Discord error body (or ``body``).
        """
        messages = {403: (50013, "Missing Permissions"), 404: (0, "404: Not Found")}
        code, message = messages.get(status, (0, None))
        error = ApiError(status, code, message, retry_after=retry_after, global_=global_,
                         body=body)
        self._faults.append(Fault(route, count, error, _str(channel_id), match=match))

    def drop_next(self, route: str, count: int = 1, *, after_processing: bool = False,
                  channel_id: int | None = None,
                  match: Callable[[Call], bool] | None = None) -> None:
        """Close the connection of the next ``count`` calls of ``route`` without an answer;
        ``after_processing``: only after the call took effect (the client cannot know it did)."""
        self._faults.append(Fault(route, count, None, _str(channel_id), after=after_processing,
                                  match=match))

    def hold_next(self, route: str, count: int = 1, *, match: Callable[[Call], bool] | None = None,
                  channel_id: int | None = None, after_processing: bool = False) -> asyncio.Event:
        """Keep the next ``count`` calls of ``route`` waiting until the returned event is set; a
        held call whose client goes away meanwhile never takes effect. ``after_processing``: the call
        takes effect first and only its answer waits (status -3): a client that goes away meanwhile
        never learns what it made."""
        release = asyncio.Event()
        self._faults.append(Fault(route, count, None, _str(channel_id), hold=release, match=match,
                                  after=after_processing))
        return release

    # ----------------------------------------------------------------- injecting what people do

    def user_message(self, content: str = "", *, user_id: int = DEFAULT_USER, username: str = "ann",
                     channel_id: int | None = None, guild_id: int | None = None,
                     mentions_bot: bool = False, reply_to: int | None = None,
                     attachments: tuple[tuple[Any, ...], ...] | list[tuple[Any, ...]] = (),
                     message_id: int | None = None, thread_id: int | None = None) -> JSON:
        """Dispatch MESSAGE_CREATE for a message a person sent; returns the message.

        ``channel_id`` None: the user's DM (or the first channel of ``guild_id``); ``thread_id``:
        in that known thread. ``mentions_bot`` starts the content with ``<@bot_id>``; ``reply_to``
        references a stored message (its author is pinged, as Discord does); ``attachments``:
        ``(filename, bytes[, content_type])`` served at ``{url}/attachments/...``.
        """
        user = self._user(user_id, username)
        channel = self._channel_for(user_id, channel_id, guild_id, thread_id)
        if mentions_bot:
            content = f"<@{self.bot_id}>" + (f" {content}" if content else "")
        mentions: list[JSON] = [self.bot_user] if mentions_bot else []
        msg: JSON = {
            "id": str(message_id or self.ids.next()), "channel_id": str(channel.id),
            "author": user, "content": content, "timestamp": now_iso(), "edited_timestamp": None,
            "tts": False, "mention_everyone": False, "mentions": mentions, "mention_roles": [],
            "attachments": [self._store_attachment(channel.id, *a).to_dict() for a in attachments],
            "embeds": [], "pinned": False, "type": 0, "flags": 0, "components": [],
        }
        if reply_to is not None:
            target = self.messages.get(reply_to)
            if target is None:
                raise ValueError(f"no message {reply_to} to reply to")
            msg["type"] = 19
            msg["message_reference"] = {"type": 0, "message_id": str(reply_to),
                                        "channel_id": str(channel_id_of(target))}
            msg["referenced_message"] = None if self.store.gone(target) else \
                self.store.render(target, nested=True)
            author = self.users.get(self.store.author_of(target))
            if author is not None and all(m["id"] != author["id"] for m in mentions):
                mentions.append(author)
        if channel.guild_id is not None:
            msg["guild_id"] = str(channel.guild_id)
            msg["member"] = member_dict(self.guilds[channel.guild_id].joined_at)
            if "message_reference" in msg:
                msg["message_reference"]["guild_id"] = str(channel.guild_id)
            msg["mentions"] = [{**m, "member": member_dict(self.guilds[channel.guild_id].joined_at)}
                               for m in mentions]
        self.messages[int(msg["id"])] = msg
        self._inject("MESSAGE_CREATE", msg)
        return msg

    def button_press(self, custom_id: str, *, message_id: int, channel_id: int,
                     user_id: int = DEFAULT_USER, username: str = "ann", guild_id: int | None = None,
                     values: list[str] | None = None, force: bool = False) -> JSON:
        """Dispatch INTERACTION_CREATE type 3 for a component of a message the bot sent; returns
        the interaction. The component must be on the message as it is now (``force`` skips the
        check); ``values`` for a select menu."""
        sent = self.messages.get(message_id)
        if not isinstance(sent, SentMessage) or sent.deleted or sent.channel_id != channel_id:
            raise ValueError(f"message {message_id} is not a live bot message in {channel_id}")
        component = next((c for c in walk_components(sent.components)
                          if c.get("custom_id") == custom_id), None)
        if component is None and not force:
            raise ValueError(f"no component {custom_id!r} on message {message_id}: "
                             f"{sent.custom_ids()}")
        if component is not None and component.get("disabled") and not force:
            raise ValueError(f"component {custom_id!r} is disabled")
        kind = int((component or {}).get("type", 2))
        data: JSON = {"custom_id": custom_id, "component_type": kind}
        if kind != 2 or values is not None:
            data["values"] = list(values or [])
        channel = self._channel_for(user_id, channel_id, guild_id)
        return self._new_interaction(3, data, channel, self._user(user_id, username),
                                     message=sent)

    def slash_command(self, name: str, options: list[JSON] | dict[str, Any] | None = None, *,
                      channel_id: int | None = None, user_id: int = DEFAULT_USER,
                      username: str = "ann", guild_id: int | None = None) -> JSON:
        """Dispatch INTERACTION_CREATE type 2 for ``/name``; returns the interaction.

        ``options``: ``[{"name", "type", "value"}]`` as Discord sends them, or ``{name: value}``.
        The command id is that of the registered command of that name (guild, then global).
        """
        channel = self._channel_for(user_id, channel_id, guild_id)
        registered = [c for c in [*self.guild_commands(channel.guild_id or 0), *self.commands]
                      if c["name"] == name and int(c.get("type", 1)) == 1]
        data: JSON = {"id": registered[0]["id"] if registered else str(self.ids.next()),
                      "name": name, "type": 1, "options": option_list(options)}
        if registered and registered[0].get("guild_id"):
            data["guild_id"] = registered[0]["guild_id"]
        return self._new_interaction(2, data, channel, self._user(user_id, username))

    def redeliver(self, event: JSON) -> None:
        """Dispatch an injected event again (a new sequence number), as after a gateway glitch.

        ``event``: what ``user_message``/``button_press``/``slash_command`` returned, or a
        ``{"t", "d"}`` payload."""
        if "t" in event and "d" in event:
            self._dispatch(event["t"], event["d"])
            return
        for t, d in reversed(self._injected):
            if d is event or d.get("id") == event.get("id"):
                self._dispatch(t, d)
                return
        raise ValueError("not an injected event")

    def expire_interaction(self, interaction_id: int, *, token_too: bool = False) -> None:
        """Make an interaction older than the 3 s callback window (and the 15 min token
        lifetime with ``token_too``) without waiting."""
        rec = self.interactions[interaction_id]
        rec.created -= (self.token_lifetime if token_too else self.ack_deadline) + 1

    def _new_interaction(self, kind: int, data: JSON, channel: Channel, user: JSON, *,
                         message: SentMessage | None = None) -> JSON:
        iid = self.ids.next()
        token = f"aW50ZXJhY3Rpb24{iid}" + secrets.token_urlsafe(32)
        payload: JSON = {
            "id": str(iid), "application_id": str(self.app_id), "type": kind, "token": token,
            "version": 1, "data": data, "channel_id": str(channel.id),
            "channel": {**channel.to_dict(), "permissions": EVERYONE_PERMISSIONS},
            "locale": "en-US", "app_permissions": EVERYONE_PERMISSIONS, "entitlements": [],
            "attachment_size_limit": ATTACHMENT_SIZE_LIMIT,
            "authorizing_integration_owners": {"0": str(channel.guild_id)} if channel.guild_id
            else {"1": user["id"]},
            "context": 0 if channel.guild_id else 1,
        }
        if channel.guild_id is not None:
            joined = self.guilds[channel.guild_id].joined_at
            payload.update(guild_id=str(channel.guild_id), guild_locale="en-US",
                           guild={"id": str(channel.guild_id), "locale": "en-US", "features": []},
                           member=member_dict(joined, user, permissions=EVERYONE_PERMISSIONS))
        else:
            payload["user"] = user
        if message is not None:
            payload["message"] = self.store.render(message)
        self.interactions[iid] = Interaction(
            iid, token, kind, payload, channel.id, channel.guild_id, int(user["id"]),
            time.monotonic(), message_id=message.id if message else None)
        self._inject("INTERACTION_CREATE", payload)
        return payload

    # ----------------------------------------------------------------- gateway control

    def _live_conn(self) -> GatewayConnection | None:
        session = self._session
        return session.conn if session is not None and session.conn is not None \
            and not session.conn.closed else None

    def request_reconnect(self) -> None:
        """Send op 7 RECONNECT: the client closes and RESUMEs; nothing more is written to the
        old socket, so what is dispatched meanwhile is replayed on RESUME."""
        conn = self._require_conn()
        conn.send({"op": 7, "d": None, "s": None, "t": None})
        conn.streaming = conn.live = False

    def invalidate_session(self, resumable: bool = False) -> None:
        """Send op 9 INVALID_SESSION; not resumable: the session is gone and the client
        IDENTIFYs again (events injected meanwhile arrive after the new READY)."""
        conn = self._require_conn()
        assert self._session is not None
        if not resumable:
            self._session.invalid = True
        conn.send({"op": 9, "d": resumable, "s": None, "t": None})
        conn.streaming = conn.live = False

    def drop_connection(self) -> None:
        """Abort the gateway socket (no close frame): the client reconnects and RESUMEs."""
        conn = self._require_conn()
        conn.streaming = conn.live = False
        assert self._session is not None
        self._session.conn = None
        if conn.request is not None and conn.request.transport is not None:
            conn.request.transport.abort()

    def _require_conn(self) -> GatewayConnection:
        conn = self._live_conn()
        if conn is None:
            raise RuntimeError("no gateway connection")
        return conn

    # ----------------------------------------------------------------- dispatching

    def _inject(self, t: str, d: JSON) -> None:
        self._injected.append((t, d))
        self._dispatch(t, d)

    def _dispatch(self, t: str, d: JSON) -> None:
        session = self._session
        if session is None or session.invalid:
            self._backlog.append((t, d))
            self._poke()
            return
        self._emit(session, t, d)

    def _emit(self, session: Session, t: str, d: JSON) -> None:
        shown = self._visible(t, d, session.intents)
        if shown is None:
            return
        session.seq += 1
        event = Dispatch(session.seq, t, shown, session.id)
        session.log.append(event)
        self.dispatched.append(event)
        conn = session.conn
        if conn is not None and conn.streaming:
            conn.send({"op": 0, "t": t, "s": event.seq, "d": shown})
        self._poke()

    def _visible(self, t: str, d: JSON, intents: int) -> JSON | None:
        """What a session with ``intents`` receives of an event (None: nothing).

        Messages need GUILD_MESSAGES / DIRECT_MESSAGES; without MESSAGE_CONTENT, guild messages
        that are not the bot's and do not mention it arrive with empty content, embeds,
        attachments and components, as on Discord. Guild and thread events need GUILDS.
        """
        if t.startswith("MESSAGE_") and t != "MESSAGE_REACTION_ADD":
            if not intents & (GUILD_MESSAGES if d.get("guild_id") else DIRECT_MESSAGES):
                return None
            if t != "MESSAGE_DELETE" and d.get("guild_id") and not intents & MESSAGE_CONTENT:
                own = str((d.get("author") or {}).get("id")) == str(self.bot_id)
                mentioned = any(str(m.get("id")) == str(self.bot_id) for m in d.get("mentions", []))
                if not own and not mentioned:
                    d = {**d, "content": "", "embeds": [], "attachments": [], "components": []}
                    d.pop("poll", None)
        elif t.startswith(("GUILD_", "THREAD_", "CHANNEL_")) and t != "GUILD_MEMBERS_CHUNK" \
                and not intents & GUILDS:
            return None
        return d

    def _poke(self) -> None:
        """Notify waiters from synchronous code (when an event loop is running)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(self._notify())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ----------------------------------------------------------------- gateway websocket

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        conn = GatewayConnection(len(self.connections) + 1, request.path, dict(request.query),
                                 time.monotonic(), ws=ws, request=request)
        self.connections.append(conn)
        writer = asyncio.create_task(self._write(conn))
        conn.send({"op": 10, "s": None, "t": None, "d": {
            "heartbeat_interval": int(self.heartbeat_interval * 1000),
            "_trace": ['["gateway-prd-fake-1",{"micros":0}]']}})
        try:
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    try:
                        payload = json.loads(msg.data)
                    except ValueError:
                        conn.close(4002, "Error while decoding payload.")
                        continue
                    self._on_frame(conn, payload)
                elif msg.type is WSMsgType.BINARY:
                    conn.close(4002, "Error while decoding payload.")
        finally:
            conn.closed, conn.live, conn.streaming = True, False, False
            conn.close_code = ws.close_code
            if self._session is not None and self._session.conn is conn:
                self._session.conn = None
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await writer
            await self._notify()
        return ws

    async def _write(self, conn: GatewayConnection) -> None:
        assert conn.ws is not None
        while True:
            kind, arg = await conn.queue.get()
            if kind == "live":
                conn.live = not conn.closed and conn.streaming
            elif kind == "close":
                code, reason = arg
                with contextlib.suppress(Exception):
                    await conn.ws.close(code=code, message=reason.encode())
                return
            else:
                text, payload = arg
                try:
                    await conn.ws.send_str(text)
                except (ConnectionError, RuntimeError):
                    return
                self.frames.append(Frame(conn.number, payload["op"], payload.get("t"),
                                         payload.get("s"), payload.get("d"), time.monotonic()))
            await self._notify()

    def _on_frame(self, conn: GatewayConnection, payload: JSON) -> None:
        op, d = payload.get("op"), payload.get("d")
        if op == 1:
            self.heartbeats += 1
            conn.send({"op": 11, "d": None, "s": None, "t": None})
        elif op == 2:
            self._identify(conn, d or {})
        elif op == 6:
            self._resume(conn, d or {})
        elif op == 3:
            self.presence_updates.append(d or {})
        elif op == 8:
            self._request_members(d or {})
        elif op != 4:  # voice state updates are accepted and ignored
            conn.close(4001, "Unknown opcode.")
        self._poke()

    def _identify(self, conn: GatewayConnection, d: JSON) -> None:
        self.identifies.append(d)
        conn.kind = "identify"
        intents = d.get("intents")
        if conn.streaming:
            return conn.close(4005, "Already authenticated.")
        if d.get("token") != self.token:
            return conn.close(4004, "Authentication failed.")
        if not isinstance(intents, int):
            return conn.close(4013, "Invalid intent(s).")
        if (self.require_message_content and not intents & MESSAGE_CONTENT) \
                or intents & PRIVILEGED_INTENTS & ~self.enabled_intents:
            return conn.close(4014, "Disallowed intent(s).")
        session = Session(uuid.uuid4().hex, intents, d.get("shard"), conn=conn)
        self._session = session
        conn.streaming = True
        ready: JSON = {
            "v": 10, "user": {**self.bot_user, "verified": True, "mfa_enabled": False,
                              "flags": 0, "email": None},
            "guilds": [{"id": str(g), "unavailable": True} for g in self.guilds],
            "session_id": session.id, "session_type": "normal",
            "resume_gateway_url": self.resume_gateway_url,
            "application": {"id": str(self.app_id), "flags": 0},
            "private_channels": [], "relationships": [], "presences": [], "user_settings": {},
            "guild_join_requests": [], "geo_ordered_rtc_regions": [], "auth": {},
            "_trace": ['["gateway-prd-fake-1",{"micros":0}]'],
        }
        if session.shard is not None:
            ready["shard"] = session.shard
        self._emit(session, "READY", ready)
        for guild in self.guilds.values():
            self._emit(session, "GUILD_CREATE", self._guild_payload(guild))
        conn.queue.put_nowait(("live", None))
        backlog, self._backlog = self._backlog, []
        for t, event in backlog:
            self._emit(session, t, event)

    def _resume(self, conn: GatewayConnection, d: JSON) -> None:
        self.resumes.append(d)
        conn.kind = "resume"
        if d.get("token") != self.token:
            return conn.close(4004, "Authentication failed.")
        session = self._session
        if session is None or session.invalid or d.get("session_id") != session.id:
            conn.send({"op": 9, "d": False, "s": None, "t": None})
            return
        old = session.conn
        if old is not None and old is not conn and not old.closed:
            old.close(4000, "Session resumed elsewhere.")
        session.conn = conn
        conn.streaming = True
        seq = int(d.get("seq") or 0)
        for event in session.log:
            if event.seq > seq:
                conn.send({"op": 0, "t": event.t, "s": event.seq, "d": event.d})
        conn.send({"op": 0, "t": "RESUMED", "s": session.seq,
                   "d": {"_trace": ['["gateway-prd-fake-1",{"micros":0}]']}})
        conn.queue.put_nowait(("live", None))

    def _request_members(self, d: JSON) -> None:
        session = self._session
        if session is None:
            return
        ids = d.get("guild_id")
        for guild_id in ids if isinstance(ids, list) else [ids]:
            guild = self.guilds.get(int(guild_id))
            members = [self._bot_member(guild, with_user=True)] if guild else []
            chunk = {"guild_id": str(guild_id), "members": members, "chunk_index": 0,
                     "chunk_count": 1, "not_found": []}
            if d.get("nonce") is not None:
                chunk["nonce"] = d["nonce"]
            self._emit(session, "GUILD_MEMBERS_CHUNK", chunk)

    def _bot_member(self, guild: Guild, with_user: bool = False) -> JSON:
        return member_dict(guild.joined_at, self.bot_user if with_user else None)

    def _guild_payload(self, guild: Guild) -> JSON:
        return guild.to_dict(self._bot_member(guild, with_user=True), self.bot_id)

    # ----------------------------------------------------------------- HTTP plumbing

    @staticmethod
    def _template_re(template: str) -> re.Pattern[str]:
        pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template))
        return re.compile(f"^{pattern}$")

    def _match(self, method: str, path: str) -> tuple[str | None, dict[str, str]]:
        for route_method, route, regex in self._routes:
            if route_method == method and (found := regex.match(path)):
                return route, {k: unquote(v) for k, v in found.groupdict().items()}
        return None, {}

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        raw = request.raw_path.split("?", 1)[0]
        sub = re.sub(r"^/api(/v\d+)?", "", raw) or "/"
        route, params = self._match(request.method, sub)
        handler = self._handlers.get(route) if route else None
        return await self._serve(request, route or f"{request.method} {unquote(sub)}", params,
                                 handler, auth=not sub.startswith(UNAUTHENTICATED_PREFIXES))

    async def _download(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, ATTACHMENT_ROUTE, dict(request.match_info),
                                 self._get_attachment, auth=False, rate_headers=False)

    async def _serve(self, request: web.Request, route: str, params: dict[str, str],
                     handler: Handler | None, *, auth: bool,
                     rate_headers: bool = True) -> web.StreamResponse:
        call = Call(request.method, route, params, dict(request.query), time.monotonic(),
                    headers={k: v for k, v in request.headers.items()
                             if k.lower() in ("authorization", "x-audit-log-reason",
                                              "content-type", "user-agent")})
        self.calls.append(call)
        headers: dict[str, str] = {"Via": "1.1 google"}
        try:
            await self._read_body(request, call)
            if handler is None:
                raise ApiError(404, 0, "404: Not Found")
            if auth and request.headers.get("Authorization") != f"Bot {self.token}":
                raise ApiError(401, 0, "401: Unauthorized")
            fault = self._take_fault(call)
            if fault is not None and fault.hold is not None and not fault.after:
                await self._hold(call, request, fault.hold)
                fault = None
            if fault is not None and fault.error is None and not fault.after:
                await self._drop(call, request)
            if fault is not None and fault.error is not None:
                raise fault.error
            result = await handler(call)
            if isinstance(result, web.StreamResponse):
                call.status = result.status
                await self._notify()
                return result
            call.result = result
            if fault is not None and fault.after and fault.hold is not None:
                await self._hold_answer(call, request, fault.hold)
            elif fault is not None and fault.after:
                await self._drop(call, request)
            call.status = 204 if result is None else 200
            body = result
            if rate_headers:
                headers.update(self._rate_headers(route, limit=50, remaining=49, reset_after=1.0))
        except ApiError as error:
            call.status, body = error.status, error.body()
            call.error = body
            if error.status == 429:
                headers.update(self._limit_headers(route, error))
            elif rate_headers and handler is not None:
                headers.update(self._rate_headers(route, limit=50, remaining=49, reset_after=1.0))
        await self._notify()
        if body is None:
            return web.Response(status=call.status, headers=headers)
        # body= (not text=) so that Content-Type is exactly application/json, which
        # discord.py requires before it parses JSON.
        return web.Response(status=call.status, body=json.dumps(body).encode(),
                            content_type="application/json", headers=headers)

    @staticmethod
    def _rate_headers(route: str, *, limit: int, remaining: int, reset_after: float) -> dict[str, str]:
        return {"X-RateLimit-Limit": str(limit), "X-RateLimit-Remaining": str(remaining),
                "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
                "X-RateLimit-Reset-After": f"{reset_after:.3f}",
                "X-RateLimit-Bucket": hashlib.sha1(route.encode()).hexdigest()[:32]}

    def _limit_headers(self, route: str, error: ApiError) -> dict[str, str]:
        retry = float(error.retry_after or 1.0)
        out = {"Retry-After": str(math.ceil(retry))}
        if error.global_:
            out.update({"X-RateLimit-Global": "true", "X-RateLimit-Scope": "global"})
        else:
            out.update(self._rate_headers(route, limit=5, remaining=0, reset_after=retry))
            out["X-RateLimit-Scope"] = "user"
        return out

    async def _hold(self, call: Call, request: web.Request, release: asyncio.Event) -> None:
        call.status = -2
        await self._notify()
        while not release.is_set():
            if self._closing or request.transport is None or request.transport.is_closing():
                call.status = 499
                raise ApiError(499, 0, "Client Closed Request")  # never takes effect
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(release.wait(), 0.05)
        call.status = 0

    @staticmethod
    async def _read_body(request: web.Request, call: Call) -> None:
        if not request.can_read_body:
            return
        if request.content_type.startswith("multipart/"):
            reader = await request.multipart()
            async for part in reader:
                data = bytes(await part.read())  # type: ignore[union-attr]
                name = part.name or ""  # type: ignore[union-attr]
                if name == "payload_json":
                    call.json = json.loads(data)
                elif part.filename is not None:  # type: ignore[union-attr]
                    call.files.append(UploadedFile(
                        name, part.filename,  # type: ignore[union-attr]
                        data, part.headers.get("Content-Type", "application/octet-stream")))
            return
        raw = await request.read()
        if raw:
            try:
                call.json = json.loads(raw)
            except ValueError:
                raise ApiError(400, 50109, "The request body contains invalid JSON.") from None

    # ----------------------------------------------------------------- REST handlers

    def _handler_table(self) -> dict[str, Handler]:
        h = {
            "GET /users/@me": self._get_me, "GET /users/{user_id}": self._get_user,
            "POST /users/@me/channels": self._open_dm,
            "GET /oauth2/applications/@me": self._app_info,
            "GET /applications/@me": self._app_info,
            "GET /gateway": self._gateway_info, "GET /gateway/bot": self._gateway_bot,
            "GET /channels/{channel_id}": self._get_channel,
            "GET /channels/{channel_id}/messages": self._list_messages,
            "POST /channels/{channel_id}/messages": self._create_message,
            "GET /channels/{channel_id}/messages/{message_id}": self._get_message,
            "PATCH /channels/{channel_id}/messages/{message_id}": self._edit_message,
            "DELETE /channels/{channel_id}/messages/{message_id}": self._delete_message,
            "PUT /channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me": self._react,
            "DELETE /channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me":
                self._unreact,
            "POST /channels/{channel_id}/typing": self._typing,
            "POST /channels/{channel_id}/messages/{message_id}/threads": self._thread_from_message,
            "POST /channels/{channel_id}/threads": self._thread_without_message,
            "POST /interactions/{interaction_id}/{interaction_token}/callback": self._callback,
            "POST /webhooks/{application_id}/{interaction_token}": self._followup,
        }
        for verb in ("GET", "PUT", "POST"):
            h[f"{verb} /applications/{{application_id}}/commands"] = self._commands_route
            h[f"{verb} /applications/{{application_id}}/guilds/{{guild_id}}/commands"] = \
                self._commands_route
        for verb in ("GET", "PATCH", "DELETE"):
            for tail in ("@original", "{message_id}"):
                h[f"{verb} /webhooks/{{application_id}}/{{interaction_token}}/messages/{tail}"] = \
                    self._webhook_message
        return h

    async def _get_me(self, call: Call) -> JSON:
        return {**self.bot_user, "verified": True, "mfa_enabled": False, "flags": 0,
                "email": None, "locale": "en-US", "bio": ""}

    async def _get_user(self, call: Call) -> JSON:
        user = self.users.get(_int(call.params["user_id"]))
        if user is None:
            raise unknown("User")
        return user

    async def _open_dm(self, call: Call) -> JSON:
        recipient = _int(str(call.get("recipient_id", "")))
        if not recipient:
            raise invalid_form({"recipient_id": field_error("BASE_TYPE_REQUIRED",
                                                            "This field is required")})
        return self._dm_channel(recipient).to_dict()

    async def _app_info(self, call: Call) -> JSON:
        return {"id": str(self.app_id), "name": self.bot_name, "icon": None, "description": "",
                "summary": "", "type": None, "bot_public": True, "bot_require_code_grant": False,
                "verify_key": "0" * 64, "flags": 0, "team": None, "owner": self.users[DEFAULT_USER],
                "bot": self.bot_user, "interactions_endpoint_url": None, "redirect_uris": [],
                "approximate_guild_count": len(self.guilds), "tags": []}

    async def _gateway_info(self, call: Call) -> JSON:
        return {"url": self.gateway_url}

    async def _gateway_bot(self, call: Call) -> JSON:
        return {"url": self.gateway_url, "shards": 1, "session_start_limit": {
            "total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}}

    def _channel(self, call: Call) -> Channel:
        channel = self.channels.get(_int(call.params["channel_id"]))
        if channel is None:
            raise unknown("Channel")
        return channel

    def _stored(self, call: Call, channel: Channel) -> JSON | SentMessage:
        found = self.store.live(_int(call.params["message_id"]))
        if found is None or channel_id_of(found) != channel.id \
                or (isinstance(found, SentMessage) and found.ephemeral):
            raise unknown("Message")
        return found

    async def _get_channel(self, call: Call) -> JSON:
        return self._channel(call).to_dict(self.bot_id)

    async def _list_messages(self, call: Call) -> list[JSON]:
        channel = self._channel(call)
        limit = max(1, min(int(call.query.get("limit", 50)), 100))
        before, after = _int(call.query.get("before", "0")), _int(call.query.get("after", "0"))
        found = sorted((mid for mid, m in self.messages.items()
                        if channel_id_of(m) == channel.id and not self.store.gone(m)
                        and not (isinstance(m, SentMessage) and m.ephemeral)
                        and (not before or mid < before) and mid > after), reverse=True)
        if after and not before:
            found = sorted(found)[:limit][::-1]
        return [self.store.render(self.messages[mid]) for mid in found[:limit]]

    async def _get_message(self, call: Call) -> JSON:
        return self.store.render(self._stored(call, self._channel(call)))

    async def _create_message(self, call: Call) -> JSON:
        channel = self._channel(call)
        body = call.json if isinstance(call.json, dict) else {}
        nonce = body.get("nonce")
        key = (channel.id, str(nonce))
        if nonce is not None and body.get("enforce_nonce") and key in self._nonces:
            mid, when = self._nonces[key]
            if time.monotonic() - when < 300 and mid in self.messages:
                return self.store.render(self.messages[mid])  # the earlier message, again
        sent = self._new_bot_message(channel, body, call.files)
        if nonce is not None:
            self._nonces[key] = (sent.id, time.monotonic())
        return self.store.render(sent)

    async def _edit_message(self, call: Call) -> JSON:
        found = self._stored(call, self._channel(call))
        if not isinstance(found, SentMessage):
            raise ApiError(403, 50005, "Cannot edit a message authored by another user")
        self._apply_edit(found, call.json if isinstance(call.json, dict) else {}, call.files)
        return self.store.render(found)

    async def _delete_message(self, call: Call) -> None:
        channel = self._channel(call)
        found = self._stored(call, channel)
        if isinstance(found, SentMessage):
            found.deleted = True
        elif channel.type == DM:
            raise ApiError(403, 50003, "Cannot execute action on a DM channel")
        else:
            self.store.deleted.add(int(found["id"]))
        self._message_deleted(message_id_of(found), channel)

    async def _react(self, call: Call) -> None:
        found = self._stored(call, self._channel(call))
        emojis = self.reactions.setdefault(message_id_of(found), [])
        if call.params["emoji"] not in emojis:
            emojis.append(call.params["emoji"])

    async def _unreact(self, call: Call) -> None:
        found = self._stored(call, self._channel(call))
        emojis = self.reactions.get(message_id_of(found), [])
        if call.params["emoji"] in emojis:
            emojis.remove(call.params["emoji"])

    async def _typing(self, call: Call) -> None:
        self._channel(call)

    async def _thread_from_message(self, call: Call) -> JSON:
        channel = self._channel(call)
        if channel.type != GUILD_TEXT:
            raise ApiError(400, 50024, "Cannot execute action on this channel type")
        found = self._stored(call, channel)
        mid = message_id_of(found)
        if mid in self.channels:
            raise ApiError(400, 160004, "A thread has already been created for this message")
        thread = Channel(mid, PUBLIC_THREAD, self._thread_name(call), channel.guild_id,
                         parent_id=channel.id, owner_id=self.bot_id)
        if isinstance(found, SentMessage):
            found.thread_id = mid
        self._register_thread(thread)
        return thread.to_dict(self.bot_id)

    async def _thread_without_message(self, call: Call) -> JSON:
        channel = self._channel(call)
        if channel.type != GUILD_TEXT:
            raise ApiError(400, 50024, "Cannot execute action on this channel type")
        kind = int(call.get("type", PRIVATE_THREAD))
        thread = Channel(self.ids.next(), kind, self._thread_name(call), channel.guild_id,
                         parent_id=channel.id, owner_id=self.bot_id)
        self._register_thread(thread)
        return thread.to_dict(self.bot_id)

    @staticmethod
    def _thread_name(call: Call) -> str:
        name = str(call.get("name") or "")
        if not 1 <= len(name) <= 100:
            raise invalid_form({"name": field_error("BASE_TYPE_BAD_LENGTH",
                                                    "Must be between 1 and 100 in length.")})
        return name

    async def _commands_route(self, call: Call) -> Any:
        if call.params["application_id"] != str(self.app_id):
            raise ApiError(403, 50001, "Missing Access")
        scope = _int(call.params["guild_id"]) if "guild_id" in call.params else None
        if scope is not None and scope not in self.guilds:
            raise ApiError(403, 50001, "Missing Access")
        current = self._commands.get(scope, [])
        if call.method == "GET":
            return current
        incoming = call.json if call.method == "PUT" else [call.json]
        check_commands(incoming)
        known = {(int(c.get("type", 1)), c["name"]): c for c in current}
        stored = [self._command(c, known.get((int(c.get("type", 1)), c["name"])), scope)
                  for c in incoming]
        if call.method == "PUT":
            self._commands[scope] = stored
            return stored
        self._commands[scope] = [c for c in current if (c["type"], c["name"]) !=
                                 (stored[0]["type"], stored[0]["name"])] + stored
        return stored[0]

    def _command(self, given: JSON, previous: JSON | None, scope: int | None) -> JSON:
        out = {"id": previous["id"] if previous else str(self.ids.next()),
               "application_id": str(self.app_id), "version": str(self.ids.next()),
               "type": int(given.get("type", 1)), "name": given["name"],
               "description": given.get("description", ""), "options": given.get("options", []),
               "default_member_permissions": given.get("default_member_permissions"),
               "dm_permission": given.get("dm_permission", True), "nsfw": given.get("nsfw", False),
               "contexts": given.get("contexts"), "integration_types": given.get("integration_types", [0]),
               "name_localizations": given.get("name_localizations"),
               "description_localizations": given.get("description_localizations")}
        if scope is not None:
            out["guild_id"] = str(scope)
        return out

    # ----------------------------------------------------------------- interactions

    async def _callback(self, call: Call) -> JSON | None:
        rec = self.interactions.get(_int(call.params["interaction_id"]))
        if rec is None or rec.token != call.params["interaction_token"]:
            raise unknown("Interaction")
        if rec.response_type is not None:
            raise ApiError(400, 40060, "Interaction has already been acknowledged.")
        if time.monotonic() - rec.created > self.ack_deadline:
            raise unknown("Interaction")
        body = call.json if isinstance(call.json, dict) else {}
        kind, data = int(body.get("type") or 0), body.get("data") or {}
        if kind not in _CALLBACK_TYPES.get(rec.type, set()):
            raise invalid_form({"type": field_error(
                "INTERACTION_CALLBACK_TYPE_INVALID" if kind in (4, 5, 6, 7, 8, 9)
                else "BASE_TYPE_CHOICES", "Interaction callback type is invalid")})
        channel = self.channels[rec.channel_id]
        message: SentMessage | None = None
        if kind == 4:
            message = self._new_bot_message(channel, data, call.files, interaction=rec)
        elif kind == 5:
            message = self._new_bot_message(
                channel, {}, [], interaction=rec,
                flags=LOADING | (int(data.get("flags") or 0) & EPHEMERAL))
        elif kind in (6, 7):
            assert rec.message_id is not None
            target = self.messages[rec.message_id]
            assert isinstance(target, SentMessage)
            if kind == 7:
                self._apply_edit(target, data, call.files)
                message = target
            rec.original_id = target.id
        if message is not None:
            rec.original_id = message.id
        rec.response_type = kind
        self._responses.append(InteractionResponse(rec.id, kind, data or None, time.monotonic()))
        if call.query.get("with_response", "").lower() not in ("1", "true"):
            return None
        out: JSON = {"interaction": {
            "id": str(rec.id), "type": rec.type, "response_message_loading": kind == 5,
            "response_message_ephemeral": bool(message and message.ephemeral)}}
        if message is not None:
            out["interaction"]["response_message_id"] = str(message.id)
            out["resource"] = {"type": kind, "message": self.store.render(message)}
        return out

    def _interaction_for(self, call: Call) -> Interaction:
        token = call.params["interaction_token"]
        rec = next((r for r in self.interactions.values() if r.token == token), None)
        if rec is None or call.params["application_id"] != str(self.app_id):
            raise unknown("Webhook")
        if time.monotonic() - rec.created > self.token_lifetime:
            raise ApiError(401, 50027, "Invalid Webhook Token")
        return rec

    async def _followup(self, call: Call) -> JSON | None:
        rec = self._interaction_for(call)
        if rec.response_type is None:
            raise unknown("Webhook")
        body = call.json if isinstance(call.json, dict) else {}
        original = self.messages.get(rec.original_id or 0)
        if rec.response_type == 5 and isinstance(original, SentMessage) and original.loading:
            # Discord: the first follow-up after a deferred response edits the "thinking" message
            # (its ephemeral flag is kept as deferred; the follow-up's is ignored).
            self._apply_edit(original, {k: v for k, v in body.items() if k != "flags"}, call.files)
            sent = original
        else:
            sent = self._new_bot_message(self.channels[rec.channel_id], body, call.files,
                                         interaction=rec)
            rec.followups.append(sent.id)
        if call.query.get("wait", "").lower() in ("1", "true"):
            return self.store.render(sent)
        return None

    async def _webhook_message(self, call: Call) -> JSON | None:
        rec = self._interaction_for(call)
        target_id = call.params.get("message_id")
        if target_id is None:  # @original
            if rec.original_id is None:
                raise unknown("Webhook")
            mid = rec.original_id
        else:
            mid = _int(target_id)
            if mid not in rec.followups and mid != rec.original_id:
                raise unknown("Message")
        sent = self.messages.get(mid)
        if not isinstance(sent, SentMessage) or sent.deleted:
            raise unknown("Message")
        if call.method == "PATCH":
            self._apply_edit(sent, call.json if isinstance(call.json, dict) else {}, call.files)
        elif call.method == "DELETE":
            sent.deleted = True
            self._message_deleted(sent.id, self.channels[sent.channel_id], sent.ephemeral)
            return None
        return self.store.render(sent)

    # ----------------------------------------------------------------- messages & files

    def _new_bot_message(self, channel: Channel, body: JSON, files: list[UploadedFile], *,
                         interaction: Interaction | None = None, flags: int | None = None) -> SentMessage:
        if flags is None:
            check_message(body, len(files))
        reference = body.get("message_reference")
        replied_author = None
        if reference and reference.get("message_id"):
            target = self.store.live(_int(str(reference["message_id"])))
            if target is None:
                if reference.get("fail_if_not_exists", True):
                    raise invalid_form({"message_reference": field_error(
                        "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message")})
                reference = None
            else:
                reference = {"type": 0, "message_id": str(message_id_of(target)),
                             "channel_id": str(channel_id_of(target))}
                if channel.guild_id is not None:
                    reference["guild_id"] = str(channel.guild_id)
                replied_author = self.store.author_of(target)
        content = str(body.get("content") or "")
        allowed = body.get("allowed_mentions")
        mentions, everyone = parse_mentions(content, allowed, replied_author)
        sent = SentMessage(
            self.ids.next(), channel.id, channel.guild_id, content, now_iso(),
            embeds=list(body.get("embeds") or []), components=list(body.get("components") or []),
            flags=int(body.get("flags") or 0) if flags is None else flags,
            allowed_mentions=allowed, message_reference=reference if reference else None,
            nonce=None if body.get("nonce") is None else str(body["nonce"]),
            tts=bool(body.get("tts")), versions=[content], mentions=mentions,
            mention_everyone=everyone,
            interaction_id=interaction.id if interaction else None,
            interaction_type=interaction.type if interaction else None)
        sent.attachments = self._attachments_from(channel.id, body, files)
        self.messages[sent.id] = sent
        if not sent.ephemeral:
            self._dispatch("MESSAGE_CREATE", self._gateway_message(sent))
        return sent

    def _apply_edit(self, sent: SentMessage, body: JSON, files: list[UploadedFile]) -> None:
        kept = sent.attachments
        if "attachments" in body:
            keep = {str(a.get("id")) for a in body.get("attachments") or []}
            kept = [a for a in sent.attachments if str(a.id) in keep]
        merged = {"content": body.get("content", sent.content),
                  "embeds": body.get("embeds", sent.embeds),
                  "components": body.get("components", sent.components),
                  "flags": body.get("flags", sent.flags)}
        check_message(merged, len(kept) + len(files))
        was_loading = sent.loading
        if "content" in body:
            sent.content = str(body.get("content") or "")
            sent.versions.append(sent.content)
        if "embeds" in body:
            sent.embeds = list(body.get("embeds") or [])
        if "components" in body:
            sent.components = list(body.get("components") or [])
        if "allowed_mentions" in body:
            sent.allowed_mentions = body["allowed_mentions"]
        new_flags = int(body.get("flags") or 0) if "flags" in body else sent.flags
        sent.flags = (new_flags & ~(EPHEMERAL | LOADING)) | (sent.flags & EPHEMERAL)
        sent.attachments = kept + self._attachments_from(sent.channel_id, body, files)
        replied = self.messages.get(sent.reply_to or 0)
        sent.mentions, sent.mention_everyone = parse_mentions(
            sent.content, sent.allowed_mentions, self.store.author_of(replied) if replied else None)
        if not was_loading:
            sent.edited_timestamp = now_iso()
        if not sent.ephemeral:
            self._dispatch("MESSAGE_UPDATE", self._gateway_message(sent))

    def _attachments_from(self, channel_id: int, body: JSON,
                          files: list[UploadedFile]) -> list[StoredAttachment]:
        described = {str(a.get("id")): a for a in body.get("attachments") or []
                     if isinstance(a, dict)}
        out = []
        for upload in files:
            index = upload.field.removeprefix("files[").removesuffix("]")
            meta = described.get(index, {})
            out.append(self._store_attachment(channel_id, upload.filename, upload.content,
                                              guess_type(upload.filename),
                                              meta.get("description")))
        return out

    def _store_attachment(self, channel_id: int, filename: str, content: bytes,
                          content_type: str | None = None,
                          description: str | None = None) -> StoredAttachment:
        return self.store.add_attachment(self.ids.next(), channel_id, filename, content,
                                         self.url, content_type, description)

    async def _get_attachment(self, call: Call) -> web.Response:
        stored = self.attachments.get(_int(call.params["attachment_id"]))
        if stored is None or stored.filename != call.params["filename"]:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=stored.content, content_type=stored.content_type)

    def _message_deleted(self, message_id: int, channel: Channel, ephemeral: bool = False) -> None:
        if ephemeral:
            return
        event: JSON = {"id": str(message_id), "channel_id": str(channel.id)}
        if channel.guild_id is not None:
            event["guild_id"] = str(channel.guild_id)
        self._dispatch("MESSAGE_DELETE", event)

    def _gateway_message(self, sent: SentMessage) -> JSON:
        """MESSAGE_CREATE/UPDATE of the bot's own message (Discord echoes them to the bot)."""
        out = self.store.render(sent)
        if sent.guild_id is not None:
            out["guild_id"] = str(sent.guild_id)
            out["member"] = self._bot_member(self.guilds[sent.guild_id])
        return out


def _int(value: str) -> int:
    """A snowflake from a path or query parameter (0 when not a number)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _str(value: int | None) -> str | None:
    return None if value is None else str(value)
