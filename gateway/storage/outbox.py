"""The outbox: replies waiting for delivery, and what became of them; and the intents of sends whose
message id is not recorded yet (`SendIntent`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

import aiosqlite

from gateway.storage.tables import Tables
from platforms.base import ChatRef


@dataclass(frozen=True, slots=True)
class SendIntent:
    """A send whose message id may not be recorded: part `part` of a reply (0 for a turn's draft), started
    after message `after` (the newest id chatgate knew in that chat; None: none). `draft`: the message it
    may have made is the turn's draft, whose first send was never recorded. `tried`: a send under it may
    have reached the platform: always so as read back (an earlier process may have sent it); False only
    while this process knows nothing went out under it yet."""

    part: int = 0
    after: str | None = None
    draft: bool = False
    tried: bool = True

    def encode(self) -> str:
        return json.dumps({"part": self.part, "after": self.after, "draft": self.draft})


def read_intent(raw: str | None) -> SendIntent | None:
    """An intent as stored (JSON); read back, a send under it may have gone out (`tried`)."""
    if not raw:
        return None
    data = json.loads(raw)
    return SendIntent(int(data.get("part") or 0), data.get("after"), bool(data.get("draft")))


# A reply's first part is sent after the message it answers (or, when its turn's draft went out without
# its id recorded, after what that draft's intent names); a reply that answers none (a scheduled job's),
# after the newest message a person sent in the chat. `draft`: that draft may be the message to find.
_AFTER_REPLY = (
    "coalesce((SELECT coalesce(json_extract(i.draft_intent, '$.after'), CASE WHEN i.origin = 'person' THEN"
    " i.platform_message_id END) FROM inbox i WHERE i.id = :inbox), (SELECT p.platform_message_id FROM inbox p"
    " WHERE p.platform = :platform AND p.chat_id = :chat AND p.origin = 'person' ORDER BY p.id DESC LIMIT 1))")
_UNRECORDED_DRAFT = ("coalesce((SELECT i.draft_intent IS NOT NULL AND i.draft_message_id IS NULL FROM inbox i"
                     " WHERE i.id = :inbox), 0)")
# The ids of the chat's messages chatgate knows: people's, and its own (drafts, reply parts, approval prompts).
_KNOWN = (
    "SELECT platform_message_id FROM inbox WHERE platform = :platform AND chat_id = :chat AND origin = 'person'"
    " UNION SELECT draft_message_id FROM inbox WHERE platform = :platform AND chat_id = :chat"
    " UNION SELECT j.value FROM outbox o, json_each(o.platform_message_ids) j"
    " WHERE o.platform = :platform AND o.chat_id = :chat"
    " UNION SELECT json_extract(payload, '$.draft_message_id') FROM outbox WHERE platform = :platform"
    " AND chat_id = :chat UNION SELECT prompt_message_id FROM approvals WHERE platform = :platform AND chat_id = :chat")


@dataclass(slots=True)
class OutboxItem:
    """A reply waiting for (or done with) delivery."""

    chat: ChatRef
    text: str
    buttons: list[list[dict[str, str]]] = field(default_factory=list)
    reply_to: str | None = None
    draft_message_id: str | None = None
    inbox_id: int | None = None
    id: int | None = None
    sent_ids: list[str] = field(default_factory=list)
    attempts: int = 0
    files: list[dict[str, str]] = field(default_factory=list)  # captured copies sent after the text (gateway.chat.files)
    created_at: float = 0.0  # when it was queued (a reply is given up by its age)
    intent: SendIntent | None = None  # the part that may be on its way (see `SendIntent`)

    def payload(self) -> str:
        return json.dumps({"text": self.text, "buttons": self.buttons, "reply_to": self.reply_to,
                           "draft_message_id": self.draft_message_id, "files": self.files})


async def insert_outbox(db: aiosqlite.Connection, item: OutboxItem, now: float) -> int:
    """Queue `item` inside a unit of work (another group's transaction: a turn's commit, a cron run's).
    Its first part is sent right after the commit: the row carries that part's intent (no write of its
    own before the send), unless it edits a draft."""
    rows = await db.execute_fetchall(
        "INSERT INTO outbox (platform, chat_id, thread_id, inbox_id, payload, created_at, intent)"
        " VALUES (:platform, :chat, :thread, :inbox, :payload, :now, CASE WHEN :draft IS NULL THEN"
        f" json_object('part', 0, 'after', {_AFTER_REPLY}, 'draft', json(CASE WHEN {_UNRECORDED_DRAFT} THEN 'true'"
        " ELSE 'false' END)) END)"
        " RETURNING id, intent",
        {"platform": item.chat.platform, "chat": item.chat.chat_id, "thread": item.chat.thread_id,
         "inbox": item.inbox_id, "payload": item.payload(), "now": now, "draft": item.draft_message_id})
    row = rows[0]
    item.id, item.created_at = int(row[0]), now
    intent = read_intent(row[1])  # (nothing went out under it yet, unless its turn's draft may have)
    item.intent = None if intent is None else replace(intent, tried=intent.draft)
    return item.id


class OutboxStore(Tables):
    async def add(self, item: OutboxItem, *, done_inbox_id: int | None = None) -> int:
        """Queue a reply; optionally mark the inbox message it answers as done, atomically."""
        now = time.time()

        async def add(db: aiosqlite.Connection) -> int:
            if done_inbox_id is not None:
                await db.execute("UPDATE inbox SET state = 'done', updated_at = ? WHERE id = ?", (now, done_inbox_id))
            return await insert_outbox(db, item, now)

        return await self.db.write(add, single=done_inbox_id is None)

    async def pending(self, platform: str | None = None, chat_id: str | None = None) -> list[OutboxItem]:
        """Pending replies, oldest first; a reply whose turn sent a preview edits that message."""
        sql = ("SELECT o.*, i.draft_message_id AS inbox_draft FROM outbox o LEFT JOIN inbox i ON i.id = o.inbox_id"
               " WHERE o.state = 'pending'")
        args: tuple[Any, ...] = ()
        if platform is not None:
            sql += " AND o.platform = ? AND o.chat_id = ?"
            args = (platform, chat_id)
        items = []
        for r in await self.fetch_all(sql + " ORDER BY o.id", args):
            p = json.loads(r["payload"])
            items.append(OutboxItem(chat=ChatRef(r["platform"], r["chat_id"], r["thread_id"]), text=p["text"],
                                    buttons=p.get("buttons") or [], reply_to=p.get("reply_to"),
                                    draft_message_id=p.get("draft_message_id") or r["inbox_draft"],
                                    inbox_id=r["inbox_id"], id=r["id"], sent_ids=json.loads(r["platform_message_ids"]),
                                    attempts=r["attempts"], files=p.get("files") or [], created_at=r["created_at"],
                                    intent=read_intent(r["intent"])))
        return items

    async def chats(self, before: float | None = None) -> list[tuple[str, str]]:
        """The chats that have pending replies (queued before `before`, when given)."""
        rows = await self.fetch_all("SELECT DISTINCT platform, chat_id FROM outbox WHERE state = 'pending'"
                                    " AND created_at < ?", (float("inf") if before is None else before,))
        return [(r["platform"], r["chat_id"]) for r in rows]

    async def progress(self, item: OutboxItem, *, done: bool, error: str | None = None, failed: bool = False) -> None:
        """Record the parts sent so far, and the intent of the next (`item.intent`); `done` marks it sent,
        `failed` gives up on it."""
        state = "failed" if failed else ("sent" if done else "pending")
        intent = None if done or failed or item.intent is None else item.intent.encode()
        await self.execute("UPDATE outbox SET state = ?, platform_message_ids = ?, attempts = ?, error = ?,"
                           " sent_at = CASE WHEN ? = 'sent' THEN ? ELSE sent_at END, intent = ? WHERE id = ?",
                           (state, json.dumps(item.sent_ids), item.attempts, error, state, time.time(), intent,
                            item.id))

    async def intend(self, item: OutboxItem, part: int) -> SendIntent:
        """Note, before it is sent, that part `part` of `item` is on its way (after the part before it, or
        for the first, as when queued): the intent a reply that waited for a while needs again."""
        after = item.sent_ids[-1] if part and item.sent_ids else None
        rows = await self.db.write(lambda db: db.execute_fetchall(
            f"UPDATE outbox SET intent = json_object('part', :part, 'after', coalesce(:after, {_AFTER_REPLY}),"
            " 'draft', json('false')) WHERE id = :id RETURNING intent",
            {"part": part, "after": after, "inbox": item.inbox_id, "platform": item.chat.platform,
             "chat": item.chat.chat_id, "id": item.id}), single=True)
        return replace(read_intent(rows[0][0] if rows else None) or SendIntent(part), tried=False)

    def forget_intent(self, outbox_id: int, part: int) -> None:
        """Nothing went out under the row's intent for `part` (it waited instead): drop it, with the next
        commit, so a restart does not look for a message that was never made."""
        self.db.later(lambda db: db.execute("UPDATE outbox SET intent = NULL WHERE id = ? AND state = 'pending'"
                                            " AND json_extract(intent, '$.part') = ?", (outbox_id, part)))

    async def known_ids(self, platform: str, chat_id: str) -> set[str]:
        """The ids of the messages of a chat chatgate knows: people's it received, and its own it recorded."""
        params = {"platform": platform, "chat": chat_id}
        rows = await self.db.read(lambda db: db.execute_fetchall(_KNOWN, params))
        return {str(r[0]) for r in rows if r[0] is not None}
