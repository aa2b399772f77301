"""The contract between chat platforms and the gateway (version 2).

An adapter turns its SDK's events into `InboundMessage` / `ButtonPress` / `ChatOpened` values
and hands each to the one callback it was given (`emit`); it never decides what to do with
them. `emit` returns an `Intake` once the event is stored (or known to be a re-delivery, or
ignored): only then may the adapter acknowledge it to the platform. `StorageUnavailable` from
`emit` means the gateway could not store it for its own sake (its database locked or failing):
not the event's fault, so it is never counted towards setting the event aside; the adapter
does not acknowledge it and tries again later (`take`, `emit_until_stored`) or leaves that to
the platform's own redelivery. Any other exception is the event's. The gateway talks back
through `send`, `edit`, `send_file`, `typing` and the support declared in `Capabilities`.

Adapters import their SDK, this module and `platforms.loops` only. Each platform is a package
that declares its config model and factory in `SPEC` (see `platforms.registry`).
"""

from __future__ import annotations

import abc
import asyncio
import enum
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Awaitable, Callable, ClassVar, Literal, Protocol, Sequence
from urllib.parse import urlsplit, urlunsplit

from platforms.text import split_text

log = logging.getLogger(__name__)

ChatType = Literal["dm", "group", "channel"]


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file that came with a message.

    Adapters describe it (`ref` is the platform's handle: a file id, a URL) and the gateway
    fetches it with `PlatformAdapter.fetch` when the turn starts, after the access check: the
    intake path never waits on a download. `path` is set once it is on disk; `error` says why
    it was not taken.
    """

    kind: str  # "image" | "document" | "audio" | "video" | ...
    name: str
    mime_type: str = "application/octet-stream"
    size: int = 0
    path: str | None = None
    error: str | None = None
    ref: str | None = None


@dataclass(frozen=True, slots=True)
class ChatRef:
    """A place to send to: a chat, and a thread in it."""

    platform: str
    chat_id: str
    thread_id: str | None = None


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """One message a person sent, as every platform describes it.

    `thread_id` is the conversation's thread: it decides the session. `reply_in` is where the
    answer goes when that is not the same place (Slack answers a top-level message in a thread
    under it; Discord may open a thread for it); None means the message's own chat and thread.
    """

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
    reply_in: ChatRef | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def chat(self) -> ChatRef:
        """The conversation's place (its session)."""
        return ChatRef(self.platform, self.chat_id, self.thread_id)

    @property
    def reply_chat(self) -> ChatRef:
        """Where answers to this message go."""
        return self.reply_in or self.chat


async def _nothing(*_: Any) -> None:
    return None


@dataclass(frozen=True, slots=True)
class ButtonPress:
    """A person pressed a button the gateway sent.

    The gateway calls `ack()` at once (platforms with an interaction deadline, such as Discord's
    three seconds, acknowledge there), then decides in a task of its own and calls
    `answer(text)` with the outcome, shown to the presser alone where the platform can.
    """

    platform: str
    chat_id: str
    user_id: str
    message_id: str  # the message that carries the button
    data: str
    user_name: str = ""
    thread_id: str | None = None
    on_ack: Callable[[], Awaitable[None]] = field(default=_nothing, compare=False, repr=False)
    on_answer: Callable[[str], Awaitable[None]] = field(default=_nothing, compare=False, repr=False)

    @property
    def chat(self) -> ChatRef:
        return ChatRef(self.platform, self.chat_id, self.thread_id)

    async def ack(self) -> None:
        await self.on_ack()

    async def answer(self, text: str) -> None:
        await self.on_answer(text)


@dataclass(frozen=True, slots=True)
class ChatOpened:
    """A chat became reachable again (e.g. a web chat tab reconnected): pending output may flow."""

    platform: str
    chat_id: str


@dataclass(frozen=True, slots=True)
class Unreadable:
    """Input the adapter failed to take several times (a poison update): the gateway keeps it in
    its dead-letter table, and the adapter moves on to the next one."""

    platform: str
    ref: str  # the platform's id for it (an update id), or "" when it has none
    payload: str  # the raw input as text (the gateway keeps the first 64 KiB)
    reason: str


InboundEvent = InboundMessage | ButtonPress | ChatOpened | Unreadable


class Intake(enum.Enum):
    """What the gateway did with an event; the adapter acknowledges the platform after any of these."""

    STORED = "stored"  # new, written to the inbox (or a press taken): it will be handled
    DUPLICATE = "duplicate"  # a re-delivery of something already stored: dropped
    IGNORED = "ignored"  # not for the agent (not addressed, not allowed, a stranger given a pairing code)
    REFUSED = "refused"  # not taken, and the sender was told why (e.g. too many messages waiting)


EventCallback = Callable[[InboundEvent], Awaitable[Intake]]
STORAGE_PAUSE_MAX = 30.0  # seconds: the longest pause between tries while the gateway cannot store
NOT_STORED = "was not taken: chatgate cannot store messages right now. Please send it again in a minute."


class BoardView(Protocol):
    """The gateway's task board, read-only, as a page shows it (`PlatformAdapter.show_board`): plain values."""

    async def tasks(self) -> dict[str, Any]:
        """`{"columns": {status: [task, …]}, "counts": {status: n}}`: every status, each column's first tasks."""

    async def events(self, task_id: int) -> dict[str, Any] | None:
        """`{"task": id, "events": [{"id", "at", "kind", "author", "text"}, …]}`; None: there is no such task."""


class StorageUnavailable(Exception):
    """Raised by `emit`: the gateway could not store the event now (its database is locked by another
    program, full or failing). The event is not at fault and was not stored: do not acknowledge it;
    try it again later. Never a reason to set the event aside."""


@dataclass(frozen=True, slots=True)
class Button:
    text: str
    data: str


@dataclass(frozen=True, slots=True)
class Reply:
    """One outbound message part, already sized for the platform.

    `text` is in the platform's markup dialect; `plain` is the same content without markup,
    used when the platform rejects the markup. `key` is stable for this part across retries and
    restarts (outbox id and part number; a turn's draft: its inbox row): platforms that can
    deduplicate a send use it, or mark the message with it to find it again (`reclaim`).
    """

    text: str
    plain: str | None = None
    buttons: tuple[tuple[Button, ...], ...] = ()
    reply_to: str | None = None
    final: bool = True
    key: str | None = None


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
    can_files: bool = False
    edit_interval: float = 1.0  # seconds between streaming edits of one message
    follows_threads: bool = False  # in a thread the agent is in, a message needs no mention (Slack)
    # a send made again with the same `Reply.key` shows the message the first one made (Discord's nonce, the
    # web chat's ids): nothing to look for after a crash, and no intent to record before a send
    keyed_sends: bool = False
    # a surface only this machine, or a holder of its token, reaches: whoever is on it is already
    # authenticated and trusted like an admin (the local web chat)
    local: bool = False
    # the adapter holds a connection the platform allows once per bot (Telegram's long poll, Discord's gateway,
    # Slack's Socket Mode): with several gateway instances on one database, one of them holds it at a time
    single_connection: bool = False


class DeliveryError(Exception):
    """Sending failed. `retryable` says whether trying again later can help; `retry_after` is
    the platform's rate-limit pause (the message was not taken, and trying again is safe)."""

    def __init__(self, message: str, *, retryable: bool = True, retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


class ChatUnavailable(DeliveryError):
    """The chat cannot be reached right now (e.g. no browser tab open); keep the message."""


class PlatformRefused(RuntimeError):
    """Raised by `_start`: the platform refused chatgate in a way that trying again cannot change (a
    revoked token, a missing intent or scope, a setting it rejects); the message says what to fix.
    Any other error of `_start` is taken for one that may pass (no network yet, DNS, a refused
    connection, a timeout, a 5xx or 429), and the gateway tries again."""


def shown_url(url: str) -> str:
    """An address as a log line may show it: without the user and password it may carry."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])) if "@" in parts.netloc else url


def failure_text(exc: BaseException) -> str:
    """An error in one line: the adapter's own words (it raises them as RuntimeError), else the
    SDK's or the network's with its type."""
    text = str(exc)
    if isinstance(exc, RuntimeError) and text:
        return text[:300]
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


@dataclass(frozen=True, slots=True)
class Health:
    """An adapter's state for `/readyz`: since when, and the last error."""

    state: str  # "stopped" | "starting" | "ready" | "down" | "failed" | "standby" (another instance holds it)
    since: float
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state, "since": round(self.since, 3), "error": self.error}


class PlatformAdapter(abc.ABC):
    """Base class for one chat platform.

    Lifecycle: `start()` connects and begins receiving — one try, which the gateway makes again
    while it fails for a reason that may pass (see `start`, `PlatformRefused`) — and `stop()`
    disconnects. Both are idempotent; subclasses implement `_start` and `_stop` (which must cope with
    a `_start` cut short: it releases a failed try). Long-lived receive loops run under
    `platforms.loops.supervise`, which reports the adapter down (and up again) through
    `set_health`, so `/readyz` tells the truth while a loop restarts.
    """

    name: ClassVar[str] = "base"
    capabilities: Capabilities = Capabilities()  # (the class's; an adapter whose mode changes them sets its own)

    def __init__(self) -> None:
        self._on_event: EventCallback | None = None
        self._on_fatal: Callable[["PlatformAdapter", str], None] | None = None
        self._on_health: Callable[["PlatformAdapter"], None] | None = None
        self._running = False
        self.handing_over = False  # (see `stop`)
        self.health = Health("stopped", time.time())

    # -- wiring and lifecycle -------------------------------------------------------------

    def set_callback(self, on_event: EventCallback,
                     on_fatal: Callable[["PlatformAdapter", str], None] | None = None,
                     on_health: Callable[["PlatformAdapter"], None] | None = None) -> None:
        self._on_event = on_event
        self._on_fatal = on_fatal
        self._on_health = on_health

    def set_health(self, state: str, error: str | None = None) -> None:
        """Record a state change (kept, with its time, only when the state changes)."""
        if state == self.health.state and error == self.health.error:
            return
        self.health = Health(state, time.time(), error)
        if self._on_health is not None:
            self._on_health(self)

    @property
    def ready(self) -> bool:
        return self.health.state == "ready"

    def fail(self, reason: str) -> None:
        """Report an error the adapter cannot recover from (a bad token, a missing intent, …), once."""
        if self.health.state == "failed" and self.health.error == reason:
            return
        self.set_health("failed", reason)
        log.error("%s: %s", self.name, reason)
        if self._on_fatal is not None:
            self._on_fatal(self, reason)

    async def set_commands(self, commands: dict[str, str]) -> None:
        """Advertise the chat commands where the platform has a menu for them."""

    async def emit(self, event: InboundEvent) -> Intake:
        """Hand one event to the gateway; adapters call this and nothing else with input.

        It returns once the event is stored (or dropped as a copy, or ignored); an exception
        means it was not stored, and the platform must not be told it was received
        (`StorageUnavailable`: not because of the event; see the module doc).
        """
        if self._on_event is None:
            raise RuntimeError(f"{self.name}: no callback set")
        return await self._on_event(event)

    def connection_settings(self) -> str:
        """The settings that say where this adapter connects, for the line that says what to check
        when it cannot (e.g. "platforms.telegram.base_url (https://api.telegram.org)")."""
        return f"platforms.{self.name}"

    def entry_url(self, base_url: str) -> str | None:
        """The address a person opens to use this platform on the gateway's HTTP server (the web
        chat's page), given the server's base URL; None for platforms reached elsewhere."""
        return None

    async def emit_until_stored(self, event: InboundEvent, *, pause: float = 1.0,
                                waiting: Callable[[], Awaitable[None]] | None = None) -> Intake:
        """`emit`, tried again while the gateway cannot store (`StorageUnavailable`) after `pause`,
        doubling up to `STORAGE_PAUSE_MAX`, for as long as the adapter runs (then that error is
        raised). `waiting` is called once, at the first pause (to tell the person)."""
        while True:
            try:
                return await self.emit(event)
            except StorageUnavailable as exc:
                if not self._running:
                    raise
                log.warning("%s: not stored (%s); trying again in %.0fs", self.name, exc, pause)
                if waiting is not None:
                    told, waiting = waiting, None
                    try:
                        await told()
                    except Exception as notice_exc:
                        log.debug("%s: telling of the wait failed: %s", self.name, notice_exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, STORAGE_PAUSE_MAX)

    async def take(self, ref: str, describe: Callable[[], InboundEvent], payload: Callable[[], str], *,
                   tries: int = 3, pause: float = 1.0, hold: bool = True) -> Intake | None:
        """`emit` one event, described anew for each try, trying again after `pause`, 2 × `pause`, …
        while it cannot be described or stored; after `tries` failures it is set aside as
        `Unreadable` (None is returned) so the next event can go on. An exception left means it
        could not even be set aside: nothing was stored, and the platform must not be told it was.

        `StorageUnavailable` is no failure of the event's and never counts: with `hold` the same
        try waits for the storage (`emit_until_stored`); without (the platform delivers it again,
        or wants an answer now) it is raised at once."""
        for attempt in range(1, tries + 1):
            try:
                event = describe()
                return await (self.emit_until_stored(event, pause=pause) if hold else self.emit(event))
            except StorageUnavailable:
                raise
            except Exception as exc:
                if attempt == tries:
                    log.error("%s: event %s failed %d times; set aside: %s", self.name, ref, attempt, exc)
                    unreadable = Unreadable(self.name, ref, payload(), f"{type(exc).__name__}: {exc}")
                    await (self.emit_until_stored(unreadable, pause=pause) if hold else self.emit(unreadable))
                    return None
                log.warning("%s: event %s failed (attempt %d of %d): %s", self.name, ref, attempt, tries, exc)
                await asyncio.sleep(pause * attempt)
        return None

    def reaches(self, chat_id: str) -> bool:
        """Whether a message to this chat can be sent from this process now (the web chat: a tab of it is open
        here; a platform's API reaches every chat)."""
        return True

    def http_routes(self) -> Sequence[Any]:
        """aiohttp route definitions this adapter serves on the gateway's HTTP server."""
        return ()

    def show_board(self, view: BoardView) -> None:
        """The task board, for a surface that has a page to show it on (the web chat); the gateway hands it only
        to `local` ones, whose people are admins and see every task. Others ignore it."""

    @property
    def running(self) -> bool:
        return self._running

    async def start(self) -> None:
        """One try at connecting. A try that fails (or is cancelled) releases what it opened, leaves the
        adapter `failed` (`PlatformRefused`, reported once through `fail`) or `down` with the reason and
        the settings to check (anything else: worth another try), and raises."""
        if self._running:
            return
        if self.health.state != "down":  # (a try again keeps the reason it is down for until it is up)
            self.set_health("starting")
        try:
            await self._start()
        except BaseException as exc:
            await self._release()
            if isinstance(exc, PlatformRefused):
                self.fail(str(exc))
            elif isinstance(exc, Exception):
                self.set_health("down", f"{failure_text(exc)} — check {self.connection_settings()} or the network")
            else:
                self.set_health("stopped")
            raise
        self._running = True
        if self.health.state in ("starting", "down"):
            self.set_health("ready")

    async def _release(self) -> None:
        """What a failed try at `_start` opened (`_stop` copes with a start cut short)."""
        try:
            await self._stop()
        except Exception as exc:
            log.debug("%s: releasing a failed start: %s", self.name, exc)

    async def stop(self, *, handover: bool = False) -> None:
        """Disconnect. `handover`: another gateway instance holds this connection now (it took the lease this
        one could not keep): release it without a last call to the platform that would reach the new holder's
        connection (`handing_over` tells `_stop`)."""
        if not self._running:
            return
        self._running = False
        self.handing_over = handover
        try:
            await self._stop()
        finally:
            self.set_health("stopped")

    @abc.abstractmethod
    async def _start(self) -> None:
        """Connect and begin receiving."""

    @abc.abstractmethod
    async def _stop(self) -> None:
        """Stop receiving and release connections."""

    # -- output ---------------------------------------------------------------------------

    def render(self, markdown: str) -> list[Reply]:
        """Turn the model's markdown into parts that fit this platform's limits."""
        caps = self.capabilities
        return [Reply(text=part) for part in split_text(markdown, caps.max_length, caps.length_unit.value)]

    @abc.abstractmethod
    async def send(self, chat: ChatRef, reply: Reply) -> str:
        """Send one part; return the platform's message id."""

    @abc.abstractmethod
    async def edit(self, chat: ChatRef, message_id: str, reply: Reply) -> None:
        """Replace the text (and buttons) of a message this adapter sent."""

    async def reclaim(self, chat: ChatRef, reply: Reply, after: str | None, known: set[str]) -> str | None:
        """Find the message an earlier send of `reply` may have made in `chat` without chatgate learning its id
        (it was killed in between, or the connection broke after the platform took it): made after message
        `after`, marked with `reply.key` where the platform keeps such a mark, never one of `known` (the ids
        chatgate has recorded, its own and people's). Make it show `reply` and return its id; None when there
        is none, or the platform cannot tell (the caller then sends `reply` as a new message)."""
        return None

    async def send_file(self, chat: ChatRef, path: Path, caption: str = "") -> str:
        """Send a file chatgate keeps (the copy made when the agent handed it over; its name is the
        name it goes out as); return the platform's message id."""
        raise DeliveryError(f"{self.name} cannot send files", retryable=False)

    async def fetch(self, attachment: Attachment, folder: Path) -> Attachment:
        """Download an attachment described at intake into `folder`; failures come back in `error`."""
        return attachment

    async def open_dm(self, user_id: str) -> ChatRef:
        """The direct chat with a user, opened if needed (a DM channel id is not a user id everywhere)."""
        return ChatRef(self.name, user_id)

    def working_text(self, chat: ChatRef) -> str | None:
        """A placeholder to post when a turn starts, which the answer then replaces (platforms
        without a typing indicator); None: no placeholder."""
        return None

    async def typing(self, chat: ChatRef, active: bool) -> None:
        """Show or clear the typing indicator; platforms without one ignore this."""

    async def activity(self, chat: ChatRef, text: str) -> None:
        """What the agent is doing right now ("running terminal: ls"), where the platform can show
        it without a message; others ignore it."""

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
