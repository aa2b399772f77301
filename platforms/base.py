"""The contract between chat platforms and the gateway.

An adapter turns its SDK's events into `InboundMessage` / `ButtonPress` values and hands them
to the single callback it was given; it never decides what to do with them. The gateway talks
back through `send`, `edit`, `typing` and the button support declared in `Capabilities`.
Adapters import their SDK and this module only.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Literal, Sequence

from platforms.text import split_text

log = logging.getLogger(__name__)

ChatType = Literal["dm", "group", "channel"]


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file that came with a message, already downloaded or referenced by path."""

    kind: str  # "image" | "document" | "audio" | "video" | ...
    name: str
    mime_type: str = "application/octet-stream"
    size: int = 0
    path: str | None = None
    error: str | None = None  # why it was not downloaded (too large, …)


@dataclass(frozen=True, slots=True)
class ChatRef:
    """Where a message lives: enough to send into the same chat and thread."""

    platform: str
    chat_id: str
    thread_id: str | None = None


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """One message a person sent, as every platform describes it."""

    platform: str
    chat_id: str
    chat_type: ChatType
    user_id: str
    text: str
    message_id: str  # the platform's id: unique per platform and chat, used to drop re-deliveries
    user_name: str = ""
    thread_id: str | None = None
    attachments: tuple[Attachment, ...] = ()
    reply_to: str | None = None
    bot_mentioned: bool = False
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def chat(self) -> ChatRef:
        return ChatRef(self.platform, self.chat_id, self.thread_id)


@dataclass(frozen=True, slots=True)
class ButtonPress:
    """A person pressed a button the gateway sent."""

    platform: str
    chat_id: str
    user_id: str
    message_id: str  # the message that carries the button
    data: str
    user_name: str = ""
    thread_id: str | None = None
    # Lets the adapter stop the client's spinner / show a toast; set by the adapter.
    answer: Callable[[str], Awaitable[None]] | None = field(default=None, compare=False, repr=False)

    @property
    def chat(self) -> ChatRef:
        return ChatRef(self.platform, self.chat_id, self.thread_id)


@dataclass(frozen=True, slots=True)
class ChatOpened:
    """A chat became reachable again (e.g. a web chat tab reconnected): pending output may flow."""

    platform: str
    chat_id: str


InboundEvent = InboundMessage | ButtonPress | ChatOpened
# The callback returns True when a message was new and is stored, False for a re-delivery.
EventCallback = Callable[[InboundEvent], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Button:
    text: str
    data: str


@dataclass(frozen=True, slots=True)
class Reply:
    """One outbound message part, already sized for the platform.

    `text` is in the platform's markup dialect; `plain` is the same content without markup,
    used when the platform rejects the markup.
    """

    text: str
    plain: str | None = None
    buttons: tuple[tuple[Button, ...], ...] = ()
    reply_to: str | None = None
    final: bool = True


class LengthUnit(enum.Enum):
    CHARS = "chars"
    UTF16 = "utf16"


@dataclass(frozen=True, slots=True)
class Capabilities:
    max_length: int = 4000
    length_unit: LengthUnit = LengthUnit.CHARS
    markup: str = "markdown"  # "markdown" | "html" | "mrkdwn" | "plain"
    can_edit: bool = True
    can_buttons: bool = False
    can_typing: bool = False
    edit_interval: float = 1.0  # seconds between streaming edits of one message


class DeliveryError(Exception):
    """Sending failed. `retryable` says whether trying again later can help."""

    def __init__(self, message: str, *, retryable: bool = True, retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


class ChatUnavailable(DeliveryError):
    """The chat cannot be reached right now (e.g. no browser tab open); keep the message."""


class PlatformAdapter:
    """Base class for one chat platform.

    Lifecycle: `start()` connects and begins receiving, `stop()` disconnects. Both are
    idempotent and may be called in any order; subclasses implement `_start` and `_stop`.
    """

    name: str = "base"
    capabilities: Capabilities = Capabilities()

    def __init__(self) -> None:
        self._on_event: EventCallback | None = None
        self._on_fatal: Callable[["PlatformAdapter", str], None] | None = None
        self._running = False
        self._lifecycle = asyncio.Lock()
        self.status: str = "stopped"  # for /readyz: "stopped" | "starting" | "ready" | "error: …"

    # -- wiring and lifecycle -------------------------------------------------------------

    def set_callback(self, on_event: EventCallback,
                     on_fatal: Callable[["PlatformAdapter", str], None] | None = None) -> None:
        self._on_event = on_event
        self._on_fatal = on_fatal

    def fail(self, reason: str) -> None:
        """Report an error the adapter cannot recover from (bad token, another poller, …)."""
        self.status = f"error: {reason}"
        log.error("%s: %s", self.name, reason)
        if self._on_fatal is not None:
            self._on_fatal(self, reason)

    async def set_commands(self, commands: dict[str, str]) -> None:
        """Advertise the chat commands where the platform has a menu for them."""

    async def emit(self, event: InboundEvent) -> Any:
        """Hand one event to the gateway; adapters call this and nothing else with input."""
        if self._on_event is None:
            raise RuntimeError(f"{self.name}: no callback set")
        return await self._on_event(event)

    def http_routes(self) -> Sequence[Any]:
        """aiohttp route definitions this adapter serves on the gateway's HTTP server."""
        return ()

    @property
    def running(self) -> bool:
        return self._running

    async def start(self) -> None:
        async with self._lifecycle:
            if self._running:
                return
            self.status = "starting"
            try:
                await self._start()
            except Exception as exc:
                self.status = f"error: {exc}"
                raise
            self._running = True
            self.status = "ready"

    async def stop(self) -> None:
        async with self._lifecycle:
            if not self._running:
                return
            self._running = False
            try:
                await self._stop()
            finally:
                self.status = "stopped"

    async def _start(self) -> None:
        """Connect and begin receiving."""

    async def _stop(self) -> None:
        """Stop receiving and release connections."""

    # -- output ---------------------------------------------------------------------------

    def render(self, markdown: str) -> list[Reply]:
        """Turn the model's markdown into parts that fit this platform's limits."""
        caps = self.capabilities
        return [Reply(text=part) for part in split_text(markdown, caps.max_length, caps.length_unit.value)]

    async def send(self, chat: ChatRef, reply: Reply) -> str:
        """Send one part; return the platform's message id."""
        raise NotImplementedError

    async def edit(self, chat: ChatRef, message_id: str, reply: Reply) -> None:
        """Replace the text (and buttons) of a message this adapter sent."""
        raise DeliveryError(f"{self.name} cannot edit messages", retryable=False)

    async def typing(self, chat: ChatRef, active: bool) -> None:
        """Show or clear the typing indicator; platforms without one ignore this."""

    async def notice(self, chat: ChatRef, text: str, level: str = "warning") -> None:
        """A gateway status message (not a reply); plain platforms show it as a message."""
        await self.send(chat, Reply(text=text))

    async def send_buttons(self, chat: ChatRef, reply: Reply) -> str:
        """Send a message with buttons, or the same choices as plain text where unsupported."""
        if self.capabilities.can_buttons or not reply.buttons:
            return await self.send(chat, reply)
        labels = [f"[{b.text}]" for row in reply.buttons for b in row]
        text = f"{reply.text}\n\n" + "  ".join(labels)
        return await self.send(chat, replace(reply, text=text, plain=None, buttons=()))
