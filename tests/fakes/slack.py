"""A fake Slack for tests: Web API, Socket Mode websocket and signed HTTP events, in-process
aiohttp on a loopback port.

The real slack-sdk / slack-bolt clients talk to it over sockets::

    async with FakeSlack() as slack:
        app = AsyncApp(client=AsyncWebClient(token=slack.bot_token, base_url=slack.api_base),
                       signing_secret=slack.signing_secret)
        handler = AsyncSocketModeHandler(app, slack.app_token)
        await handler.connect_async()  # apps.connections.open -> ws://…/link/?ticket=…
        payload = slack.user_message("hello")  # an events_api envelope over the socket
        await slack.wait_for_ack(payload)
        [call] = await slack.wait_for("chat.postMessage")

It records every call (``calls``, ``wait_for``) and ack (``acks``, ``wait_for_ack``), keeps
what users see (``messages``, ``ephemerals``, ``statuses``, ``uploads``, ``responses``),
injects what people do (``user_message``, ``button_press``, ``slash_command``) over Socket
Mode (queued until a connection is open, redelivered when not acked) or builds the payload
for ``post_event`` / ``post_interaction`` (HTTP mode, signed), and injects faults
(``fail_next``, ``drop_next``, ``hold_next``, ``disconnect``, ``drop_connection``).
Plain data, limits and the workspace store live in ``slack_objects.py``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import secrets
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from aiohttp import web

from tests.fakes import slack_objects as objects
from tests.fakes.base import RecordingFake
from tests.fakes.slack_objects import (
    APP_ID,
    APP_TOKEN_METHODS,
    DEFAULT_CHANNEL,
    DEFAULT_GROUP,
    DEFAULT_MPIM,
    DEFAULT_SCOPES,
    JSON,
    METHOD_SCOPES,
    TEAM_DOMAIN,
    VERIFICATION_TOKEN,
    Ack,
    Call,
    Envelope,
    Ephemeral,
    Fault,
    Message,
    Response,
    SlackError,
    SlackStore,
    Status,
    StoredFile,
    Upload,
    UploadedFile,
    decode_params,
    dm_channel,
    find_element,
    rich_text,
    signature,
)

__all__ = [
    "APP_ID",
    "DEFAULT_CHANNEL",
    "DEFAULT_GROUP",
    "Ack",
    "Call",
    "Envelope",
    "Ephemeral",
    "FakeSlack",
    "Message",
    "Response",
    "Status",
    "StoredFile",
    "Upload",
    "signature",
]

Handler = Callable[[Call], JSON]
Deliver = Literal["socket", "none"]


@dataclass(eq=False, slots=True)
class _Connection:
    """One open Socket Mode websocket."""

    number: int
    ws: web.WebSocketResponse
    request: web.Request
    draining: bool = False  # a disconnect was sent: no new envelopes on it


class FakeSlack(RecordingFake):
    """One Slack workspace with one app installed: recorded calls, injectable events, faults."""

    max_retries = 3  # redeliveries of an envelope that is not acked
    retry_reason_on_timeout = "timeout"

    def __init__(self, *, bot_token: str = "xoxb-fake", app_token: str = "xapp-fake",
                 signing_secret: str = "fake-secret", team_id: str = "T0001",
                 bot_user_id: str = "UBOT", bot_id: str = "BBOT",
                 scopes: Iterable[str] = DEFAULT_SCOPES, port: int = 0) -> None:
        self.bot_token, self.app_token, self.signing_secret = bot_token, app_token, signing_secret
        self.team_id, self.bot_user_id, self.bot_id = team_id, bot_user_id, bot_id
        self.scopes = frozenset(scopes)
        self.redeliver_after = 3.0
        self.store = SlackStore(team_id, bot_user_id, bot_id)
        self.calls: list[Call] = []
        self.acks: list[Ack] = []
        self.envelopes: list[Envelope] = []
        store = self.store
        self.ephemerals, self.statuses, self.uploads = store.ephemerals, store.statuses, store.uploads
        self.reactions = store.reactions  # (channel, ts, name)
        self.responses: list[Response] = []
        self.last_payloads: list[JSON] = []  # what the latest injection built (message, app_mention)
        self.last_challenge: str | None = None
        self.connections = 0  # Socket Mode connections accepted so far
        self._port = port
        self._faults: list[Fault] = []
        self._conns: list[_Connection] = []
        self._outbox: collections.deque[Envelope] = collections.deque()
        self._tickets: set[str] = set()
        self._response_urls: dict[str, tuple[str, str | None, str, str | None]] = {}
        self._cond = asyncio.Condition()
        self._pump_wake = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}  # envelope_id -> redelivery timer
        self._closing = False
        self._runner: web.AppRunner | None = None
        self._url: str | None = None
        self._handlers: dict[str, Handler] = {
            "auth.test": self._auth_test, "apps.connections.open": self._connections_open,
            "chat.postMessage": store.post_message, "chat.update": store.update,
            "chat.delete": store.delete, "chat.postEphemeral": store.post_ephemeral,
            "conversations.open": store.conversations_open,
            "conversations.info": store.conversations_info,
            "conversations.history": store.conversations_history,
            "conversations.replies": store.conversations_replies,
            "users.info": store.users_info, "assistant.threads.setStatus": store.set_status,
            "files.getUploadURLExternal": store.get_upload_url,
            "files.completeUploadExternal": store.complete_upload,
            "reactions.add": store.reactions_add,
        }

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Listen on 127.0.0.1 (a free port unless one was given)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self._socket)
        app.router.add_post("/upload/v1/{file_id}", self._upload)
        app.router.add_get("/files-pri/{key}/{rest:.+}", self._download)
        app.router.add_post("/response/{rid}", self._response_url)
        await self._listen(app)
        self.store.base_url = self.url
        self._pump = asyncio.create_task(self._run_pump(), name="fake-slack-pump")

    async def stop(self) -> None:
        """Close the websockets (code 1001, as a server going away), stop redeliveries, close."""
        self._closing = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
            self._pump = None
        for conn in list(self._conns):
            await conn.ws.close(code=aiohttp.WSCloseCode.GOING_AWAY)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def api_base(self) -> str:
        """The ``base_url`` for ``AsyncWebClient`` (the trailing slash is required)."""
        return f"{self.url}/api/"

    # ----------------------------------------------------------------- inspection

    def envelope_of(self, item: str | JSON) -> Envelope:
        """The envelope with this id, or the one carrying this payload."""
        for env in self.envelopes:
            if env.envelope_id == item or env.payload is item:
                return env
        raise LookupError(f"no envelope for {item!r:.120}")

    async def wait_for_ack(self, envelope: str | JSON, timeout: float = 5.0) -> Ack:
        """Wait until the app acked an envelope (given by id, or by the payload an injection
        helper returned); returns the first ack."""
        env = self.envelope_of(envelope)

        def found() -> Ack | None:
            return next((a for a in self.acks if a.envelope_id == env.envelope_id), None)
        await self.wait_until(lambda: found() is not None, timeout,
                         lambda: f"an ack of {env.envelope_id} ({env.deliveries} deliveries)")
        return found()  # type: ignore[return-value]

    async def wait_for_connections(self, count: int = 1, timeout: float = 5.0) -> None:
        """Wait until ``count`` Socket Mode connections were accepted in all, one of them open."""
        await self.wait_until(lambda: self.connections >= count and self.open_connections > 0, timeout,
                         lambda: f"{count} socket connection(s), got {self.connections}")

    @property
    def open_connections(self) -> int:
        """Socket Mode connections open now."""
        return len(self._conns)

    @property
    def pending_envelopes(self) -> list[Envelope]:
        """Envelopes not acked yet (queued, in flight, or given up)."""
        return [e for e in self.envelopes if not e.acked]

    def messages(self, channel: str, thread_ts: str | None = None) -> list[Message]:
        """The bot's messages in ``channel`` as they are now (deleted ones have ``deleted``);
        with ``thread_ts``, only the replies in that thread."""
        return [m for m in self.store.history.get(channel, []) if m.bot_id == self.bot_id
                and (thread_ts is None or (m.thread_ts == thread_ts and m.ts != thread_ts))]

    def add_user(self, user_id: str, name: str | None = None, **fields: Any) -> JSON:
        """Register a user for users.info (others are made up when first seen)."""
        return self.store.add_user(user_id, name, **fields)

    def add_channel(self, channel_id: str, name: str | None = None) -> JSON:
        """Register a conversation for conversations.info."""
        return self.store.add_channel(channel_id, name)

    # ----------------------------------------------------------------- faults

    def fail_next(self, method: str, *, error: str | None = None, status: int = 429,
                  retry_after: int = 1, count: int = 1, channel: str | None = None) -> None:
        """Answer the next ``count`` calls of ``method`` ("*" = any; in ``channel`` if given):
        with ``error``, HTTP 200 ``{"ok": false, "error": error}``; else 429 + Retry-After +
        ``ratelimited``, or another HTTP ``status`` with ``internal_error``."""
        if error is not None:
            fault = SlackError(error, status=200 if status == 429 else status)
        elif status == 429:
            fault = SlackError("ratelimited", status=429, headers={"Retry-After": str(retry_after)})
        else:
            fault = SlackError("internal_error", status=status)
        self._faults.append(Fault(method, count, fault, channel))

    def drop_next(self, method: str, count: int = 1, *, after_processing: bool = False,
                  channel: str | None = None) -> None:
        """Close the connection of the next ``count`` calls without an answer; with
        ``after_processing`` only after the call took effect."""
        self._faults.append(Fault(method, count, None, channel, after=after_processing))

    def hold_next(self, method: str, count: int = 1, *, match: Callable[[Call], bool] | None = None,
                  after_processing: bool = False) -> asyncio.Event:
        """Keep the next ``count`` calls of ``method`` (that ``match`` accepts) waiting until the
        returned event is set; a held call whose client goes away never takes effect.
        ``after_processing``: the call takes effect first and only its answer waits (status -3): a
        client that goes away meanwhile never learns what it made."""
        release = asyncio.Event()
        self._faults.append(Fault(method, count, None, hold=release, match=match, after=after_processing))
        return release

    # ----------------------------------------------------------------- injecting what people do

    def _deliver(self, kind: str, payload: JSON, deliver: Deliver, accepts: bool = False) -> None:
        if deliver == "none":
            return
        env = Envelope(secrets.token_hex(16), kind, payload, accepts)
        self.envelopes.append(env)
        self._outbox.append(env)
        self._pump_wake.set()

    def user_message(self, text: str, *, user: str = "U1001", channel: str | None = None,
                     channel_type: str = "im", thread_ts: str | None = None, mention: bool = False,
                     files: Iterable[tuple[str, bytes]] = (), ts: str | None = None,
                     bot_id: str | None = None, subtype: str | None = None,
                     deliver: Deliver = "socket") -> JSON:
        """A person posts a message; returns the ``event_callback`` payload of its ``message`` event.

        ``channel`` None: the user's DM ("D…") for channel_type "im", else ``DEFAULT_CHANNEL``
        ("channel"), ``DEFAULT_GROUP`` ("group") or a group DM ("mpim"); a given "C…" channel
        with the default type counts as "channel". ``mention`` prefixes ``<@UBOT>`` and, outside
        DMs, also delivers an ``app_mention`` event (same ts, its own event_id), as Slack does
        (a DM arrives only as ``message``); both payloads are in ``last_payloads``. ``files``:
        (name, bytes) pairs, served at their ``url_private`` to the bot token.
        ``deliver="none"`` only builds the payloads (for ``post_event``).
        """
        if channel is None:
            channel = {"im": dm_channel(user), "group": DEFAULT_GROUP,
                       "mpim": DEFAULT_MPIM}.get(channel_type, DEFAULT_CHANNEL)
        elif channel_type == "im" and not channel.startswith("D"):
            channel_type = self.store.channel_type(channel)
        if channel.startswith("D") != (channel_type == "im"):
            raise ValueError(f"channel {channel} does not fit channel_type {channel_type!r}")
        self.store.add_user(user)
        self.store.add_channel(channel, user=user if channel_type == "im" else None)
        if mention:
            text = f"<@{self.bot_user_id}> {text}"
        stored = [self.store.add_file(name, content, user) for name, content in files]
        subtype = subtype or ("file_share" if stored else None)
        message = self.store.add(Message(channel, ts or self.store.new_ts(), text, user, bot_id=bot_id,
                                         blocks=rich_text(text, self.bot_user_id if mention else None),
                                         thread_ts=thread_ts, files=stored, subtype=subtype))
        common = objects.message_fields(self.store, message)
        event: JSON = {"type": "message", **common, "channel_type": channel_type}
        if subtype:
            event["subtype"] = subtype
        self.last_payloads = [self._event_callback(event)]
        if mention and channel_type != "im":  # Slack sends no app_mention in DMs
            self.last_payloads.append(self._event_callback({"type": "app_mention", **common}))
        for payload in self.last_payloads:
            self._deliver("events_api", payload, deliver)
        return self.last_payloads[0]

    def button_press(self, action_id: str, value: str | None = None, *, message_ts: str, channel: str,
                     user: str = "U1001", block_id: str | None = None,
                     deliver: Deliver = "socket") -> JSON:
        """A person clicks the button ``action_id`` in a message the bot posted; returns the
        ``block_actions`` payload (``value`` defaults to the button's own)."""
        message = self.store.find(channel, message_ts)
        if message is None or message.deleted or message.bot_id != self.bot_id:
            raise LookupError(f"the bot has no message {message_ts} in {channel}")
        found = find_element(message.blocks, action_id)
        if found is None:
            raise LookupError(f"message {message_ts} has no element with action_id {action_id!r}")
        found_block_id, element = found
        self.store.add_user(user)
        action: JSON = {"type": element.get("type", "button"), "action_id": action_id,
                        "block_id": block_id or found_block_id, "action_ts": f"{time.time():.6f}",
                        "value": element.get("value") if value is None else value}
        for key in ("text", "style"):
            if key in element:
                action[key] = element[key]
        payload = objects.block_actions(
            self.store, message, action, user, trigger_id=self._trigger_id(),
            response_url=self._new_response_url(channel, message_ts, user, message.thread_ts))
        self.last_payloads = [payload]
        self._deliver("interactive", payload, deliver)
        return payload

    def slash_command(self, command: str, text: str = "", *, user: str = "U1001",
                      channel: str | None = None, deliver: Deliver = "socket") -> JSON:
        """A person runs ``/command text``; returns the ``slash_commands`` payload (all strings,
        as the HTTP form fields are). ``channel`` None: the user's DM."""
        channel = channel or dm_channel(user)
        self.store.add_channel(channel, user=user if channel.startswith("D") else None)
        self.store.add_user(user)
        payload = objects.slash_command(
            self.store, command, text, user, channel, trigger_id=self._trigger_id(),
            response_url=self._new_response_url(channel, None, user, None))
        self.last_payloads = [payload]
        self._deliver("slash_commands", payload, deliver, accepts=True)
        return payload

    def _event_callback(self, event: JSON) -> JSON:
        return objects.event_callback(event, self.team_id, self.bot_user_id, self.store.new_id("Ev"))

    def _trigger_id(self) -> str:
        return f"{int(time.time())}.{secrets.randbelow(10**9)}.{secrets.token_hex(16)}"

    def _new_response_url(self, channel: str, message_ts: str | None, user: str,
                          thread_ts: str | None) -> str:
        rid = secrets.token_hex(12)
        self._response_urls[rid] = (channel, message_ts, user, thread_ts)
        return f"{self.url}/response/{rid}"

    # ----------------------------------------------------------------- Socket Mode

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Send ``{"type": "disconnect"}`` on the open connections; the client opens a new one
        and envelopes not delivered yet go there."""
        for conn in list(self._conns):
            conn.draining = True
            with contextlib.suppress(ConnectionError, RuntimeError):  # already closing
                await conn.ws.send_str(json.dumps({"type": "disconnect", "reason": reason,
                                                   "debug_info": {"host": "applink-fake"}}))

    def drop_connection(self) -> None:
        """Abort the open connections (no close frame); the client notices within its ping
        interval and reconnects."""
        for conn in list(self._conns):
            conn.draining = True
            if conn.request.transport is not None:
                conn.request.transport.abort()

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("ticket") not in self._tickets:
            return web.Response(status=401, text="invalid ticket")
        ws = web.WebSocketResponse(autoping=True)  # the client's pings get pongs
        await ws.prepare(request)
        self.connections += 1
        conn = _Connection(self.connections, ws, request)
        await ws.send_str(json.dumps(objects.hello(len(self._conns) + 1)))
        self._conns.append(conn)
        self._pump_wake.set()
        await self._notify()
        try:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    await self._on_socket_text(msg.data)
        finally:
            self._conns.remove(conn)
            await self._notify()
        return ws

    async def _on_socket_text(self, data: str) -> None:
        try:
            message = json.loads(data)
        except ValueError:
            return
        if not isinstance(message, dict) or "envelope_id" not in message:
            return
        env = next((e for e in self.envelopes if e.envelope_id == message["envelope_id"]), None)
        if env is not None:
            env.acked = True
            timer = self._timers.pop(env.envelope_id, None)
            if timer is not None:
                timer.cancel()
        self.acks.append(Ack(str(message["envelope_id"]), asyncio.get_running_loop().time(),
                             message.get("payload"), env.retry_attempt if env else 0))
        await self._notify()

    def _live_connection(self) -> _Connection | None:
        live = [c for c in self._conns if not c.draining and not c.ws.closed]
        return live[-1] if live else None

    async def _run_pump(self) -> None:
        """Send queued envelopes, in order, on the newest live connection."""
        loop = asyncio.get_running_loop()
        while True:
            await self._pump_wake.wait()
            self._pump_wake.clear()
            while self._outbox and (conn := self._live_connection()) is not None:
                env = self._outbox.popleft()
                if env.acked:
                    continue
                try:
                    await conn.ws.send_str(json.dumps(env.to_message()))
                except (ConnectionError, RuntimeError):
                    conn.draining = True
                    self._outbox.appendleft(env)
                    continue
                env.deliveries += 1
                self._timers[env.envelope_id] = loop.call_later(
                    self.redeliver_after, self._on_ack_timeout, env, env.deliveries)

    def _on_ack_timeout(self, env: Envelope, delivery: int) -> None:
        self._timers.pop(env.envelope_id, None)
        if env.acked or env.deliveries != delivery or self._closing:
            return
        if env.retry_attempt >= self.max_retries:
            env.given_up = True
            return
        env.retry_attempt += 1
        env.retry_reason = self.retry_reason_on_timeout
        self._outbox.append(env)
        self._pump_wake.set()

    # ----------------------------------------------------------------- HTTP mode (signed pushes)

    async def _push(self, url: str, body: str, content_type: str, *, signed: bool, secret: str | None,
                    extra: dict[str, str] | None = None) -> tuple[int, str]:
        timestamp = str(int(time.time()))
        key = secret or self.signing_secret
        headers = {"Content-Type": content_type, "X-Slack-Request-Timestamp": timestamp,
                   "X-Slack-Signature": signature(key if signed else key + "-wrong", timestamp, body),
                   "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)", **(extra or {})}
        async with (aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
                    session.post(url, data=body.encode(), headers=headers) as response):
            return response.status, await response.text()

    async def post_event(self, url: str, payload: JSON, *, signed: bool = True, secret: str | None = None,
                         retry_num: int | None = None, retry_reason: str | None = None) -> tuple[int, str]:
        """POST an Events API payload as JSON, signed (or with a wrong signature when
        ``signed=False``), with ``X-Slack-Retry-Num``/``-Reason`` when ``retry_num`` is given.
        Returns (HTTP status, body)."""
        extra = {} if retry_num is None else {"X-Slack-Retry-Num": str(retry_num),
                                              "X-Slack-Retry-Reason": retry_reason or "http_timeout"}
        return await self._push(url, json.dumps(payload), "application/json", signed=signed,
                                secret=secret, extra=extra)

    async def post_interaction(self, url: str, payload: JSON, *, signed: bool = True,
                               secret: str | None = None) -> tuple[int, str]:
        """POST an interactivity payload as the form field ``payload=<json>``, signed."""
        body = urllib.parse.urlencode({"payload": json.dumps(payload)})
        return await self._push(url, body, "application/x-www-form-urlencoded", signed=signed, secret=secret)

    async def post_command(self, url: str, payload: JSON, *, signed: bool = True,
                           secret: str | None = None) -> tuple[int, str]:
        """POST a slash command (``slash_command(..., deliver="none")``) as form fields, signed."""
        body = urllib.parse.urlencode(payload)
        return await self._push(url, body, "application/x-www-form-urlencoded", signed=signed, secret=secret)

    async def url_verification(self, url: str, *, challenge: str | None = None,
                               signed: bool = True) -> tuple[int, str]:
        """Send the ``url_verification`` challenge (kept in ``last_challenge``); the app must
        echo it. Returns (HTTP status, body)."""
        self.last_challenge = challenge or secrets.token_urlsafe(24)
        return await self.post_event(url, {"token": VERIFICATION_TOKEN, "type": "url_verification",
                                           "challenge": self.last_challenge}, signed=signed)

    # ----------------------------------------------------------------- HTTP plumbing

    async def _record(self, call: Call, status: int, body: JSON) -> None:
        call.status, call.result = status, body
        call.error = None if body.get("ok") else body.get("error")
        await self._notify()

    async def _api(self, request: web.Request) -> web.StreamResponse:
        call = Call(request.match_info["method"], {}, asyncio.get_running_loop().time())
        self.calls.append(call)
        headers = {"X-OAuth-Scopes": ",".join(sorted(self.scopes))}
        try:
            call.params = await self._read_params(request, call)
            auth = request.headers.get("Authorization", "")
            call.token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") \
                else call.params.pop("token", None)
            handler = self._handlers.get(call.method)
            if handler is None:
                raise SlackError("unknown_method", req_method=call.method)
            self._authorize(call, headers)
            fault = self._take_fault(call)
            if fault is not None and fault.hold is not None and not fault.after:
                await self._hold(call, fault.hold, request)
                fault = None
            if fault is not None and fault.error is None and not fault.after:
                await self._drop(call, request)
            if fault is not None and fault.error is not None:
                raise fault.error
            body: JSON = {"ok": True, **handler(call)}
            if fault is not None and fault.after and fault.hold is not None:
                call.result = body
                await self._hold_answer(call, request, fault.hold)
            elif fault is not None and fault.after:
                await self._drop(call, request)
            status = 200
        except SlackError as error:
            status, body = error.status, error.body()
            headers.update(error.headers)
        await self._record(call, status, body)
        return web.json_response(body, status=status, headers=headers)

    def _authorize(self, call: Call, headers: dict[str, str]) -> None:
        if not call.token:
            raise SlackError("not_authed")
        app_method = call.method in APP_TOKEN_METHODS
        if call.token not in (self.bot_token, self.app_token):
            raise SlackError("invalid_auth")
        if (call.token == self.app_token) != app_method:
            raise SlackError("not_allowed_token_type")
        needed = METHOD_SCOPES.get(call.method, ())
        headers["X-Accepted-OAuth-Scopes"] = ",".join(needed)
        if needed and not self.scopes & set(needed):
            raise SlackError("missing_scope", needed=",".join(needed),
                             provided=",".join(sorted(self.scopes)))

    async def _hold(self, call: Call, release: asyncio.Event, request: web.Request) -> None:
        call.status = -2
        await self._notify()
        while not release.is_set():
            if self._closing or request.transport is None or request.transport.is_closing():
                call.status = 499  # the client went away: the call never takes effect
                await self._notify()
                raise web.HTTPInternalServerError()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(release.wait(), 0.05)
        call.status = 0

    @staticmethod
    async def _read_params(request: web.Request, call: Call) -> JSON:
        raw: JSON = dict(request.query)
        if request.method != "POST":
            return decode_params(raw)
        if request.content_type == "application/json":
            body = await request.read()
            try:
                parsed = json.loads(body) if body else {}
            except ValueError:
                raise SlackError("invalid_json") from None
            raw.update(parsed if isinstance(parsed, dict) else {})
            return raw
        for key, value in (await request.post()).items():
            if isinstance(value, web.FileField):
                call.files[key] = UploadedFile(value.filename, value.file.read(), value.content_type)
            else:
                raw[key] = value
        return decode_params(raw)

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        """The upload URL files.getUploadURLExternal hands out: raw bytes or a multipart file."""
        file_id = request.match_info["file_id"]
        call = Call("file_upload", {"file_id": file_id}, asyncio.get_running_loop().time())
        self.calls.append(call)
        upload = next((u for u in self.uploads if u.file_id == file_id), None)
        if request.content_type.startswith("multipart/"):
            parts = [v for v in (await request.post()).values() if isinstance(v, web.FileField)]
            content = parts[0].file.read() if parts else b""
        else:
            content = await request.read()
        call.params["size"] = len(content)
        if upload is None or upload.completed:
            await self._record(call, 404, {"ok": False, "error": "file_not_found"})
            return web.Response(status=404, text="Not Found")
        upload.content = content
        await self._record(call, 200, {"ok": True})
        return web.Response(text=f"OK - {len(content)}", content_type="text/plain")

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """url_private(_download): needs ``Authorization: Bearer <bot token>`` (403 otherwise)."""
        key = request.match_info["key"]
        call = Call("file_download", {"path": request.path}, asyncio.get_running_loop().time())
        self.calls.append(call)
        call.token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip() or None
        stored = self.store.files.get(key.removeprefix(f"{self.team_id}-"))
        if stored is None:
            await self._record(call, 404, {"ok": False, "error": "file_not_found"})
            return web.Response(status=404, text="Not Found")
        if call.token != self.bot_token or "files:read" not in self.scopes:
            await self._record(call, 403, {"ok": False, "error": "not_authed"})
            return web.Response(status=403, text="Forbidden")
        await self._record(call, 200, {"ok": True, "file": stored.file_id})
        return web.Response(body=stored.content, content_type=stored.mimetype,
                            headers={"Content-Disposition": f'attachment; filename="{stored.name}"'})

    async def _response_url(self, request: web.Request) -> web.StreamResponse:
        """A response_url: replace/delete the original, or post in channel / ephemerally."""
        call = Call("response_url", {}, asyncio.get_running_loop().time())
        self.calls.append(call)
        target = self._response_urls.get(request.match_info["rid"])
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError:
            body = None
        if target is None or not isinstance(body, dict):
            await self._record(call, 404, {"ok": False, "error": "expired_url" if target is None
                                           else "invalid_payload"})
            return web.json_response(call.result, status=404)
        call.params = body
        channel, message_ts, user, thread_ts = target
        response = Response(body, call.time, channel, message_ts, user)
        self.responses.append(response)
        original = self.store.find(channel, message_ts) if message_ts else None
        if original is not None and response.delete_original:
            original.deleted = True
        elif original is not None and response.replace_original:
            self.store.edit(original, body.get("text", original.text), body.get("blocks"))
        elif response.response_type == "in_channel":
            self.store.add(Message(channel, self.store.new_ts(), str(body.get("text", "")),
                                   self.bot_user_id, self.bot_id, body.get("blocks"),
                                   body.get("thread_ts") or thread_ts))
        else:
            self.ephemerals.append(Ephemeral(channel, user, str(body.get("text", "")),
                                             body.get("blocks"), thread_ts, self.store.new_ts()))
        await self._record(call, 200, {"ok": True})
        return web.json_response({"ok": True})

    # ----------------------------------------------------------------- Web API methods

    def _auth_test(self, call: Call) -> JSON:
        return {"url": f"https://{TEAM_DOMAIN}.slack.com/", "team": "Fake Team",
                "user": self.store.users[self.bot_user_id]["name"], "team_id": self.team_id,
                "user_id": self.bot_user_id, "bot_id": self.bot_id, "is_enterprise_install": False}

    def _connections_open(self, call: Call) -> JSON:
        ticket = secrets.token_hex(16)
        self._tickets.add(ticket)
        return {"url": f"ws://127.0.0.1:{self.url.rsplit(':', 1)[1]}/link/?ticket={ticket}&app_id={APP_ID}"}
