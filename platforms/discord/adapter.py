"""Discord, on discord.py's public API: its gateway for events, its messageables for everything sent.

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
* **Buttons** (a `discord.ui.View`) carry the gateway's data as `custom_id` (nothing kept in memory,
  so a press after a restart works); a press, taken in `on_interaction` (`platforms.discord.client` says
  why), is deferred (the 3-second deadline) and answered with an ephemeral follow-up. **Slash commands** (an `app_commands` tree)
  become the same text commands as typed ones, acknowledged with an ephemeral line once stored; they
  are registered at start only when they changed.
* **Sending** goes through the channel (`get_channel`, else `get_partial_messageable`: a DM or a thread
  the cache lacks) and never pings: the client's `allowed_mentions` is none, and a reply mentions only
  the user it answers. Every
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
from typing import Any, Awaitable, Callable, TypeVar

import aiohttp
import discord
from discord import app_commands

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
from platforms.discord.client import ChatgateClient, Endpoints, buttons_view, command_shape, slash_command
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
_DOWNLOAD_CHUNK = 64 * 1024


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
                                can_typing=True, can_files=True, edit_interval=1.2, keyed_sends=True,
                                single_connection=True)

    def __init__(self, token: str, *, api_base: str = "https://discord.com/api/v10", gateway_url: str | None = None,
                 auto_thread: bool = False, max_file_bytes: int = 25 * 1024 * 1024) -> None:
        super().__init__()
        self._token = token
        self.api_base = api_base.rstrip("/")
        self.gateway_url = gateway_url
        self._endpoints = Endpoints(self.api_base, gateway_url)
        self._commands: dict[str, str] = {}  # the chat commands, as slash commands (`set_commands`)
        self.auto_thread = auto_thread
        self.max_file_bytes = max_file_bytes
        self.client: ChatgateClient | None = None
        self._gateway: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._lost = asyncio.Event()  # the first connection to the gateway failed before READY
        self._thread_names: dict[str, str] = {}  # a thread to open (its id = the message's) → its name

    # -- lifecycle ------------------------------------------------------------------------

    def _new_client(self) -> ChatgateClient:
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = intents.message_content = True
        client = ChatgateClient(intents=intents, max_messages=None, chunk_guilds_at_startup=False,
                                member_cache_flags=discord.MemberCacheFlags.none(), max_ratelimit_timeout=RATE_WAIT,
                                guild_ready_timeout=0.5, allowed_mentions=discord.AllowedMentions.none())
        client.event(self.on_ready)
        client.event(self.on_resumed)
        client.event(self.on_disconnect)
        client.event(self.on_message)
        client.event(self.on_interaction)
        client.tree.error(self._on_command_error)
        self._fill(client)
        return client

    def connection_settings(self) -> str:
        gateway = f" and platforms.discord.gateway_url ({shown_url(self.gateway_url)})" if self.gateway_url else ""
        return f"platforms.discord.api_base ({shown_url(self.api_base)}){gateway}"

    async def _login(self) -> ChatgateClient:
        self._endpoints.use()
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
        self._endpoints.release()

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
        self._commands = dict(commands)
        client = self.client
        if client is None or client.application_id is None:
            return
        self._fill(client)
        wanted = [command.to_dict(client.tree) for command in client.tree.get_commands()]
        try:
            current = [command.to_dict() for command in await client.tree.fetch_commands()]
            if command_shape(current) != command_shape(wanted):
                await client.tree.sync()
                log.info("discord: registered %d slash commands", len(wanted))
        except discord.HTTPException as exc:
            log.warning("discord: could not register slash commands: %s", exc)

    def _fill(self, client: ChatgateClient) -> None:
        """The client's command tree holds the chat commands (those known so far: a new client after a
        reconnect has them before the gateway names them again)."""
        client.tree.clear_commands(guild=None)
        for name, description in self._commands.items():
            client.tree.add_command(slash_command(name, description, self._command))

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
        if attachment.ref is None or attachment.error or attachment.path:
            return attachment
        path = folder / _SAFE_NAME.sub("_", attachment.name)
        try:
            data = await _download(attachment.ref, self.max_file_bytes)
            await asyncio.to_thread(_write, path, data)
        except (aiohttp.ClientError, OSError, ValueError, asyncio.TimeoutError) as exc:
            if isinstance(exc, aiohttp.ClientResponseError):  # (its text would carry the signed address)
                exc = ValueError(f"HTTP {exc.status}")
            log.warning("discord: could not download %s: %s", attachment.name, exc)
            return Attachment(attachment.kind, attachment.name, attachment.mime_type, attachment.size,
                              error=f"{attachment.name} could not be downloaded ({exc})")
        return Attachment(attachment.kind, attachment.name, attachment.mime_type, len(data), str(path))

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """A button press (slash commands go to the command tree)."""
        if interaction.type == discord.InteractionType.component:
            data = str((interaction.data or {}).get("custom_id", ""))
            await self.take(str(interaction.id), lambda: self._press(interaction, data), lambda: repr(interaction.data))

    def _press(self, interaction: discord.Interaction, data: str) -> ButtonPress:
        chat_id, thread_id, _ = self._place(interaction.channel, interaction.guild_id)

        async def ack() -> None:  # within Discord's 3 seconds: "received", the message stays as it is
            if not interaction.response.is_done():
                await interaction.response.defer()

        async def answer(text: str) -> None:  # only the presser sees it
            if text:
                await interaction.followup.send(text[:DISCORD_LIMIT], ephemeral=True)

        return ButtonPress(platform=self.name, chat_id=chat_id, user_id=str(interaction.user.id),
                           user_name=interaction.user.display_name, data=data,
                           message_id=str(interaction.message.id) if interaction.message else "", thread_id=thread_id,
                           on_ack=ack, on_answer=answer)

    async def _on_command_error(self, interaction: discord.Interaction, error: app_commands.AppCommandError) -> None:
        """A command Discord lists that the tree does not know yet (it came before `set_commands` after a
        start) is taken all the same; any other failure is logged."""
        if isinstance(error, app_commands.CommandNotFound):
            data: Any = interaction.data or {}
            words = [str(o.get("value", "")) for o in data.get("options", []) if o.get("value") not in (None, "")]
            await self._command(interaction, " ".join([f"/{error.name}", *words]))
        else:
            log.warning("discord: the command %s failed: %s", getattr(interaction.command, "name", "?"), error)

    async def _command(self, interaction: discord.Interaction, text: str) -> None:
        """A slash command: the same text command a person could type, acknowledged once stored."""
        chat_id, thread_id, chat_type = self._place(interaction.channel, interaction.guild_id)
        msg = InboundMessage(platform=self.name, chat_id=chat_id, chat_type=chat_type,  # type: ignore[arg-type]
                             user_id=str(interaction.user.id), user_name=interaction.user.display_name, text=text,
                             message_id=f"i{interaction.id}", thread_id=thread_id, bot_mentioned=True)
        try:  # (not held while the gateway cannot store: Discord wants its answer within 3 s)
            intake = await self.take(str(interaction.id), lambda: msg, lambda: repr(interaction.data), hold=False)
            shown = {Intake.STORED: f"`{text}`", Intake.DUPLICATE: f"`{text}` (already received)",
                     Intake.REFUSED: f"`{text}` was not taken (see the reply)",
                     Intake.IGNORED: "This bot does not answer you here."}.get(intake, "That did not work; try again.")
        except StorageUnavailable:
            shown = f"`{text}` {NOT_STORED}"
        try:
            await interaction.response.send_message(shown, ephemeral=True)
        except discord.HTTPException as exc:
            log.warning("discord: could not acknowledge %s: %s", text.split(" ", 1)[0], exc)

    # -- sending --------------------------------------------------------------------------

    def render(self, markdown: str) -> list[Reply]:
        return render_for_discord(markdown)

    def _channel(self, channel_id: str | int) -> Any:
        """A channel to send into: the cached one, else one known by its id alone (a DM, a thread the cache
        lacks, one still to be opened); either sends, edits and types the same."""
        if self.client is None:
            raise DeliveryError("discord is not connected")
        cached = self.client.get_channel(int(channel_id))
        return cached if isinstance(cached, discord.abc.Messageable) else \
            self.client.get_partial_messageable(int(channel_id))

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
            parent = self.client.get_channel(int(chat.chat_id)) or await self.client.fetch_channel(int(chat.chat_id))
            if not isinstance(parent, discord.TextChannel):
                return False
            start = parent.get_partial_message(int(chat.thread_id))
            if name is None:  # (after a restart: name it from the message)
                name = ((await start.fetch()).content.splitlines() or ["Conversation"])[0][:90]
            name = re.sub(rf"<@!?{self._me}>", "", name).strip() or "Conversation"
            await start.create_thread(name=name, auto_archive_duration=1440)
        except discord.HTTPException as exc:
            log.warning("discord: could not open a thread for message %s: %s", chat.thread_id, exc)
            return False
        return True

    @staticmethod
    def _target(chat: ChatRef) -> int:
        return int(chat.thread_id or chat.chat_id)

    async def send(self, chat: ChatRef, reply: Reply) -> str:
        channel = self._channel(self._target(chat))

        def post(answering: bool) -> Awaitable[discord.Message]:  # (a new View each time: one per message)
            reference = discord.MessageReference(message_id=int(reply.reply_to), channel_id=channel.id,
                                                 fail_if_not_exists=False) if answering and reply.reply_to else None
            return channel.send(reply.text, nonce=reply.key, view=buttons_view(reply.buttons), reference=reference,
                                mention_author=True if reference else None)

        try:
            message = await self._rest(chat, lambda: post(True))
        except discord.HTTPException as exc:  # 400: e.g. the message it answers is gone; send it plainly
            log.info("discord rejected a message (%s); sending it without the reply reference", exc.text)
            try:
                message = await self._rest(chat, lambda: post(False))
            except discord.HTTPException as again:
                raise DeliveryError(f"discord rejected the message: {again.text}", retryable=False) from again
        if message.content.strip() != reply.text.strip():  # the message an earlier send with this nonce
            await self.edit(chat, str(message.id), reply)  # made: it shows this reply now
        return str(message.id)

    async def edit(self, chat: ChatRef, message_id: str, reply: Reply) -> None:
        message = self._channel(self._target(chat)).get_partial_message(int(message_id))
        try:
            await self._rest(chat, lambda: message.edit(content=reply.text, view=buttons_view(reply.buttons)))
        except discord.HTTPException as exc:
            raise DeliveryError(f"discord rejected the edit: {exc.text}", retryable=False) from exc

    async def send_file(self, chat: ChatRef, path: Path, caption: str = "") -> str:
        channel = self._channel(self._target(chat))
        if path.stat().st_size > self.max_file_bytes:
            raise DeliveryError(f"{path.name} is larger than the {self.max_file_bytes / 1e6:.0f} MB upload limit",
                                retryable=False)

        async def upload() -> discord.Message:
            file = discord.File(path)  # (opened anew for each try)
            try:
                return await channel.send(caption or None, file=file)
            finally:
                file.close()

        try:
            message = await self._rest(chat, upload)
        except discord.HTTPException as exc:
            raise DeliveryError(f"discord rejected the file: {exc.text}", retryable=False) from exc
        return str(message.id)

    async def typing(self, chat: ChatRef, active: bool) -> None:
        if not active or self.client is None:
            return  # Discord clears it with the next message, or after 10 s
        try:
            await self._channel(self._target(chat)).typing()
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            log.debug("discord: typing failed: %s", exc)

    async def open_dm(self, user_id: str) -> ChatRef:
        assert self.client is not None
        channel = await self.client.create_dm(discord.Object(int(user_id)))
        return ChatRef(self.name, str(channel.id))


async def _download(url: str, limit: int) -> bytes:
    """A file from Discord's CDN (its signed address needs no token), read no further than `limit` bytes
    (discord.py's `Attachment.read` reads all of it first)."""
    async with aiohttp.ClientSession() as http, http.get(url, raise_for_status=True) as response:
        data = bytearray()
        async for chunk in response.content.iter_chunked(_DOWNLOAD_CHUNK):
            data += chunk
            if len(data) > limit:
                raise ValueError(f"it is over the {limit / 1e6:.0f} MB limit")
        return bytes(data)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
