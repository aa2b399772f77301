"""Discord, on discord.py: the gateway for events, its HTTP client for everything sent.

* **Intake.** Each gateway event runs in a task of its own (discord.py's dispatch), so a slow one
  holds up no other. A message is described (attachments by URL, fetched when the turn starts)
  and handed to the gateway; a message that cannot be stored after three tries is set aside as
  `Unreadable`, while a gateway that cannot store at all (its database locked) is waited for
  (Discord sends nothing twice). Messages come again after a RESUME or a reconnect: the inbox
  drops the copies.
* **Where a conversation is.** A DM is its DM channel; a server channel is `chat_id` (per user,
  as `gateway.group_sessions` says); a thread is `chat_id` = its parent and `thread_id` = the
  thread. With `auto_thread`, a mention in a channel becomes a thread started from that message —
  whose id Discord makes equal to the message's, so the session is known at intake without a
  network call, and the thread is created on the first send into it.
* **Buttons** carry the gateway's data as `custom_id` (nothing kept in memory, so a press after a
  restart works); a press is deferred (the 3-second deadline) and answered with an ephemeral
  follow-up. **Slash commands** become the same text commands as typed ones, acknowledged with an
  ephemeral line once stored; they are registered at start only when they changed.
* **Sending** never pings: `allowed_mentions` is empty except for the user a reply answers. Every
  part, and a turn's draft, carries its key as a nonce with `enforce_nonce`, so a send made again
  (after an unclear failure, or by a turn run again after a crash that came before chatgate heard
  the message's id) is answered with the message Discord already made, which then shows the new
  text; Discord keeps nonces for a few minutes. discord.py waits out short 429s per route (other
  channels go on); a long one comes back as `DeliveryError(retry_after=…)` for the outbox to wait out.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any, Awaitable, Callable, Sequence, TypeVar

import aiohttp
import discord
import yarl
from discord.http import handle_message_parameters

from platforms.base import (
    Attachment,
    ButtonPress,
    Capabilities,
    ChatRef,
    DeliveryError,
    NOT_STORED,
    InboundMessage,
    Intake,
    PlatformAdapter,
    PlatformRefused,
    Reply,
    StorageUnavailable,
    failure_text,
    shown_url,
)
from platforms.discord.render import DISCORD_LIMIT, render_for_discord
from platforms.loops import start_supervised

log = logging.getLogger(__name__)
T = TypeVar("T")

TOKEN_HELP = ("Discord refused the bot token (platforms.discord.token / DISCORD_BOT_TOKEN): copy it again from the "
              "Developer Portal, Bot → Reset Token")
INTENT_HELP = ("Discord refused the Message Content intent: enable it in the Developer Portal, Bot → Privileged "
               "Gateway Intents → Message Content Intent, then restart chatgate")
RATE_WAIT = 30.0  # discord.py waits out 429s up to this long itself; longer ones go back to the outbox
UNKNOWN_CHANNEL = 10003
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_BUTTON_STYLE = {0: 1, 1: 2}  # first button of a row primary, the rest secondary


class _FirstConnection(logging.Filter):
    """While the first connection to the gateway is tried, discord.py's "Attempting a reconnect" (an
    ERROR with its traceback, at every failure) is the failure of this try: kept as its reason, not
    logged — the gateway says it once, and tries again at its own pace (`gateway.connections`)."""

    def __init__(self) -> None:
        super().__init__()
        self.failure: BaseException | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith("Attempting a reconnect") and record.exc_info:
            self.failure = record.exc_info[1]
            return False
        return True


def _kind(content_type: str | None) -> str:
    major = (content_type or "").split("/", 1)[0]
    return {"image": "image", "audio": "audio", "video": "video"}.get(major, "document")


class DiscordAdapter(PlatformAdapter):
    name = "discord"
    capabilities = Capabilities(max_length=DISCORD_LIMIT, markup="markdown", can_edit=True, can_buttons=True,
                                can_typing=True, can_files=True, edit_interval=1.2, keyed_sends=True)

    def __init__(self, token: str, *, api_base: str = "https://discord.com/api/v10", gateway_url: str | None = None,
                 auto_thread: bool = False, max_file_bytes: int = 25 * 1024 * 1024) -> None:
        super().__init__()
        self._token = token
        self.api_base = api_base.rstrip("/")
        self.gateway_url = gateway_url
        self.auto_thread = auto_thread
        self.max_file_bytes = max_file_bytes
        self.client: discord.Client | None = None
        self._gateway: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._lost = asyncio.Event()  # the first connection to the gateway failed before READY
        self._thread_names: dict[str, str] = {}  # a thread to open (its id = the message's) → its name

    # -- lifecycle ------------------------------------------------------------------------

    def _new_client(self) -> discord.Client:
        discord.http.Route.BASE = self.api_base  # class attributes: one Discord bot per process
        if self.gateway_url:
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.gateway_url)
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = intents.message_content = True
        client = discord.Client(intents=intents, max_messages=None, chunk_guilds_at_startup=False,
                                member_cache_flags=discord.MemberCacheFlags.none(), max_ratelimit_timeout=RATE_WAIT,
                                guild_ready_timeout=0.5)
        client.event(self.on_ready)
        client.event(self.on_resumed)
        client.event(self.on_disconnect)
        client.event(self.on_message)
        client.event(self.on_interaction)
        return client

    def connection_settings(self) -> str:
        gateway = f" and platforms.discord.gateway_url ({shown_url(self.gateway_url)})" if self.gateway_url else ""
        return f"platforms.discord.api_base ({shown_url(self.api_base)}){gateway}"

    async def _login(self) -> discord.Client:
        client = self.client = self._new_client()
        try:
            await client.login(self._token)
        except discord.LoginFailure:
            await client.close()
            raise PlatformRefused(TOKEN_HELP) from None
        return client

    async def _start(self) -> None:
        """Log in (REST), then connect to the gateway until READY. A first connection that fails is this
        try's failure (tried again later, from the login); once READY, discord.py reconnects and resumes
        by itself. A failed start is released by `_stop`."""
        await self._login()
        self._ready.clear()
        self._lost.clear()
        self._gateway = start_supervised("discord-gateway", self._run_gateway,
                                         on_down=lambda reason: self.set_health("down", reason))
        settled = [asyncio.ensure_future(self._ready.wait()), asyncio.ensure_future(self._lost.wait())]
        first = _FirstConnection()
        logging.getLogger("discord.client").addFilter(first)
        try:
            await asyncio.wait({*settled, self._gateway}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            logging.getLogger("discord.client").removeFilter(first)
            for waiter in settled:
                waiter.cancel()
        if self.health.state == "failed":  # a refusal the gateway gave (a missing intent): said once, by `fail`
            raise PlatformRefused(self.health.error or INTENT_HELP)
        if not self._ready.is_set():
            raise RuntimeError("Discord's gateway could not be reached" +
                               (f": {failure_text(first.failure)}" if first.failure else ""))
        log.info("discord: %s connected", self.client.user if self.client else "?")

    async def _run_gateway(self) -> None:
        """The gateway connection; discord.py reconnects and resumes by itself, this restarts it when it gives up."""
        client = self.client
        if client is None or client.is_closed():
            client = await self._login()
        try:
            await client.connect(reconnect=True)
        except discord.PrivilegedIntentsRequired:
            self.fail(INTENT_HELP)
        except discord.LoginFailure:
            self.fail(TOKEN_HELP)

    async def _stop(self) -> None:
        client, self.client = self.client, None
        if self._gateway is not None:
            self._gateway.cancel()
            await asyncio.gather(self._gateway, return_exceptions=True)
            self._gateway = None
        if client is not None:
            await client.close()

    async def on_ready(self) -> None:
        self._ready.set()
        self.set_health("ready")

    async def on_resumed(self) -> None:
        self.set_health("ready")

    async def on_disconnect(self) -> None:
        if self.running:
            self.set_health("down", "the gateway connection was lost; reconnecting")
        elif not self._ready.is_set():  # still starting: this try failed (see `_start`)
            self._lost.set()

    @property
    def _me(self) -> int:
        assert self.client is not None and self.client.user is not None
        return self.client.user.id

    # -- slash commands -------------------------------------------------------------------

    async def set_commands(self, commands: dict[str, str]) -> None:
        """Register the chat commands as application commands, only when they changed."""
        client = self.client
        if client is None or client.application_id is None:
            return
        wanted = [{"name": name, "type": 1, "description": text[:100],
                   "options": [{"type": 3, "name": "text", "description": "what follows the command",
                                "required": False}] if f"/{name} " in text else []}
                  for name, text in commands.items()]
        try:
            current = await client.http.get_global_commands(client.application_id)
            if _shape(current) != _shape(wanted):
                await client.http.bulk_upsert_global_commands(client.application_id, wanted)
                log.info("discord: registered %d slash commands", len(wanted))
        except discord.HTTPException as exc:
            log.warning("discord: could not register slash commands: %s", exc)

    # -- receiving ------------------------------------------------------------------------

    async def on_message(self, message: discord.Message) -> None:
        if self.client is None or message.author.bot or message.author.id == self._me:
            return  # its own messages, and other bots'
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return  # "thread created", pins, joins: not conversation
        await self.take(str(message.id), lambda: self._inbound(message), lambda: repr(message))

    def _place(self, channel: Any, guild: Any) -> tuple[str, str | None, str]:
        """(chat id, thread id, chat type) of a channel."""
        if guild is None:
            return str(channel.id), None, "dm"
        parent = getattr(channel, "parent_id", None)
        if isinstance(channel, discord.Thread) or (parent and getattr(channel, "type", None) in
                                                     (discord.ChannelType.public_thread,
                                                      discord.ChannelType.private_thread)):
            return str(parent), str(channel.id), "group"
        return str(channel.id), None, "group"

    def _inbound(self, message: discord.Message) -> InboundMessage:
        me = self._me
        chat_id, thread_id, chat_type = self._place(message.channel, message.guild)
        mentioned = any(user.id == me for user in message.mentions)
        replied = message.reference is not None and isinstance(message.reference.resolved, discord.Message) \
            and message.reference.resolved.author.id == me
        own_thread = isinstance(message.channel, discord.Thread) and message.channel.owner_id == me
        text = re.sub(rf"<@!?{me}>", "", message.content).strip()
        reply_in = None
        if self.auto_thread and chat_type == "group" and thread_id is None and (mentioned or replied):
            thread_id = str(message.id)  # Discord gives a thread started from a message that message's id
            self._thread_names[thread_id] = (text.splitlines() or ["Conversation"])[0][:90] or "Conversation"
            reply_in = ChatRef(self.name, chat_id, thread_id)
        return InboundMessage(
            platform=self.name, chat_id=chat_id, chat_type=chat_type, user_id=str(message.author.id),  # type: ignore[arg-type]
            user_name=message.author.display_name, text=text, message_id=str(message.id), thread_id=thread_id,
            attachments=tuple(self._attachment(a) for a in message.attachments),
            reply_to=str(message.reference.message_id) if message.reference and message.reference.message_id else None,
            bot_mentioned=chat_type == "dm" or mentioned or replied or own_thread, reply_in=reply_in)

    def _attachment(self, a: discord.Attachment) -> Attachment:
        mime = a.content_type or "application/octet-stream"
        if a.size > self.max_file_bytes:
            return Attachment(_kind(mime), a.filename, mime, a.size, error=(
                f"{a.filename} is {a.size / 1e6:.1f} MB; the limit is {self.max_file_bytes / 1e6:.0f} MB"))
        return Attachment(_kind(mime), a.filename, mime, a.size, ref=a.url)

    async def fetch(self, attachment: Attachment, folder: Path) -> Attachment:
        if attachment.ref is None or attachment.error or attachment.path or self.client is None:
            return attachment
        path = folder / _SAFE_NAME.sub("_", attachment.name)
        try:
            data = await self.client.http.get_from_cdn(attachment.ref)
            if len(data) > self.max_file_bytes:
                raise ValueError(f"it is {len(data) / 1e6:.1f} MB; the limit is {self.max_file_bytes / 1e6:.0f} MB")
            await asyncio.to_thread(_write, path, data)
        except (discord.HTTPException, aiohttp.ClientError, OSError, ValueError) as exc:
            log.warning("discord: could not download %s: %s", attachment.name, exc)
            return Attachment(attachment.kind, attachment.name, attachment.mime_type, attachment.size,
                              error=f"{attachment.name} could not be downloaded ({exc})")
        return Attachment(attachment.kind, attachment.name, attachment.mime_type, len(data), str(path))

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        if interaction.type == discord.InteractionType.component:
            await self.take(str(interaction.id), lambda: self._press(interaction), lambda: repr(interaction.data))
        elif interaction.type == discord.InteractionType.application_command:
            await self._command(interaction)

    def _press(self, interaction: discord.Interaction) -> ButtonPress:
        chat_id, thread_id, _ = self._place(interaction.channel, interaction.guild_id)

        async def ack() -> None:  # within Discord's 3 seconds: "received", the message stays as it is
            if not interaction.response.is_done():
                await interaction.response.defer()

        async def answer(text: str) -> None:  # only the presser sees it
            if text:
                await interaction.followup.send(text[:DISCORD_LIMIT], ephemeral=True)

        return ButtonPress(platform=self.name, chat_id=chat_id, user_id=str(interaction.user.id),
                           user_name=interaction.user.display_name, data=str((interaction.data or {}).get("custom_id", "")),
                           message_id=str(interaction.message.id) if interaction.message else "", thread_id=thread_id,
                           on_ack=ack, on_answer=answer)

    async def _command(self, interaction: discord.Interaction) -> None:
        """A slash command: the same text command a person could type, acknowledged once stored."""
        data = interaction.data or {}
        args = " ".join(str(o.get("value", "")) for o in data.get("options", []) if o.get("value") not in (None, ""))
        text = f"/{data.get('name', '')} {args}".strip()
        chat_id, thread_id, chat_type = self._place(interaction.channel, interaction.guild_id)
        msg = InboundMessage(platform=self.name, chat_id=chat_id, chat_type=chat_type,  # type: ignore[arg-type]
                             user_id=str(interaction.user.id), user_name=interaction.user.display_name, text=text,
                             message_id=f"i{interaction.id}", thread_id=thread_id, bot_mentioned=True)
        try:  # (not held while the gateway cannot store: Discord wants its answer within 3 s)
            intake = await self.take(str(interaction.id), lambda: msg, lambda: repr(data), hold=False)
            shown = {Intake.STORED: f"`{text}`", Intake.DUPLICATE: f"`{text}` (already received)",
                     Intake.REFUSED: f"`{text}` was not taken (see the reply)",
                     Intake.IGNORED: "This bot does not answer you here."}.get(intake, "That did not work; try again.")
        except StorageUnavailable:
            shown = f"`{text}` {NOT_STORED}"
        try:
            await interaction.response.send_message(shown, ephemeral=True)
        except discord.HTTPException as exc:
            log.warning("discord: could not acknowledge /%s: %s", data.get("name"), exc)

    # -- sending --------------------------------------------------------------------------

    def render(self, markdown: str) -> list[Reply]:
        return render_for_discord(markdown)

    async def _rest(self, chat: ChatRef, call: Callable[[], Awaitable[T]]) -> T:
        """One REST call; errors become `DeliveryError`. A send into a thread that is still to be
        opened (auto_thread) opens it from its message and tries again."""
        if self.client is None:
            raise DeliveryError("discord is not connected")
        try:
            try:
                return await call()
            except discord.NotFound as exc:
                if exc.code != UNKNOWN_CHANNEL or not chat.thread_id or not await self._open_thread(chat):
                    raise
                return await call()
        except discord.RateLimited as exc:
            raise DeliveryError(f"rate limited for {exc.retry_after:.0f}s", retry_after=exc.retry_after) from exc
        except (discord.Forbidden, discord.NotFound) as exc:
            raise DeliveryError(f"discord refused: {exc.text or exc}", retryable=False) from exc
        except discord.DiscordServerError as exc:
            raise DeliveryError(f"discord failed: {exc}") from exc
        except discord.HTTPException:
            raise  # 400s: the caller may try a plainer form
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise DeliveryError(f"discord unreachable: {exc}") from exc

    async def _open_thread(self, chat: ChatRef) -> bool:
        """Start the thread whose id is its message's (auto_thread); False when there is nothing to open."""
        assert self.client is not None and chat.thread_id is not None
        name = self._thread_names.pop(chat.thread_id, None)
        try:
            if name is None:  # (after a restart: name it from the message)
                message = await self.client.http.get_message(int(chat.chat_id), int(chat.thread_id))
                name = (str(message.get("content") or "").splitlines() or ["Conversation"])[0][:90] or "Conversation"
            name = re.sub(rf"<@!?{self._me}>", "", name).strip() or "Conversation"
            await self.client.http.start_thread_with_message(int(chat.chat_id), int(chat.thread_id), name=name,
                                                             auto_archive_duration=1440)
        except discord.HTTPException as exc:
            log.warning("discord: could not open a thread for message %s: %s", chat.thread_id, exc)
            return False
        return True

    @staticmethod
    def _target(chat: ChatRef) -> int:
        return int(chat.thread_id or chat.chat_id)

    def _params(self, reply: Reply, *, reference: bool) -> Any:
        params = handle_message_parameters(
            content=reply.text, nonce=reply.key,
            allowed_mentions=discord.AllowedMentions.none(),
            mention_author=True if reply.reply_to and reference else None,
            message_reference={"message_id": int(reply.reply_to), "fail_if_not_exists": False}
            if reply.reply_to and reference else discord.utils.MISSING)
        params.payload["components"] = [
            {"type": 1, "components": [{"type": 2, "style": _BUTTON_STYLE.get(i, 2), "label": b.text[:80],
                                        "custom_id": b.data[:100]} for i, b in enumerate(row)]}
            for row in reply.buttons]
        return params

    async def send(self, chat: ChatRef, reply: Reply) -> str:
        assert self.client is not None
        http = self.client.http
        try:
            data = await self._rest(chat, lambda: http.send_message(self._target(chat), params=self._params(
                reply, reference=True)))
        except discord.HTTPException as exc:  # 400: e.g. the message it answers is gone; send it plainly
            log.info("discord rejected a message (%s); sending it without the reply reference", exc.text)
            try:
                data = await self._rest(chat, lambda: http.send_message(self._target(chat), params=self._params(
                    reply, reference=False)))
            except discord.HTTPException as again:
                raise DeliveryError(f"discord rejected the message: {again.text}", retryable=False) from again
        if str(data.get("content") or "").strip() != reply.text.strip():  # the message an earlier send with
            await self.edit(chat, str(data["id"]), reply)  # this nonce made: it shows this reply now
        return str(data["id"])

    async def edit(self, chat: ChatRef, message_id: str, reply: Reply) -> None:
        assert self.client is not None
        http = self.client.http
        params = handle_message_parameters(content=reply.text, allowed_mentions=discord.AllowedMentions.none())
        params.payload["components"] = self._params(reply, reference=False).payload["components"]
        try:
            await self._rest(chat, lambda: http.edit_message(self._target(chat), int(message_id), params=params))
        except discord.HTTPException as exc:
            raise DeliveryError(f"discord rejected the edit: {exc.text}", retryable=False) from exc

    async def send_file(self, chat: ChatRef, path: Path, caption: str = "") -> str:
        assert self.client is not None
        http = self.client.http
        if path.stat().st_size > self.max_file_bytes:
            raise DeliveryError(f"{path.name} is larger than the {self.max_file_bytes / 1e6:.0f} MB upload limit",
                                retryable=False)

        async def upload() -> Any:
            file = discord.File(path)  # (opened anew for each try)
            try:
                params = handle_message_parameters(content=caption or None, file=file,
                                                   allowed_mentions=discord.AllowedMentions.none())
                return await http.send_message(self._target(chat), params=params)
            finally:
                file.close()

        try:
            data = await self._rest(chat, upload)
        except discord.HTTPException as exc:
            raise DeliveryError(f"discord rejected the file: {exc.text}", retryable=False) from exc
        return str(data["id"])

    async def typing(self, chat: ChatRef, active: bool) -> None:
        if not active or self.client is None:
            return  # Discord clears it with the next message, or after 10 s
        try:
            await self.client.http.send_typing(self._target(chat))
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            log.debug("discord: typing failed: %s", exc)

    async def open_dm(self, user_id: str) -> ChatRef:
        assert self.client is not None
        data = await self.client.http.start_private_message(int(user_id))
        return ChatRef(self.name, str(data["id"]))


def _shape(commands: Sequence[dict[str, Any]]) -> list[tuple[str, str, int]]:
    """What of a command list decides whether it must be registered again."""
    return sorted((str(c.get("name")), str(c.get("description")), len(c.get("options") or [])) for c in commands)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
