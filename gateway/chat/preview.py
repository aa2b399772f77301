"""What a person sees while a turn runs: the reply growing in a draft message, and "typing…".

Both are best effort and never delay the reply: a preview that is rate limited skips edits (it
waits in its own task, which `stop()` ends at once), and the final reply, committed to the
outbox first, edits the draft in place. The draft's first message is made by `first_send`
(`gateway.chat.intents.DraftSend`: its intent recorded before, its id after), so a turn run again
after a crash edits that message instead of sending a second one.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable, Mapping

from platforms.base import ChatRef, DeliveryError, PlatformAdapter, Reply
from platforms.loops import wait_event

log = logging.getLogger(__name__)

TYPING_REFRESH = 4.0
# A reply this quick needs no indicator (Telegram would show it until that reply anyway); and the
# indicator of a burst of new turns goes out while their requests wait on the model, not before them.
TYPING_DELAY = 0.25
# A reply complete this soon after its first words goes out once, as itself: no draft to send, to write
# the intent of first (`gateway.chat.intents`) and to replace. Any longer one shows its draft from then on.
FIRST_DRAFT_DELAY = 0.05


class StreamPreview:
    """Shows a reply growing in one draft message, at most one edit per `edit_interval`."""

    def __init__(self, adapter: PlatformAdapter | None, chat: ChatRef, reply_to: str | None, *,
                 message_id: str | None = None,
                 first_send: Callable[[Reply], Awaitable[str]] | None = None,
                 fence: Callable[[], Awaitable[None]] | None = None) -> None:
        self.adapter = adapter
        self.chat = chat
        self.reply_to = reply_to
        self.text = ""
        self.message_id = message_id  # a draft an earlier run of this turn already sent
        self._first_send = first_send
        self._fence = fence  # waited on before each send (`Delivery.fence`)
        self._shown = ""
        self._dirty = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._enabled = adapter is not None and adapter.capabilities.can_edit
        self._placeholder = adapter.working_text(chat) if adapter is not None and self._enabled else None

    def begin(self) -> None:
        """Post the platform's "working…" placeholder now, as the draft the answer will replace
        (platforms without a typing indicator); nothing when a draft exists already."""
        if self._placeholder and self.message_id is None:
            self._wake()

    def push(self, delta: str) -> None:
        if not self._enabled or self._closing.is_set():
            return
        self.text += delta
        self._wake()

    def _wake(self) -> None:
        self._dirty.set()
        if self._task is None:
            self._task = asyncio.create_task(self._pump(), name="stream-preview")

    def reset(self) -> None:
        """The model started its answer again: forget what was streamed so far."""
        self.text = ""

    async def _pause(self, seconds: float) -> bool:
        """Wait up to `seconds`; True when `stop()` ended the wait."""
        return await wait_event(self._closing, seconds)

    async def _pump(self) -> None:
        assert self.adapter is not None
        caps = self.adapter.capabilities
        limit = caps.max_length - 2
        if self.message_id is None and await self._pause(FIRST_DRAFT_DELAY):
            return
        while not self._closing.is_set():
            await self._dirty.wait()
            self._dirty.clear()
            if self._closing.is_set():
                return
            text = self.text if len(self.text) <= limit else self.text[: limit - 1] + "…"
            if not text.strip() and self.message_id is None:
                text = self._placeholder or ""
            if text.strip() and text != self._shown:
                try:
                    await self._show(text)
                except DeliveryError as exc:
                    if exc.retry_after is None and not exc.retryable:
                        log.info("streaming preview disabled for %s: %s", self.chat, exc)
                        return
                    self._dirty.set()  # show the newest text once the pause is over
                    if await self._pause(exc.retry_after or caps.edit_interval):
                        return
                    continue
            if await self._pause(caps.edit_interval):  # pace the edits
                return

    async def _show(self, text: str) -> None:
        assert self.adapter is not None
        reply = Reply(text=text, plain=text, reply_to=self.reply_to, final=False)
        if self._fence is not None:
            await self._fence()
        if self.message_id is None:
            first = self._first_send(reply) if self._first_send else self.adapter.send(self.chat, reply)
            self.message_id = await first
        else:
            await self.adapter.edit(self.chat, self.message_id, reply)
        self._shown = text

    def stop(self) -> None:
        """No more edits; a pause in progress ends at once (a call in flight is left to land)."""
        self._closing.set()
        self._dirty.set()

    async def finish(self) -> str | None:
        """Stop previewing; return the draft's message id for the final reply to replace."""
        self.stop()
        if self._task is not None:
            try:
                await self._task
            except Exception as exc:
                log.debug("stream preview ended with %s", exc)
        return self.message_id


class Typing:
    """The typing indicator: shown (refreshed) while a turn runs, paused while a person decides."""

    def __init__(self, adapters: Mapping[str, PlatformAdapter], refresh: float = TYPING_REFRESH,
                 delay: float = TYPING_DELAY) -> None:
        self.adapters = adapters
        self.refresh = refresh  # seconds between two "typing…" (platforms show one for about 5 s)
        self.delay = delay  # seconds into a turn before the first one
        self._paused: dict[ChatRef, int] = {}
        self._shown: set[asyncio.Task[None]] = set()

    def activity(self, chat: ChatRef, text: str) -> None:
        """Show what the agent is doing (best effort, never waited on)."""
        adapter = self.adapters.get(chat.platform)
        if adapter is None:
            return
        task = asyncio.create_task(self._activity(adapter, chat, text), name="activity")
        self._shown.add(task)
        task.add_done_callback(self._shown.discard)

    @staticmethod
    async def _activity(adapter: PlatformAdapter, chat: ChatRef, text: str) -> None:
        try:
            await adapter.activity(chat, text)
        except Exception as exc:
            log.debug("activity indicator failed: %s", exc)

    async def _set(self, adapter: PlatformAdapter, chat: ChatRef, active: bool) -> None:
        try:
            await adapter.typing(chat, active)
        except Exception as exc:
            log.debug("typing indicator failed: %s", exc)

    @asynccontextmanager
    async def shown(self, chat: ChatRef) -> AsyncIterator[None]:
        """Show the typing indicator (refreshed) for the duration of the block, from `delay` seconds
        into it; cleared at the end if it was shown."""
        adapter = self.adapters.get(chat.platform)
        if adapter is None or not adapter.capabilities.can_typing:
            yield
            return
        shown = False

        async def keep() -> None:
            nonlocal shown
            await asyncio.sleep(self.delay)
            while True:
                if not self._paused.get(chat):
                    shown = True
                    await self._set(adapter, chat, True)
                await asyncio.sleep(self.refresh)

        task = asyncio.create_task(keep(), name="typing")
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            if shown:
                await self._set(adapter, chat, False)

    @asynccontextmanager
    async def paused(self, chat: ChatRef) -> AsyncIterator[None]:
        """No typing indicator in this chat during the block (e.g. while a person decides)."""
        self._paused[chat] = self._paused.get(chat, 0) + 1
        adapter = self.adapters.get(chat.platform)
        try:
            if adapter is not None and adapter.capabilities.can_typing:
                await self._set(adapter, chat, False)
            yield
        finally:
            self._paused[chat] -= 1
            if not self._paused[chat]:
                del self._paused[chat]
