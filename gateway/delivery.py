"""Getting replies out: the outbox, streaming previews and the typing indicator.

A reply is written to the outbox (in the same transaction that finishes its turn) before it
is sent, and marked sent part by part, so a crash or a platform outage delays a reply but
never loses or repeats it. Streaming previews are not durable: they are a draft message that
the final reply edits in place.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator, Mapping

from gateway.store import OutboxItem, Store
from platforms.base import Button, ChatRef, ChatUnavailable, DeliveryError, PlatformAdapter, Reply

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 12
TYPING_REFRESH = 4.0


def _buttons(rows: list[list[dict[str, str]]]) -> tuple[tuple[Button, ...], ...]:
    return tuple(tuple(Button(b["text"], b["data"]) for b in row) for row in rows)


class Delivery:
    def __init__(self, store: Store, adapters: Mapping[str, PlatformAdapter]) -> None:
        self.store = store
        self.adapters = adapters
        self._inflight: set[int] = set()
        self._not_before: dict[int, float] = {}
        self._retry_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._typing_paused: dict[ChatRef, int] = {}

    # -- sending --------------------------------------------------------------------------

    async def reply(self, chat: ChatRef, text: str, *, reply_to: str | None = None,
                    buttons: list[list[dict[str, str]]] | None = None, done_inbox_id: int | None = None) -> OutboxItem:
        """Queue and send a reply that is not part of a turn (command answers, notices)."""
        item = OutboxItem(chat=chat, text=text, buttons=buttons or [], reply_to=reply_to, inbox_id=done_inbox_id)
        await self.store.outbox_add(item, done_inbox_id=done_inbox_id)
        await self.deliver(item)
        return item

    async def deliver(self, item: OutboxItem) -> bool:
        """Send what is left of one outbox item; True once it is completely sent."""
        assert item.id is not None
        if item.id in self._inflight:
            return False
        adapter = self.adapters.get(item.chat.platform)
        if adapter is None or not adapter.running:
            return False
        self._inflight.add(item.id)
        try:
            return await self._send_parts(adapter, item)
        finally:
            self._inflight.discard(item.id)

    async def _send_parts(self, adapter: PlatformAdapter, item: OutboxItem) -> bool:
        parts = adapter.render(item.text) or [Reply(text="…")]
        buttons = _buttons(item.buttons)
        for index in range(len(item.sent_ids), len(parts)):
            last = index == len(parts) - 1
            part = Reply(text=parts[index].text, plain=parts[index].plain, buttons=buttons if last else (),
                         reply_to=item.reply_to if index == 0 else None)
            try:
                message_id = await self._send_one(adapter, item, part, edit_draft=index == 0)
            except ChatUnavailable:
                return False  # not an attempt: the chat will say when it is back
            except DeliveryError as exc:
                item.attempts += 1
                give_up = not exc.retryable or item.attempts >= MAX_ATTEMPTS
                backoff = exc.retry_after if exc.retry_after is not None else min(2.0 ** item.attempts, 300.0)
                self._not_before[item.id] = time.monotonic() + backoff  # type: ignore[index]
                log.warning("delivery of outbox %s to %s failed (%s)%s", item.id, item.chat.platform, exc,
                            "; giving up" if give_up else f"; retry in {backoff:.1f}s")
                await self.store.outbox_progress(item, done=False, error=str(exc)[:500], failed=give_up)
                self._ensure_retry_loop()
                return False
            item.sent_ids.append(message_id)
            if not last:
                await self.store.outbox_progress(item, done=False)
        await self.store.outbox_progress(item, done=True)
        self._not_before.pop(item.id, None)  # type: ignore[arg-type]
        return True

    async def _send_one(self, adapter: PlatformAdapter, item: OutboxItem, part: Reply, *, edit_draft: bool) -> str:
        if edit_draft and item.draft_message_id:
            try:
                await adapter.edit(item.chat, item.draft_message_id, part)
                return item.draft_message_id
            except DeliveryError as exc:
                if exc.retryable:
                    raise
                log.info("could not edit draft %s (%s); sending a new message", item.draft_message_id, exc)
        return await adapter.send_buttons(item.chat, part)

    # -- retries --------------------------------------------------------------------------

    async def flush(self, platform: str | None = None, chat_id: str | None = None, *, force: bool = False) -> int:
        """Try every pending item that is due (all, with `force`); return how many are left."""
        pending = await self.store.outbox_pending(platform, chat_id)
        now = time.monotonic()
        left = 0
        for item in pending:
            if force or self._not_before.get(item.id, 0.0) <= now:  # type: ignore[arg-type]
                if await self.deliver(item):
                    continue
            left += 1
        return left

    def _ensure_retry_loop(self) -> None:
        if self._retry_task is None or self._retry_task.done():
            self._retry_task = asyncio.create_task(self._retry_loop(), name="outbox-retry")
        self._wake.set()

    async def _retry_loop(self) -> None:
        while True:
            self._wake.clear()
            due = [t for t in self._not_before.values()]
            delay = max(0.05, min(due) - time.monotonic()) if due else 5.0
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                pass
            try:
                if await self.flush() == 0 and not self._not_before:
                    return
            except Exception:
                log.exception("outbox retry failed")

    async def start(self) -> None:
        """Send whatever an earlier run left pending."""
        if await self.flush(force=True):
            self._ensure_retry_loop()

    async def stop(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self.flush(force=True), timeout)
        except TimeoutError:
            log.warning("outbox flush did not finish in %.1fs; the rest is sent at next start", timeout)
        if self._retry_task is not None:
            self._retry_task.cancel()
            await asyncio.gather(self._retry_task, return_exceptions=True)

    # -- streaming and typing -------------------------------------------------------------

    def stream(self, chat: ChatRef, reply_to: str | None = None) -> "StreamPreview":
        adapter = self.adapters.get(chat.platform)
        return StreamPreview(adapter, chat, reply_to)

    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        """Show the typing indicator (refreshed) for the duration of the block; always cleared."""
        adapter = self.adapters.get(chat.platform)
        if adapter is None or not adapter.capabilities.can_typing:
            yield
            return

        async def keep() -> None:
            while True:
                try:
                    if not self._typing_paused.get(chat):
                        await adapter.typing(chat, True)
                except Exception as exc:
                    log.debug("typing indicator failed: %s", exc)
                await asyncio.sleep(TYPING_REFRESH)

        task = asyncio.create_task(keep())
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            try:
                await adapter.typing(chat, False)
            except Exception as exc:
                log.debug("clearing typing indicator failed: %s", exc)


    @asynccontextmanager
    async def typing_paused(self, chat: ChatRef) -> AsyncIterator[None]:
        """No typing indicator in this chat during the block (e.g. while a person decides)."""
        self._typing_paused[chat] = self._typing_paused.get(chat, 0) + 1
        adapter = self.adapters.get(chat.platform)
        try:
            if adapter is not None and adapter.capabilities.can_typing:
                try:
                    await adapter.typing(chat, False)
                except Exception as exc:
                    log.debug("clearing typing indicator failed: %s", exc)
            yield
        finally:
            self._typing_paused[chat] -= 1
            if not self._typing_paused[chat]:
                del self._typing_paused[chat]


class StreamPreview:
    """Shows a reply growing in one draft message, at most one edit per `edit_interval`."""

    def __init__(self, adapter: PlatformAdapter | None, chat: ChatRef, reply_to: str | None) -> None:
        self.adapter = adapter
        self.chat = chat
        self.reply_to = reply_to
        self.text = ""
        self.message_id: str | None = None
        self._shown = ""
        self._dirty = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._enabled = adapter is not None and adapter.capabilities.can_edit

    def push(self, delta: str) -> None:
        if not self._enabled:
            return
        self.text += delta
        self._dirty.set()
        if self._task is None:
            self._task = asyncio.create_task(self._pump(), name="stream-preview")

    def reset(self) -> None:
        """The model started its answer again: forget what was streamed so far."""
        self.text = ""

    async def _pump(self) -> None:
        assert self.adapter is not None
        limit = self.adapter.capabilities.max_length - 2
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if self._closing.is_set():
                return
            text = self.text if len(self.text) <= limit else self.text[: limit - 1] + "…"
            if text.strip() and text != self._shown:
                try:
                    reply = Reply(text=text, plain=text, reply_to=self.reply_to, final=False)
                    if self.message_id is None:
                        self.message_id = await self.adapter.send(self.chat, reply)
                    else:
                        await self.adapter.edit(self.chat, self.message_id, reply)
                    self._shown = text
                except DeliveryError as exc:
                    if exc.retry_after is None and not exc.retryable:
                        log.info("streaming preview disabled for %s: %s", self.chat, exc)
                        return
                    await asyncio.sleep(exc.retry_after or self.adapter.capabilities.edit_interval)
                    self._dirty.set()
                    continue
            try:  # pace the edits, but let finish() end the wait at once
                await asyncio.wait_for(self._closing.wait(), self.adapter.capabilities.edit_interval)
                return
            except TimeoutError:
                pass

    async def finish(self) -> str | None:
        """Stop previewing; return the draft's message id for the final reply to replace."""
        self._closing.set()
        self._dirty.set()
        if self._task is not None:
            try:
                await self._task
            except Exception as exc:
                log.debug("stream preview ended with %s", exc)
        return self.message_id
