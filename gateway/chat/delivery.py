"""Getting replies out: the outbox, sent in order per chat, retried per chat, never spinning.

A reply is written to the outbox (in the same transaction that finishes its turn) before it
is sent, and marked sent part by part, so a crash or a platform outage delays a reply but does
not lose it.

Order: a chat's replies go out in the order they were queued. A reply that waits (on a retry
timer, for its platform to be ready, for the chat to open) holds back the chat's later ones; a
reply given up for good does not: the chat goes on with the next. When a send fails:

* rate limited (`retry_after`): that chat waits that long; other chats are not held up, and a
  429 is not counted against the reply;
* a retryable error (network, 5xx): the chat waits with a backoff (2, 4, 8 … 300 s) and tries
  again; a reply is given up only once it is `GIVE_UP_AFTER` old (a day), however many attempts
  that took. A failure while the platform reports itself down (`adapter.ready`) is not an
  attempt: the chat waits for the platform, whose chats are flushed when it is ready again;
* a permanent error (blocked by the user, rejected): the reply is given up at once;
* the chat cannot be reached now (no web chat tab open): it waits, without a timer, until the
  chat opens again (a tab that did not confirm in time is also tried again after a while).

A reply given up is marked failed with the reason (`chatgate_delivery_failures_total`).

Each part is recorded as sent once the platform took it. The record is tried again when the
database refuses it (it is idempotent); while it cannot be written, what was sent (and the draft
a turn's reply edits) is kept in memory, so a later flush sends no part twice, and the chat is
tried again after `RECORD_RETRY` seconds. A part sent as a new message has its intent recorded
before it (`gateway.chat.intents`): when the process is killed before the part's record, or the
connection breaks after the platform may have taken it, the next try looks for the message first.

The retry loop runs only while some chat waits on a timer, and sleeps until the earliest one.
The tick (`sweep`) is the safety net: it flushes any chat with a reply pending for more than
`STRANDED_AFTER` seconds that no delivery, timer or flush is working on (and that did not say it
cannot be reached: such a chat is flushed when it opens, `flush_chat`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, Iterable, Literal, Mapping, TypeVar

from gateway.chat.files import OutgoingFile, discard
from gateway.chat.intents import DraftSend, may_have_landed, reclaim
from gateway.chat.preview import StreamPreview, Typing
from gateway.ops.metrics import Metrics
from gateway.storage.inbox import InboxStore
from gateway.storage.notices import LOOK, notify
from gateway.storage.outbox import OutboxItem, OutboxStore, SendIntent
from platforms.base import Button, ChatRef, ChatUnavailable, DeliveryError, PlatformAdapter, Reply
from platforms.loops import start_supervised, wait_event

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_BACKOFF = 300.0
GIVE_UP_AFTER = 86400.0  # a reply still failing a day after it was queued is given up
MAX_RATE_WAIT = 120.0  # how long a direct send (an approval prompt) waits out rate limits
RECORD_PAUSES = (0.5, 1.0, 2.0)  # between tries of a delivery record the database refused
RECORD_RETRY = 10.0  # then the chat is tried again after this long
STRANDED_AFTER = 5.0  # a reply pending this long with nothing working on it is flushed by the tick
ChatKey = tuple[str, str]
Outcome = Literal["sent", "waits", "given up"]


def _buttons(rows: list[list[dict[str, str]]]) -> tuple[tuple[Button, ...], ...]:
    return tuple(tuple(Button(b["text"], b["data"]) for b in row) for row in rows)


class Delivery:
    def __init__(self, outbox: OutboxStore, inbox: InboxStore, adapters: Mapping[str, PlatformAdapter],
                 metrics: Metrics | None = None, *, fence: Callable[[], Awaitable[None]] | None = None) -> None:
        self.outbox = outbox
        self.inbox = inbox  # (a turn's draft is recorded on its inbox row)
        self.adapters = adapters
        self.metrics = metrics or Metrics()
        self.typing = Typing(adapters)
        self.fence = fence  # several instances: each send waits until this instance's life lease is counted on
        self._inflight: set[int] = set()
        self._sending: dict[ChatKey, int] = {}  # chat → deliveries in flight
        self._closed: set[ChatKey] = set()  # chats that cannot be reached now: flushed when they open
        self._ahead: dict[int, tuple[list[str], str | None, SendIntent | None]] = {}  # outbox id → parts sent,
        # draft and intent as this process knows them, where its row may not (a record the database refused; a
        # turn's draft; an intent nothing went out under)
        self._waits: dict[ChatKey, float] = {}  # chat → not before (monotonic), after a retryable failure
        self._wake = asyncio.Event()
        self._retry_task: asyncio.Task[None] | None = None
        self._flushing: dict[ChatKey, asyncio.Task[None]] = {}
        self._finishing: dict[int, ChatKey | None] = {}  # inbox id → a chat whose flush it held up

    @asynccontextmanager
    async def final_reply(self, reply: OutboxItem, preview: StreamPreview) -> AsyncIterator[None]:
        """The one place that sends a turn's final reply. The body commits it (the turn's transaction puts
        it in the outbox); then the preview stops, a first preview send still in flight lands, and the
        reply goes out editing that draft (the message the person already sees), else as a new message.

        From entering until it is sent, a flush of the chat leaves this reply to the turn: the committed
        row may not know the draft yet, and a flush would send a second message beside it. A chat a flush
        stopped at it is flushed again afterwards. A body that fails (the commit) sends nothing; an error
        after the commit is logged and the outbox sends the reply."""
        reply.draft_message_id = preview.message_id  # (recorded with the row: a restart edits it too)
        assert reply.inbox_id is not None
        self._finishing[reply.inbox_id] = None
        try:
            yield
            try:
                reply.draft_message_id = await preview.finish()
                await self.deliver(reply)
            except Exception:
                log.exception("a committed reply to %s hit an error on its way; the outbox sends it",
                              reply.chat.platform)
        finally:
            held = self._finishing.pop(reply.inbox_id, None)
            if held is not None:
                self._flush_later(held)

    # -- sending --------------------------------------------------------------------------

    async def reply(self, chat: ChatRef, text: str, *, reply_to: str | None = None,
                    buttons: list[list[dict[str, str]]] | None = None, done_inbox_id: int | None = None) -> OutboxItem:
        """Queue and send a reply that is not part of a turn (command answers, notices)."""
        item = OutboxItem(chat=chat, text=text, buttons=buttons or [], reply_to=reply_to, inbox_id=done_inbox_id)
        await self.outbox.add(item, done_inbox_id=done_inbox_id)
        await self.deliver(item)
        return item

    async def to_admins(self, admins: Mapping[str, Iterable[str | int]], text: str) -> None:
        """A notice to each admin (platform → ids), in their direct chat (opened by the adapter where needed)."""
        for platform, ids in admins.items():
            adapter = self.adapters.get(platform)
            if adapter is None or adapter.capabilities.local:
                continue
            for admin in ids:
                try:
                    chat = await adapter.open_dm(str(admin))
                except Exception as exc:
                    log.warning("could not open a direct chat with %s admin %s: %s", platform, admin, exc)
                    continue
                await self.reply(chat, text)

    async def deliver(self, item: OutboxItem) -> bool:
        """Send what is left of one outbox item now, unless its chat waits; True once it is all sent."""
        return await self._deliver(item) == "sent"

    async def _deliver(self, item: OutboxItem) -> Outcome:
        assert item.id is not None
        chat: ChatKey = (item.chat.platform, item.chat.chat_id)
        if item.id in self._inflight:
            return "waits"
        adapter = self.adapters.get(item.chat.platform)
        if adapter is None or not adapter.running or self._waits.get(chat, 0.0) > time.monotonic():
            if adapter is None or not adapter.running:
                await self._leave(item)
            return self._waiting(item)  # sent when the platform is ready again (`flush`), or the chat's turn comes
        self._inflight.add(item.id)
        self._sending[chat] = self._sending.get(chat, 0) + 1
        try:
            outcome = await self._send_parts(adapter, item)
        except Exception as exc:  # a record the database would not take, even tried again
            outcome = "waits"
            self._wait(chat, RECORD_RETRY)
            log.warning("outbox %s to %s: could not record its delivery (%s); the chat is tried again in %.0fs",
                        item.id, item.chat.platform, exc, RECORD_RETRY)
        finally:
            self._inflight.discard(item.id)
            self._sending[chat] -= 1
            if not self._sending[chat]:
                del self._sending[chat]
        return self._waiting(item) if outcome == "waits" else outcome

    def _waiting(self, item: OutboxItem) -> Outcome:
        """A reply that waits: what this process knows of it is kept for the next try (`_caught_up`), and an
        intent nothing went out under is dropped (a restart would look for a message never made)."""
        assert item.id is not None
        if item.intent is not None and not item.intent.tried:
            self.outbox.forget_intent(item.id, item.intent.part)
            item.intent = None
        self._ahead[item.id] = (list(item.sent_ids), item.draft_message_id, item.intent)
        return "waits"

    def _caught_up(self, item: OutboxItem) -> OutboxItem:
        """A row read back, with what this process knows of it beyond the row (`_ahead`)."""
        ahead = self._ahead.get(item.id or 0)
        if ahead is not None:
            sent, draft, item.intent = ahead
            if len(sent) > len(item.sent_ids):
                item.sent_ids = list(sent)
            item.draft_message_id = item.draft_message_id or draft
        return item

    async def _send_parts(self, adapter: PlatformAdapter, item: OutboxItem) -> Outcome:
        parts = adapter.render(item.text) or [Reply(text="…")]
        buttons = _buttons(item.buttons)
        total = len(parts) + len(item.files)
        for index in range(len(item.sent_ids), total):
            last = index == len(parts) - 1
            if self.fence is not None:
                await self.fence()
            try:
                if index < len(parts):
                    part = Reply(text=parts[index].text, plain=parts[index].plain, buttons=buttons if last else (),
                                 reply_to=item.reply_to if index == 0 else None, key=self._key(item, index))
                    message_id = await self._send_one(adapter, item, part, index)
                else:
                    message_id = await self._send_file(adapter, item, item.files[index - len(parts)])
            except ChatUnavailable as exc:  # not an attempt: the chat says when it is back
                if exc.retry_after is not None:  # (or it may be there, only slow: try again later)
                    self._wait((item.chat.platform, item.chat.chat_id), exc.retry_after)
                else:
                    self._closed.add((item.chat.platform, item.chat.chat_id))
                    await self._leave(item)  # (several instances: the one the chat is open on takes it)
                return "waits"
            except DeliveryError as exc:
                return await self._failed(adapter, item, exc)
            except Exception as exc:  # an adapter's bug: counted like any failed attempt, never a turn's end
                log.exception("sending outbox %s to %s failed unexpectedly", item.id, item.chat.platform)
                return await self._failed(adapter, item, DeliveryError(f"{type(exc).__name__}: {exc}"))
            item.sent_ids.append(message_id)
            item.intent = SendIntent(index + 1, message_id, tried=False) if index < total - 1 else None
            self.metrics.outbound.labels(item.chat.platform).inc()
            if index < total - 1:
                await self._record(item, done=False)
        await self._record(item, done=True)
        await self._discard(item)
        self._closed.discard((item.chat.platform, item.chat.chat_id))
        return "sent"

    async def _record(self, item: OutboxItem, *, done: bool, error: str | None = None, failed: bool = False) -> None:
        """Write the item's delivery record, trying again while the database refuses it (the write is
        idempotent); raises when it still cannot."""
        for pause in (*RECORD_PAUSES, None):
            try:
                await self.outbox.progress(item, done=done, error=error, failed=failed)
            except Exception as exc:
                if pause is None:
                    raise
                log.warning("outbox %s: recording its delivery failed (%s); trying again in %.1fs", item.id, exc, pause)
                await asyncio.sleep(pause)
            else:
                if done or failed:
                    self._ahead.pop(item.id or 0, None)
                return

    @staticmethod
    def _key(item: OutboxItem, index: int) -> str:
        """A part's key (`Reply.key`). The first part of a turn's reply has its draft's (`DraftSend`): where a
        key finds a message, the draft a crash left unrecorded is the one the reply should replace."""
        return f"d{item.inbox_id}" if index == 0 and item.inbox_id is not None else f"o{item.id}.{index}"

    async def _send_one(self, adapter: PlatformAdapter, item: OutboxItem, part: Reply, index: int) -> str:
        if index == 0 and item.draft_message_id:
            try:
                await adapter.edit(item.chat, item.draft_message_id, part)
                return item.draft_message_id
            except DeliveryError as exc:
                if exc.retryable:
                    raise
                log.info("could not edit draft %s (%s); sending a new message", item.draft_message_id, exc)
                part = replace(part, key=f"o{item.id}.{index}")  # (the draft's key would find that draft again)
        return await self._send_new(adapter, item, part, index)

    async def _send_new(self, adapter: PlatformAdapter, item: OutboxItem, part: Reply, index: int) -> str:
        """Part `index` as a new message, under an intent (`gateway.chat.intents`): the one the reply was queued
        with or the part before recorded, else one written now (it waited meanwhile). When a send under it
        may have reached the platform already (an earlier run, a try whose answer was lost), the message
        it made is looked for first."""
        intent = item.intent if item.intent is not None and item.intent.part == index else None
        if intent is not None and intent.tried:
            found = await reclaim(self.outbox, adapter, item.chat, part, intent)
            if found is not None:
                return found
        elif intent is None and not adapter.capabilities.keyed_sends:
            intent = await self.outbox.intend(item, index)
        item.intent = None if intent is None else replace(intent, tried=True)
        try:
            return await adapter.send_buttons(item.chat, part)
        except Exception as exc:
            if intent is not None and not intent.tried and not may_have_landed(exc):
                item.intent = intent  # (nothing went out under it)
            raise

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

    async def _failed(self, adapter: PlatformAdapter, item: OutboxItem, exc: DeliveryError) -> Outcome:
        chat: ChatKey = (item.chat.platform, item.chat.chat_id)
        if exc.retry_after is not None:  # rate limited: not the reply's fault, not an attempt
            self._wait(chat, exc.retry_after)
            log.info("outbox %s to %s: rate limited, next try in %.1fs", item.id, item.chat.platform, exc.retry_after)
            return "waits"
        counted = adapter.ready  # while the platform says it is down, a failure is not the reply's
        if counted:
            item.attempts += 1
        too_old = bool(item.created_at) and time.time() - item.created_at >= GIVE_UP_AFTER
        give_up = not exc.retryable or too_old
        error = str(exc)[:500]
        if give_up:
            self.metrics.delivery_failures.labels(item.chat.platform).inc()
            log.warning("delivery of outbox %s to %s failed for good%s: %s", item.id, item.chat.platform,
                        " (tried for a day)" if exc.retryable else "", error)
        else:  # down: the flush when the platform is ready again comes first (the timer is a fallback)
            backoff = min(2.0 ** item.attempts, MAX_BACKOFF) if counted else MAX_BACKOFF
            self._wait(chat, backoff)
            log.warning("delivery of outbox %s to %s failed (%s); %s", item.id, item.chat.platform, error,
                        f"retry in {backoff:.0f}s" if counted else "waiting for the platform to be ready again")
        await self._record(item, done=False, error=error, failed=give_up)
        if give_up:
            await self._discard(item)
            return "given up"
        return "waits"

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
        self._closed.discard((platform, chat_id))
        await asyncio.shield(self._flush_later((platform, chat_id)))

    async def _flush_chat(self, platform: str, chat_id: str) -> None:
        """Send a chat's pending replies in order, up to the first that must wait (one given up for
        good is passed over)."""
        self._waits.pop((platform, chat_id), None)
        try:
            pending = await self.outbox.pending(platform, chat_id)
        except Exception as exc:
            log.warning("could not read the outbox of a %s chat (%s); tried again in %.0fs", platform, exc,
                        RECORD_RETRY)
            self._wait((platform, chat_id), RECORD_RETRY)
            return
        for item in pending:
            if item.inbox_id in self._finishing:  # its turn sends it (and then the rest: see `final_reply`)
                self._finishing[item.inbox_id] = (platform, chat_id)
                break
            if item.elsewhere or not await self._taken(item):  # another instance sends the chat's replies
                break
            if await self._deliver(self._caught_up(item)) == "waits":
                break

    async def _taken(self, item: OutboxItem) -> bool:
        """Several instances: a reply read back is sent by this one only once it has claimed it."""
        try:
            return await self.outbox.take(item)
        except Exception as exc:
            log.warning("could not claim a reply to a %s chat (%s); tried again in %.0fs", item.chat.platform, exc,
                        RECORD_RETRY)
            self._wait((item.chat.platform, item.chat.chat_id), RECORD_RETRY)
            return False

    async def adopt(self) -> None:
        """Several instances (each look of gateway.chat.owners, before the turns it takes up: their answers come
        after): flush the chats with replies no live instance sends — another's that died, or one left by an
        instance that could not reach the chat (`_leave`) — that this one can reach now."""
        for chat in await self.outbox.orphaned_chats():
            adapter = self.adapters.get(chat[0])
            if adapter is None or not adapter.ready or not adapter.reaches(chat[1]) or chat in self._flushing \
                    or chat in self._sending or chat in self._waits:
                continue
            self._closed.discard(chat)
            self._flush_later(chat)

    async def _leave(self, item: OutboxItem) -> bool:
        """Several instances: a reply this one cannot send now is left to one that can (said at once)."""
        try:
            left = await self.outbox.leave(item)
        except Exception as exc:
            log.warning("could not leave a reply to a %s chat to another instance (%s)", item.chat.platform, exc)
            return False
        if left:
            await notify(self.outbox.db, LOOK)
        return left

    async def flush(self, platform: str | None = None) -> None:
        """Send what waits in every chat (of one platform), chats side by side; returns when each is done."""
        chats = [chat for chat in await self.outbox.chats() if platform is None or chat[0] == platform]
        tasks = [self._flush_later(chat) for chat in chats]
        await asyncio.gather(*(asyncio.shield(t) for t in tasks), return_exceptions=True)

    async def sweep(self, older_than: float = STRANDED_AFTER) -> None:
        """The tick's safety net: flush each chat with a reply pending for over `older_than` seconds
        that nothing works on (no delivery in flight, no timer, no flush) on a platform that is ready."""
        for chat in await self.outbox.chats(before=time.time() - older_than):
            adapter = self.adapters.get(chat[0])
            if adapter is None or not adapter.ready or chat in self._waits or chat in self._sending \
                    or chat in self._closed:
                continue
            if chat not in self._flushing:
                log.info("a reply to a %s chat was left pending; sending it now", chat[0])
                self._flush_later(chat)

    @property
    def waiting(self) -> int:
        """Chats waiting on a timer (the retry loop runs only while this is not zero)."""
        return len(self._waits)

    async def start(self) -> None:
        """Send whatever an earlier run left pending (in the background: a slow chat delays no start)."""
        for chat in await self.outbox.chats():
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

    def stream(self, chat: ChatRef, reply_to: str | None, *, inbox_id: int, draft: str | None,
               intent: SendIntent | None = None) -> StreamPreview:
        """The preview of the turn answering inbox message `inbox_id`: `draft`, a message an earlier run of
        it sent, is edited; `intent`, a first send an earlier run started and never recorded, is looked for.
        A first message it sends is recorded on that row (`gateway.chat.intents.DraftSend`): a turn run again
        after a crash edits it, and so does `final_reply`."""
        adapter = self.adapters.get(chat.platform)
        first = None if adapter is None else DraftSend(self.inbox, self.outbox, adapter, chat, inbox_id, intent)
        return StreamPreview(adapter, chat, reply_to, message_id=draft, first_send=first, fence=self.fence)
