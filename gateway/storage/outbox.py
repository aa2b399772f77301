"""The outbox: replies waiting for delivery, and what became of them."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiosqlite

from gateway.storage.tables import Tables
from platforms.base import ChatRef


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
    files: list[dict[str, str]] = field(default_factory=list)  # captured copies sent after the text (gateway.files)
    created_at: float = 0.0  # when it was queued (a reply is given up by its age)

    def payload(self) -> str:
        return json.dumps({"text": self.text, "buttons": self.buttons, "reply_to": self.reply_to,
                           "draft_message_id": self.draft_message_id, "files": self.files})


async def insert_outbox(db: aiosqlite.Connection, item: OutboxItem, now: float) -> int:
    """Queue `item` inside a unit of work (another group's transaction: a turn's commit, a cron run's)."""
    cur = await db.execute(
        "INSERT INTO outbox (platform, chat_id, thread_id, inbox_id, payload, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (item.chat.platform, item.chat.chat_id, item.chat.thread_id, item.inbox_id, item.payload(), now))
    item.id, item.created_at = int(cur.lastrowid), now
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
                                    attempts=r["attempts"], files=p.get("files") or [], created_at=r["created_at"]))
        return items

    async def chats(self, before: float | None = None) -> list[tuple[str, str]]:
        """The chats that have pending replies (queued before `before`, when given)."""
        rows = await self.fetch_all("SELECT DISTINCT platform, chat_id FROM outbox WHERE state = 'pending'"
                                    " AND created_at < ?", (float("inf") if before is None else before,))
        return [(r["platform"], r["chat_id"]) for r in rows]

    async def progress(self, item: OutboxItem, *, done: bool, error: str | None = None, failed: bool = False) -> None:
        """Record the parts sent so far; `done` marks it sent, `failed` gives up on it."""
        state = "failed" if failed else ("sent" if done else "pending")
        await self.execute("UPDATE outbox SET state = ?, platform_message_ids = ?, attempts = ?, error = ?,"
                           " sent_at = CASE WHEN ? = 'sent' THEN ? ELSE sent_at END WHERE id = ?",
                           (state, json.dumps(item.sent_ids), item.attempts, error, state, time.time(), item.id))
