"""Slack, on slack-bolt: Socket Mode or signed HTTP events in, the Web API out.

* **Ack first.** Every listener stores what it got (`emit`) and returns; bolt runs it before it
  answers Slack (`process_before_response`), so an envelope is acknowledged only once its message
  is in the inbox, and nothing else (the turn, a download, a decision) happens before the ack. A
  listener that cannot store raises (at once when the gateway's database is locked or failing:
  never counted against the event): Slack is not told "received" and delivers again. Events
  delivered again (`x-slack-retry-num`, a Socket Mode reconnect) and a mention that arrives both
  as `message` and as `app_mention` carry the same message `ts`: the inbox keeps one.
* **Where a conversation is.** A DM is its channel (a thread in it is a session of its own). In a
  channel, a message starts a thread under itself: `thread_id` is its `ts`, so the answer goes
  there, and each thread is one session. Follow-ups in a thread the agent is in need no mention
  (`Capabilities.follows_threads`; the gateway knows which threads those are).
* **Buttons** carry the gateway's data as `value` (nothing kept in memory: a press after a
  restart works); a press is acked at once and answered with an ephemeral message.
  `/chatgate <command>` is the same text command as typed (`@bot /stop` in a thread works too).
* **Sending** is mrkdwn in a section block with its Markdown as the `text` fallback; a message
  Slack rejects is sent again as plain text. A 429 pauses that method in that channel only; the
  outbox comes back after `Retry-After`. Streaming edits share one budget a second for the
  workspace (chat.update's tier), and a preview edit that finds it spent is skipped.
* **Working…** Slack bots have no typing indicator: an assistant app shows its thread status;
  elsewhere a placeholder (`working_text`) is the turn's first draft, which the answer replaces
  (the gateway records it like any draft, so a turn run again after a crash replaces it too).
* **Found again.** `chat.postMessage` has no idempotency key, so a post carries its key (`Reply.key`)
  in its message metadata; a post whose ts chatgate never learned (killed in between, or the
  connection broke) is looked up by that key (`reclaim`: `conversations.history`, or
  `conversations.replies` in a thread, from the message before it on) and updated instead of posted again.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from platforms.base import (
    Attachment,
    ButtonPress,
    Capabilities,
    ChatRef,
    NOT_STORED,
    DeliveryError,
    InboundMessage,
    Intake,
    PlatformAdapter,
    PlatformRefused,
    Reply,
    StorageUnavailable,
    shown_url,
)
from platforms.loops import start_supervised
from platforms.ratelimit import RateLimits
from platforms.slack.render import SECTION_LIMIT, escape, render_for_slack

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
COMMAND = "/chatgate"
REQUIRED_SCOPES = frozenset({"app_mentions:read", "channels:history", "chat:write", "commands", "files:read",
                             "files:write", "groups:history", "im:history", "im:write", "mpim:history"})
BOT_TOKEN_HELP = ("Slack refused the bot token ({error}): set platforms.slack.bot_token / SLACK_BOT_TOKEN to the "
                  "app's Bot User OAuth Token (xoxb-…, OAuth & Permissions)")
APP_TOKEN_HELP = ("Slack refused the app-level token ({error}): set platforms.slack.app_token / SLACK_APP_TOKEN to "
                  "an xapp-… token with connections:write (Basic Information → App-Level Tokens), and turn Socket "
                  "Mode on")
TOKEN_ERRORS = frozenset({"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired",
                          "not_allowed_token_type"})
REJECTED = frozenset({"invalid_blocks", "invalid_blocks_format", "msg_too_long", "invalid_arguments",
                      "msg_blocks_too_long", "too_many_attachments"})
TRANSIENT = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})
GONE = frozenset({"channel_not_found", "not_in_channel", "is_archived", "message_not_found", "cant_update_message",
                  "user_not_found", "restricted_action", "no_permission", "missing_scope", "ekm_access_denied"})
TAKEN_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
WORKING = "Working…"
MARK = "chatgate_reply"  # the metadata event type of a post that carries its key (`reclaim`)
SEARCHED = 200  # messages after the one before it that `reclaim` reads (one page)
EDITS_PER_SECOND = 1.0  # chat.update's tier (about 50 a minute) for streaming previews, the whole workspace
INTAKE_TRIES = 2
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_LINK = re.compile(r"<((?:https?|mailto):[^|>]+)(?:\|([^>]*))?>")
_CHANNEL_REF = re.compile(r"<#C\w+\|([^>]*)>")


def _kind(mime: str) -> str:
    major = mime.split("/", 1)[0]
    return {"image": "image", "audio": "audio", "video": "video"}.get(major, "document")


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    """A response header, whatever its case (slack_sdk keeps aiohttp's)."""
    for key, value in (headers or {}).items():
        if key.lower() == name.lower():
            return str(value[0] if isinstance(value, list) else value)
    return None


def _api_error(exc: SlackApiError) -> str:
    return str(exc.response.get("error") or f"HTTP {exc.response.status_code}")


def _start_error(exc: SlackApiError, step: str, token_help: str) -> RuntimeError:
    """One line for a start-up call Slack refused: what to fix when it is the token (`PlatformRefused`: trying
    again cannot help); anything else (rate limited, a 5xx) may pass."""
    error = _api_error(exc)
    if error in TOKEN_ERRORS:
        return PlatformRefused(token_help.format(error=error))
    return RuntimeError(f"Slack refused {step}: {error}")


class _Rejected(Exception):
    """Slack refused the message's form (blocks, length): the caller sends it plainly."""


class SlackAdapter(PlatformAdapter):
    name = "slack"
    capabilities = Capabilities(max_length=SECTION_LIMIT, markup="mrkdwn", can_edit=True, can_buttons=True,
                                can_typing=True, can_files=True, edit_interval=1.5, follows_threads=True)

    def __init__(self, bot_token: str, *, mode: str = "socket", app_token: str | None = None,
                 signing_secret: str | None = None, api_base: str = "https://slack.com/api/",
                 allow_bots: bool = False, assistant: bool = False, max_file_bytes: int = 20 * 1024 * 1024) -> None:
        super().__init__()
        self._token = bot_token
        self.mode = mode
        self.capabilities = replace(SlackAdapter.capabilities, single_connection=mode == "socket")
        self._app_token = app_token
        self._signing_secret = signing_secret
        self.api_base = api_base.rstrip("/") + "/"
        self.allow_bots = allow_bots
        self.assistant = assistant
        self.max_file_bytes = max_file_bytes
        self.client: AsyncWebClient | None = None
        self.app: AsyncApp | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self._watch: asyncio.Task[None] | None = None
        self._http: aiohttp.ClientSession | None = None
        self._me = ""
        self._bot_id = ""
        self._team = ""
        self._limits = RateLimits()
        self._edits = RateLimits(EDITS_PER_SECOND, burst=10)

    # -- lifecycle ------------------------------------------------------------------------

    async def _start(self) -> None:
        # one connection pool for every call (slack_sdk opens a session per call without one); no
        # retries of its own: a call retried after a dropped connection may post a message twice
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        self.client = AsyncWebClient(token=self._token, base_url=self.api_base, session=self._http, retry_handlers=[],
                                     timeout=30)
        await self._authenticate()  # (a failed start is released by `_stop`)
        self.app = self._new_app()
        if self.mode == "socket":
            self._socket = AsyncSocketModeHandler(self.app, self._app_token, ping_interval=5)
            await self._open_socket()
            self._watch = start_supervised("slack-socket-watch", self._watch_socket,
                                           on_down=lambda reason: self.set_health("down", reason))
        log.info("slack: connected as %s (%s mode)", self._me, self.mode)

    def connection_settings(self) -> str:
        return f"platforms.slack.api_base ({shown_url(self.api_base)})"

    async def _authenticate(self) -> None:
        assert self.client is not None
        try:
            auth = await self.client.auth_test()
        except SlackApiError as exc:
            raise _start_error(exc, "auth.test", BOT_TOKEN_HELP) from None
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise RuntimeError(f"Slack could not be reached: {type(exc).__name__}: {exc}") from None
        granted = _header(auth.headers, "x-oauth-scopes")
        missing = sorted(REQUIRED_SCOPES - {s.strip() for s in granted.split(",")}) if granted is not None else []
        if missing:
            raise PlatformRefused(f"the Slack app lacks the scopes {', '.join(missing)}: add them under OAuth & "
                                  "Permissions → Bot Token Scopes (deploy/slack-app-manifest.yaml lists them all) "
                                  "and reinstall the app")
        self._me, self._bot_id, self._team = str(auth["user_id"]), str(auth.get("bot_id") or ""), \
            str(auth.get("team_id") or "")

    def _new_app(self) -> AsyncApp:
        async def authorize() -> AuthorizeResult:  # who the app is, from the auth.test at start (else bolt
            return AuthorizeResult(enterprise_id=None, team_id=self._team, bot_token=self._token,  # calls it on
                                   bot_user_id=self._me, bot_id=self._bot_id)  # the first event: intake waits)

        listeners_client = AsyncWebClient(base_url=self.api_base, session=self._http, retry_handlers=[], timeout=30)
        app = AsyncApp(client=listeners_client, authorize=authorize, signing_secret=self._signing_secret or "",
                       process_before_response=True, request_verification_enabled=self.mode == "http",
                       url_verification_enabled=True, logger=log)
        app.event("message")(self._on_message)
        app.event("app_mention")(self._on_message)
        app.event(re.compile(".*"))(self._on_other_event)  # acked, so Slack does not send it again
        app.action(re.compile(".*"))(self._on_action)
        app.command(COMMAND)(self._on_command)
        return app

    async def _open_socket(self) -> None:
        assert self._socket is not None and self.client is not None
        try:  # slack_sdk retries a refused token for ever without a word: ask once ourselves first
            await self.client.apps_connections_open(app_token=self._app_token or "")
            await self._socket.connect_async()
        except SlackApiError as exc:
            raise _start_error(exc, "the Socket Mode connection", APP_TOKEN_HELP) from None

    async def _watch_socket(self) -> None:
        """Tell /readyz the truth while slack_sdk reconnects by itself (it does; this only watches)."""
        assert self._socket is not None
        while True:
            await asyncio.sleep(1.0)
            if await self._socket.client.is_connected():
                self.set_health("ready")
            else:
                self.set_health("down", "the Socket Mode connection is closed; reconnecting")

    async def _stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
            self._watch = None
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.close_async()
        self.app = None
        self.client = None
        if self._http is not None:
            await self._http.close()
            self._http = None

    def http_routes(self) -> Sequence[Any]:
        return [web.post(EVENTS_PATH, self._on_http)] if self.mode == "http" else []

    async def _on_http(self, request: web.Request) -> web.StreamResponse:
        """Events, interactions and slash commands, signed: bolt checks the signature first."""
        if self.app is None:
            return web.json_response({"error": "starting"}, status=503)
        return await to_aiohttp_response(await self.app.async_dispatch(await to_bolt_request(request)))

    # -- receiving ------------------------------------------------------------------------

    async def _on_message(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        if event.get("subtype") not in TAKEN_SUBTYPES or not event.get("user"):
            return  # edits, deletions, joins, and messages without a person
        if event.get("user") == self._me or (event.get("bot_id") and event.get("bot_id") == self._bot_id):
            return
        if event.get("bot_id") and not self.allow_bots:
            return
        await self.take(f"{event.get('channel')}/{event.get('ts')}", lambda: self._inbound(event),
                        lambda: json.dumps(body, default=str), tries=INTAKE_TRIES, pause=0.3,
                        hold=False)  # not stored: not acked, and Slack delivers it again

    async def _on_other_event(self, event: dict[str, Any]) -> None:
        log.debug("slack: ignored a %s event", event.get("type"))

    def _inbound(self, event: dict[str, Any]) -> InboundMessage:
        channel, ts = str(event["channel"]), str(event["ts"])
        kind = event.get("channel_type") or ("im" if channel.startswith("D") else "channel")
        chat_type = "dm" if kind == "im" else "group"
        raw = str(event.get("text") or "")
        mention = f"<@{self._me}>"
        mentioned = mention in raw or event.get("type") == "app_mention"
        text = _readable(raw.replace(mention, "")).strip()
        thread = event.get("thread_ts")
        thread_id = str(thread) if thread else (None if chat_type == "dm" else ts)
        return InboundMessage(
            platform=self.name, chat_id=channel, chat_type=chat_type, user_id=str(event["user"]),  # type: ignore[arg-type]
            text=text, message_id=ts, thread_id=thread_id,
            attachments=tuple(self._attachment(f) for f in event.get("files") or () if isinstance(f, dict)
                              and f.get("mode") not in ("tombstone", "hidden_by_limit")),
            bot_mentioned=chat_type == "dm" or mentioned)

    def _attachment(self, f: dict[str, Any]) -> Attachment:
        name = str(f.get("name") or f.get("title") or f.get("id") or "file")
        mime = str(f.get("mimetype") or "application/octet-stream")
        size = int(f.get("size") or 0)
        if size > self.max_file_bytes:
            return Attachment(_kind(mime), name, mime, size, error=(
                f"{name} is {size / 1e6:.1f} MB; the limit is {self.max_file_bytes / 1e6:.0f} MB"))
        url = f.get("url_private_download") or f.get("url_private")
        return Attachment(_kind(mime), name, mime, size, ref=str(url) if url else None,
                          error=None if url else f"{name} came without a download link")

    async def fetch(self, attachment: Attachment, folder: Path) -> Attachment:
        if attachment.ref is None or attachment.error or attachment.path or self._http is None:
            return attachment
        path = folder / _SAFE_NAME.sub("_", attachment.name)
        try:
            if not self._ours(attachment.ref):  # the bot token goes to Slack only
                raise ValueError("its link does not point at Slack")
            async with self._http.get(attachment.ref, headers={"Authorization": f"Bearer {self._token}"}) as resp:
                if resp.status != 200 or resp.content_type == "text/html":  # a login page: the token was refused
                    raise ValueError(f"Slack answered {resp.status} {resp.content_type}")
                data = await resp.content.read(self.max_file_bytes + 1)
            if len(data) > self.max_file_bytes:
                raise ValueError(f"it is larger than {self.max_file_bytes / 1e6:.0f} MB")
            await asyncio.to_thread(_write, path, data)
        except (aiohttp.ClientError, OSError, ValueError, asyncio.TimeoutError) as exc:
            log.warning("slack: could not download %s: %s", attachment.name, exc)
            return Attachment(attachment.kind, attachment.name, attachment.mime_type, attachment.size,
                              error=f"{attachment.name} could not be downloaded ({exc})")
        return Attachment(attachment.kind, attachment.name, attachment.mime_type, len(data), str(path))

    def _ours(self, url: str) -> bool:
        host = (urlsplit(url).hostname or "").lower()
        return host == (urlsplit(self.api_base).hostname or "").lower() or host == "slack.com" \
            or host.endswith(".slack.com")

    async def _on_action(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()  # at once: the decision and its edits run in a task of the gateway's
        channel = str((body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id") or "")
        user = body.get("user") or {}
        message = body.get("message") or {}
        ts = str((body.get("container") or {}).get("message_ts") or message.get("ts") or "")
        thread = message.get("thread_ts") or (body.get("container") or {}).get("thread_ts")

        async def answer(text: str) -> None:  # only the presser sees it
            if text and self.client is not None:
                await self.client.chat_postEphemeral(channel=channel, user=str(user.get("id")), text=escape(text),
                                                     thread_ts=thread)

        press = ButtonPress(platform=self.name, chat_id=channel, user_id=str(user.get("id") or ""),
                            user_name=str(user.get("username") or user.get("name") or ""), message_id=ts,
                            data=str(action.get("value") or action.get("action_id") or ""),
                            thread_id=str(thread) if thread else None, on_answer=answer)
        try:
            await self.emit(press)
        except Exception as exc:
            log.warning("slack: a button press could not be taken: %s", exc)
            await answer("That did not work; please try again.")

    async def _on_command(self, ack: Any, command: dict[str, Any]) -> None:
        """`/chatgate new` is the text command `/new`, acknowledged (to the user alone) once stored."""
        words = str(command.get("text") or "").strip().lstrip("/")
        text = f"/{words}" if words else "/help"
        channel = str(command.get("channel_id") or "")
        msg = InboundMessage(platform=self.name, chat_id=channel, chat_type="dm" if channel.startswith("D") else "group",
                             user_id=str(command.get("user_id") or ""), user_name=str(command.get("user_name") or ""),
                             text=text, message_id=f"cmd:{command.get('trigger_id')}", bot_mentioned=True)
        try:  # (not held while the gateway cannot store: Slack wants the ack within 3 s)
            intake = await self.take(f"{channel}/{msg.message_id}", lambda: msg,
                                     lambda: json.dumps(command, default=str), tries=INTAKE_TRIES, pause=0.3, hold=False)
            shown = {Intake.STORED: f"`{text}`", Intake.DUPLICATE: f"`{text}` (already received)",
                     Intake.REFUSED: f"`{text}` was not taken (see the reply)",
                     Intake.IGNORED: "This bot does not answer you here."}.get(intake, "That did not work; try again.")
        except StorageUnavailable:
            shown = f"`{text}` {NOT_STORED}"
        await ack(text=escape(shown))

    # -- sending --------------------------------------------------------------------------

    def render(self, markdown: str) -> list[Reply]:
        return render_for_slack(markdown)

    async def _call(self, method: str, chat: ChatRef, run: Callable[[], Awaitable[Any]] | None = None,
                    **params: Any) -> dict[str, Any]:
        """One Web API call (`method` with `params`, or `run` for the SDK's own helpers); errors
        become `DeliveryError` (or `_Rejected` for a refused form); a 429 pauses `method` here."""
        if self.client is None:
            raise DeliveryError("slack is not connected")
        key = f"{method}:{chat.chat_id}"
        left = self._limits.paused_for(key)
        if left:
            raise DeliveryError(f"{method} is rate limited in {chat.chat_id} for {left:.0f}s", retry_after=left)
        try:
            response = await (run() if run is not None else self.client.api_call(
                method, json={k: v for k, v in params.items() if v is not None}))
        except SlackApiError as exc:
            error, status = _api_error(exc), exc.response.status_code
            if status == 429:
                pause = float(_header(exc.response.headers, "retry-after") or 1)
                self._limits.pause(key, pause)
                raise DeliveryError(f"{method} rate limited for {pause:.0f}s", retry_after=pause) from None
            if error in REJECTED:
                raise _Rejected(error) from None
            raise DeliveryError(f"slack refused {method}: {error}",
                                retryable=status >= 500 and error not in GONE or error in TRANSIENT) from None
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise DeliveryError(f"slack unreachable: {type(exc).__name__}: {exc}") from None
        return dict(response.data) if isinstance(response.data, dict) else {}

    @staticmethod
    def _message(reply: Reply, *, plain: bool = False) -> dict[str, Any]:
        """`text` and `blocks` of a message. A final reply is mrkdwn; a streaming preview (the model's
        raw Markdown) and the fallback for a rejected message are plain text, which Slack shows as
        it is. The `text` (notifications, screen readers) is always escaped: it never pings."""
        raw = reply.plain if plain and reply.plain else reply.text
        literal = plain or not reply.final
        section = {"type": "plain_text", "text": raw[:SECTION_LIMIT] or " "} if literal \
            else {"type": "mrkdwn", "text": raw or " "}
        blocks: list[dict[str, Any]] = [{"type": "section", "text": section}]
        for row in reply.buttons:
            blocks.append({"type": "actions", "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": b.text[:75]}, "action_id": b.data[:255],
                 "value": b.data[:2000], **({"style": "primary"} if i == 0 else {})} for i, b in enumerate(row)]})
        fallback = escape(reply.plain) if reply.plain and not literal else escape(raw) if literal else raw
        return {"text": fallback[:4000], "blocks": blocks}

    async def send(self, chat: ChatRef, reply: Reply) -> str:
        common = {"channel": chat.chat_id, "thread_ts": chat.thread_id, "unfurl_links": False, "unfurl_media": False,
                  "metadata": {"event_type": MARK, "event_payload": {"key": reply.key}} if reply.key else None}
        try:
            data = await self._call("chat.postMessage", chat, **self._message(reply), **common)
        except _Rejected as exc:
            log.info("slack rejected a message (%s); sending it as plain text", exc)
            try:
                data = await self._call("chat.postMessage", chat, **self._message(reply, plain=True), **common)
            except _Rejected as again:
                raise DeliveryError(f"slack rejected the message: {again}", retryable=False) from None
        return str(data["ts"])

    async def edit(self, chat: ChatRef, message_id: str, reply: Reply) -> None:
        if not reply.final:  # a streaming preview: within the workspace's budget, else skipped
            if not self._edits.try_take():
                raise DeliveryError("chat.update budget spent", retry_after=1.0 / EDITS_PER_SECOND)
        try:
            await self._call("chat.update", chat, channel=chat.chat_id, ts=message_id, **self._message(reply))
        except _Rejected:
            try:
                await self._call("chat.update", chat, channel=chat.chat_id, ts=message_id,
                                 **self._message(reply, plain=True))
            except _Rejected as again:
                raise DeliveryError(f"slack rejected the edit: {again}", retryable=False) from None

    async def reclaim(self, chat: ChatRef, reply: Reply, after: str | None, known: set[str]) -> str | None:
        """The bot's post in `chat` after `after` whose metadata carries `reply.key`, updated to `reply`."""
        client = self.client
        if client is None or not reply.key:
            return None
        search = dict(channel=chat.chat_id, oldest=after, include_all_metadata=True, limit=SEARCHED)
        if chat.thread_id:
            data = await self._call("conversations.replies", chat, lambda: client.conversations_replies(
                ts=chat.thread_id, **search))
        else:
            data = await self._call("conversations.history", chat, lambda: client.conversations_history(**search))
        for message in data.get("messages") or ():
            mark = message.get("metadata") or {}
            if (mark.get("event_type") == MARK and (mark.get("event_payload") or {}).get("key") == reply.key
                    and message.get("bot_id") == self._bot_id and str(message.get("ts")) not in known):
                await self.edit(chat, str(message["ts"]), reply)
                return str(message["ts"])
        return None

    async def send_file(self, chat: ChatRef, path: Path, caption: str = "") -> str:
        if path.stat().st_size > self.max_file_bytes:
            raise DeliveryError(f"{path.name} is larger than the {self.max_file_bytes / 1e6:.0f} MB upload limit",
                                retryable=False)
        client = self.client
        if client is None:
            raise DeliveryError("slack is not connected")
        try:
            response = await self._call("files.upload", chat, lambda: client.files_upload_v2(
                channel=chat.chat_id, thread_ts=chat.thread_id, file=str(path), filename=path.name,
                initial_comment=escape(caption) if caption else None))
        except _Rejected as exc:
            raise DeliveryError(f"slack refused the file: {exc}", retryable=False) from None
        files = response.get("files") or [response.get("file") or {}]
        return str(files[0].get("id") or "")

    async def open_dm(self, user_id: str) -> ChatRef:
        data = await self._call("conversations.open", ChatRef(self.name, user_id), users=user_id)
        return ChatRef(self.name, str(data["channel"]["id"]))

    # -- working indicator ----------------------------------------------------------------

    def _assistant_thread(self, chat: ChatRef) -> bool:
        return self.assistant and chat.chat_id.startswith("D") and chat.thread_id is not None

    def working_text(self, chat: ChatRef) -> str | None:
        return None if self._assistant_thread(chat) else WORKING

    async def typing(self, chat: ChatRef, active: bool) -> None:
        if self._assistant_thread(chat):
            await self._call("assistant.threads.setStatus", chat, channel_id=chat.chat_id,
                             thread_ts=chat.thread_id, status="is thinking…" if active else "")


def _readable(text: str) -> str:
    """A Slack message's text as a person typed it: links and channel names plain, entities decoded."""
    text = _LINK.sub(lambda m: f"{m.group(2)} ({m.group(1)})" if m.group(2) and m.group(2) != m.group(1)
                     else m.group(1), text)
    text = _CHANNEL_REF.sub(lambda m: f"#{m.group(1)}", text)
    return html.unescape(text) if "&" in text else text


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
