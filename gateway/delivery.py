"""Getting replies out: the outbox, sent in order per chat, retried per chat, never spinning.

A reply is written to the outbox (in the same transaction that finishes its turn) before it
is sent, and marked sent part by part, so a crash or a platform outage delays a reply but does
not lose it. When a send fails:

* rate limited (`retry_after`): that chat waits that long; other chats are not held up, and a
  429 is not counted against the reply;
* a retryable error (network, 5xx): the chat waits with a backoff (2, 4, 8 … 300 s), and after
  `MAX_ATTEMPTS` the reply is given up;
* a permanent error (blocked by the user, rejected): the reply is marked failed with the reason
  (`chatgate_delivery_failures_total`), and the chat's next replies go on;
* the chat cannot be reached now (no web chat tab open): it waits, without a timer, until the
  chat opens again (a tab that did not confirm in time is also tried again after a while); a
  platform that is down is flushed when it is ready again.

The retry loop runs only while some chat waits on a timer, and sleeps until the earliest one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Awaitable, Callable, Iterator, Mapping, TypeVar

from gateway.files import OutgoingFile, discard
from gateway.ops.metrics import Metrics
from gateway.preview import StreamPreview, Typing
from gateway.store import OutboxItem, Store
from platforms.base import Button, ChatRef, ChatUnavailable, DeliveryError, PlatformAdapter, Reply
from platforms.loops import start_supervised, wait_event

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_ATTEMPTS = 12
MAX_BACKOFF = 300.0
MAX_RATE_WAIT = 120.0  # how long a direct send (an approval prompt) waits out rate limits
ChatKey = tuple[str, str]


def _buttons(rows: list[list[dict[str, str]]]) -> tuple[tuple[Button, ...], ...]:
    return tuple(tuple(Button(b["text"], b["data"]) for b in row) for row in rows)


class Delivery:
    def __init__(self, store: Store, adapters: Mapping[str, PlatformAdapter], metrics: Metrics | None = None) -> None:
        self.store = store
        self.adapters = adapters
        self.metrics = metrics or Metrics()
        self.typing = Typing(adapters)
        self._inflight: set[int] = set()
        self._waits: dict[ChatKey, float] = {}  # chat → not before (monotonic), after a retryable failure
        self._wake = asyncio.Event()
        self._retry_task: asyncio.Task[None] | None = None
        self._flushing: dict[ChatKey, asyncio.Task[None]] = {}
        self._finishing: dict[int, ChatKey | None] = {}  # inbox id → a chat whose flush it held up

    @contextmanager
    def finishing(self, inbox_id: int) -> Iterator[None]:
        """While a turn commits its reply and waits for its preview, flushes leave that reply to the
        turn: the turn knows the preview's message id (the draft to edit), which the committed row
        may not have yet. A chat a flush stopped at it is flushed again afterwards."""
        self._finishing[inbox_id] = None
        try:
            yield
        finally:
            held = self._finishing.pop(inbox_id, None)
            if held is not None:
                self._flush_later(held)

    # -- sending --------------------------------------------------------------------------

    async def reply(self, chat: ChatRef, text: str, *, reply_to: str | None = None,
                    buttons: list[list[dict[str, str]]] | None = None, done_inbox_id: int | None = None) -> OutboxItem:
        """Queue and send a reply that is not part of a turn (command answers, notices)."""
        item = OutboxItem(chat=chat, text=text, buttons=buttons or [], reply_to=reply_to, inbox_id=done_inbox_id)
        await self.store.outbox_add(item, done_inbox_id=done_inbox_id)
        await self.deliver(item)
        return item

    async def deliver(self, item: OutboxItem) -> bool:
        """Send what is left of one outbox item now, unless its chat waits; True once it is all sent."""
        assert item.id is not None
        chat: ChatKey = (item.chat.platform, item.chat.chat_id)
        if item.id in self._inflight or self._waits.get(chat, 0.0) > time.monotonic():
            return False
        adapter = self.adapters.get(item.chat.platform)
        if adapter is None or not adapter.running:
            return False  # sent when the platform is ready again (`flush`)
        self._inflight.add(item.id)
        try:
            return await self._send_parts(adapter, item)
        finally:
            self._inflight.discard(item.id)

    async def _send_parts(self, adapter: PlatformAdapter, item: OutboxItem) -> bool:
        parts = adapter.render(item.text) or [Reply(text="…")]
        buttons = _buttons(item.buttons)
        total = len(parts) + len(item.files)
        for index in range(len(item.sent_ids), total):
            last = index == len(parts) - 1
            try:
                if index < len(parts):
                    part = Reply(text=parts[index].text, plain=parts[index].plain, buttons=buttons if last else (),
                                 reply_to=item.reply_to if index == 0 else None, key=f"o{item.id}.{index}")
                    message_id = await self._send_one(adapter, item, part, edit_draft=index == 0)
                else:
                    message_id = await self._send_file(adapter, item, item.files[index - len(parts)])
            except ChatUnavailable as exc:  # not an attempt: the chat says when it is back
                if exc.retry_after is not None:  # (or it may be there, only slow: try again later)
                    self._wait((item.chat.platform, item.chat.chat_id), exc.retry_after)
                return False
            except DeliveryError as exc:
                await self._failed(item, exc)
                return False
            except Exception as exc:  # an adapter's bug: counted like any failed attempt, never a turn's end
                log.exception("sending outbox %s to %s failed unexpectedly", item.id, item.chat.platform)
                await self._failed(item, DeliveryError(f"{type(exc).__name__}: {exc}"))
                return False
            item.sent_ids.append(message_id)
            self.metrics.outbound.labels(item.chat.platform).inc()
            if index < total - 1:
                await self.store.outbox_progress(item, done=False)
        await self.store.outbox_progress(item, done=True)
        await self._discard(item)
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

    async def _send_file(self, adapter: PlatformAdapter, item: OutboxItem, entry: object) -> str:
        """Send the copy `send_file` captured (never the path the agent named: it may point
        elsewhere by now); a platform without files is told the name and where it was."""
        sent = OutgoingFile.of(entry)
        if sent is None or not await asyncio.to_thread(sent.ready):
            name = sent.name if sent is not None else Path(str(entry)).name
            return await adapter.send(item.chat, Reply(text=f"📎 {name} is no longer there to send."))
        if adapter.capabilities.can_files:
            return await adapter.send_file(item.chat, Path(sent.copy))
        return await adapter.send(item.chat, Reply(text=f"📎 {sent.name} — saved at {sent.where}"))

    async def _discard(self, item: OutboxItem) -> None:
        """The reply's file copies, once it is sent or given up."""
        if item.files:
            await asyncio.to_thread(discard, item.files)

    async def _failed(self, item: OutboxItem, exc: DeliveryError) -> None:
        chat: ChatKey = (item.chat.platform, item.chat.chat_id)
        if exc.retry_after is not None:  # rate limited: not the reply's fault, not an attempt
            self._wait(chat, exc.retry_after)
            log.info("outbox %s to %s: rate limited, next try in %.1fs", item.id, item.chat.platform, exc.retry_after)
            return
        item.attempts += 1
        give_up = not exc.retryable or item.attempts >= MAX_ATTEMPTS
        error = str(exc)[:500]
        if give_up:
            self.metrics.delivery_failures.labels(item.chat.platform).inc()
            log.warning("delivery of outbox %s to %s failed for good: %s", item.id, item.chat.platform, error)
        else:
            backoff = min(2.0 ** item.attempts, MAX_BACKOFF)
            self._wait(chat, backoff)
            log.warning("delivery of outbox %s to %s failed (%s); retry in %.0fs", item.id, item.chat.platform,
                        error, backoff)
        await self.store.outbox_progress(item, done=False, error=error, failed=give_up)
        if give_up:
            await self._discard(item)

    async def patiently(self, call: Callable[[], Awaitable[T]], *, limit: float = MAX_RATE_WAIT) -> T:
        """Run a direct send/edit (not through the outbox), waiting out rate limits up to `limit` s."""
        waited = 0.0
        while True:
            try:
                return await call()
            except DeliveryError as exc:
                if exc.retry_after is None or waited + exc.retry_after > limit:
                    raise
                await asyncio.sleep(exc.retry_after)
                waited += exc.retry_after

    # -- waiting and retrying -------------------------------------------------------------

    def _wait(self, chat: ChatKey, seconds: float) -> None:
        self._waits[chat] = time.monotonic() + max(seconds, 0.05)
        if self._retry_task is None or self._retry_task.done():
            self._retry_task = start_supervised("outbox-retry", self._retry_loop)
        self._wake.set()

    async def _retry_loop(self) -> None:
        while self._waits:
            now = time.monotonic()
            due = [chat for chat, at in self._waits.items() if at <= now]
            if not due:
                self._wake.clear()
                await wait_event(self._wake, min(self._waits.values()) - now)
                continue
            for chat in due:
                del self._waits[chat]
                self._flush_later(chat)

    def _flush_later(self, chat: ChatKey) -> asyncio.Task[None]:
        """Flush a chat in a task of its own (one at a time per chat): a chat whose send hangs holds
        up no other chat."""
        task = self._flushing.get(chat)
        if task is None or task.done():
            task = self._flushing[chat] = asyncio.create_task(self._flush_chat(*chat), name=f"flush:{chat[0]}")
            task.add_done_callback(lambda done: self._flushed(chat, done))
        return task

    def _flushed(self, chat: ChatKey, task: asyncio.Task[None]) -> None:
        if self._flushing.get(chat) is task:
            del self._flushing[chat]
        if not task.cancelled() and task.exception() is not None:
            log.error("flushing the outbox of %s failed", chat[0], exc_info=task.exception())

    async def flush_chat(self, platform: str, chat_id: str) -> None:
        """Send a chat's pending replies now (e.g. a web chat tab came back); done when they are."""
        await asyncio.shield(self._flush_later((platform, chat_id)))

    async def _flush_chat(self, platform: str, chat_id: str) -> None:
        """Send a chat's pending replies in order, up to the first that cannot go now."""
        self._waits.pop((platform, chat_id), None)
        for item in await self.store.outbox_pending(platform, chat_id):
            if item.inbox_id in self._finishing:  # its turn sends it (and then the rest: see `finishing`)
                self._finishing[item.inbox_id] = (platform, chat_id)
                break
            if not await self.deliver(item):
                break

    async def flush(self, platform: str | None = None) -> None:
        """Send what waits in every chat (of one platform), chats side by side; returns when each is done."""
        chats = [chat for chat in await self.store.outbox_chats() if platform is None or chat[0] == platform]
        tasks = [self._flush_later(chat) for chat in chats]
        await asyncio.gather(*(asyncio.shield(t) for t in tasks), return_exceptions=True)

    @property
    def waiting(self) -> int:
        """Chats waiting on a timer (the retry loop runs only while this is not zero)."""
        return len(self._waits)

    async def start(self) -> None:
        """Send whatever an earlier run left pending (in the background: a slow chat delays no start)."""
        for chat in await self.store.outbox_chats():
            self._flush_later(chat)

    async def stop(self, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                await self.flush()
        except TimeoutError:
            log.warning("outbox flush did not finish in %.1fs; the rest is sent at next start", timeout)
        tasks = [t for t in (self._retry_task, *self._flushing.values()) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- previews ---------------------------------------------------------------------------

    def stream(self, chat: ChatRef, reply_to: str | None = None, *, message_id: str | None = None,
               on_first_send: Callable[[str], Awaitable[None]] | None = None) -> StreamPreview:
        return StreamPreview(self.adapters.get(chat.platform), chat, reply_to, message_id=message_id,
                             on_first_send=on_first_send)
