"""Sends whose message id may go unrecorded, and finding the message such a send made.

A send makes a message on the platform; chatgate learns its id from the answer and records it in a
write after that. A kill -9 between the two (a few milliseconds idle, over a hundred under load), or a
connection that breaks after the platform took the message, leaves a message whose id nobody knows:
the next try would send the same answer a second time. So before such a send chatgate records its
intent ("a send was started in this chat, after message X"), and a send made again under an intent
that may have reached the platform first looks for that message (`PlatformAdapter.reclaim`: the
platform's own search, a mark on the message, or the bot's own messages after X) and edits it.

The intent costs no commit of its own where a write happens anyway: a reply's first part carries it
from the commit that queues the reply, each later part from the record of the part before. A turn's
draft (its streaming preview) writes it before its first send, and records the draft's id with the
next group commit instead (`later`), so the number of commits a turn waits for is what it was.
Platforms whose sends are keyed (`Capabilities.keyed_sends`: the same key shows the same message)
need neither: sending again is finding it.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from gateway.storage.inbox import InboxStore
from gateway.storage.outbox import OutboxStore, SendIntent
from platforms.base import ChatRef, ChatUnavailable, DeliveryError, PlatformAdapter, Reply

log = logging.getLogger(__name__)


def may_have_landed(exc: BaseException) -> bool:
    """Whether a send that failed this way may still have made its message: no answer (a broken
    connection, a timeout, the platform's own error) may hide one; a rate limit, a refusal or a chat that
    cannot be reached did not take it."""
    if not isinstance(exc, DeliveryError):
        return True  # (an adapter's bug: nothing is known)
    return exc.retryable and exc.retry_after is None and not isinstance(exc, ChatUnavailable)


async def reclaim(outbox: OutboxStore, adapter: PlatformAdapter, chat: ChatRef, reply: Reply,
                  intent: SendIntent) -> str | None:
    """The message an earlier send under `intent` made, now showing `reply`; None when none was found
    (or the platform's keyed sends find it themselves): then `reply` is sent as a new message."""
    if adapter.capabilities.keyed_sends:
        return None
    known = await outbox.known_ids(chat.platform, chat.chat_id)
    found = await adapter.reclaim(chat, reply, intent.after, known)
    if found is None:
        log.warning("a send to a %s chat may have made a message whose id was not recorded; none was found "
                    "after message %s, so it is sent again (it may show twice)", chat.platform, intent.after)
    else:
        log.info("found the message an interrupted send to a %s chat had made; it was edited, not sent again",
                 chat.platform)
    return found


class DraftSend:
    """The first message of a turn's draft (see the module doc): its intent written before it is sent,
    its id recorded with the next commit, and one that an earlier run (or a try whose answer was lost)
    may have made looked for first. Called by the preview with the draft's first look."""

    def __init__(self, inbox: InboxStore, outbox: OutboxStore, adapter: PlatformAdapter, chat: ChatRef,
                 inbox_id: int, unsure: SendIntent | None) -> None:
        self.inbox, self.outbox = inbox, outbox  # the draft's id and intent are on its inbox row
        self.adapter, self.chat, self.inbox_id = adapter, chat, inbox_id
        self.unsure = unsure  # an earlier send under this intent may have made the draft

    async def __call__(self, reply: Reply) -> str:
        reply = replace(reply, key=f"d{self.inbox_id}")
        intent = self.unsure
        if intent is not None:
            found = await reclaim(self.outbox, self.adapter, self.chat, reply, intent)
            if found is not None:
                self.unsure = None
                self.inbox.set_draft(self.inbox_id, found)
                return found
        elif not self.adapter.capabilities.keyed_sends:
            intent = await self.inbox.draft_intent(self.inbox_id)
        try:
            message_id = await self.adapter.send(self.chat, reply)
        except Exception as exc:
            if intent is not None and may_have_landed(exc):
                self.unsure = intent  # the next try looks for it first
            raise
        self.unsure = None
        self.inbox.set_draft(self.inbox_id, message_id)
        return message_id
