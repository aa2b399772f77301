"""The outbox: replies waiting for delivery, and what became of them; and the intents of sends whose
message id is not recorded yet (`SendIntent`)."""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

from gateway.storage.connection import Connection
from gateway.storage.tables import Tables, live_instance
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


@functools.cache
def _statements(d: ModuleType) -> dict[str, str]:
    """The outbox's statements that hold pieces of the engine's dialect `d` (made once per dialect).

    A reply's first part is sent after the message it answers (or, when its turn's draft went out without
    its id recorded, after what that draft's intent names); a reply that answers none (a scheduled job's),
    after the newest message a person sent in the chat. `draft`: that draft may be the message to find.
    Both read the arguments ?1 (the inbox row), ?2 (the platform) and ?3 (the chat): a statement that uses
    them numbers its own from ?4. `first_intent`: a new reply's first intent (see `insert_outbox`);
    `next_intent`: the intent of a part sent later (?4 the part, ?5 the message it follows, None: as for the
    first). `known`: the ids of the chat's messages chatgate knows, people's and its own (drafts, reply
    parts, approval prompts); ?1 the platform, ?2 the chat."""
    after_reply = (
        f"coalesce((SELECT coalesce({d.json_field('i.draft_intent', 'after')}, CASE WHEN i.origin = 'person' THEN"
        " i.platform_message_id END) FROM inbox i WHERE i.id = ?1), (SELECT p.platform_message_id FROM inbox p"
        " WHERE p.platform = ?2 AND p.chat_id = ?3 AND p.origin = 'person' ORDER BY p.id DESC LIMIT 1))")
    unrecorded_draft = ("coalesce((SELECT i.draft_intent IS NOT NULL AND i.draft_message_id IS NULL FROM inbox i"
                        " WHERE i.id = ?1), FALSE)")
    return {
        "first_intent": d.json_object(("part", "0"), ("after", after_reply),
                                      ("draft", d.json_boolean(unrecorded_draft))),
        "next_intent": d.json_object(("part", "CAST(?4 AS INTEGER)"), ("after", f"coalesce(?5, {after_reply})"),
                                     ("draft", d.json_boolean("FALSE"))),
        "known": (
            "SELECT platform_message_id AS id FROM inbox WHERE platform = ?1 AND chat_id = ?2 AND origin = 'person'"
            " UNION SELECT draft_message_id FROM inbox WHERE platform = ?1 AND chat_id = ?2"
            f" UNION SELECT j.value FROM outbox o, {d.json_items('o.platform_message_ids', 'j')}"
            " WHERE o.platform = ?1 AND o.chat_id = ?2"
            f" UNION SELECT {d.json_field('payload', 'draft_message_id')} FROM outbox WHERE platform = ?1"
            " AND chat_id = ?2 UNION SELECT prompt_message_id FROM approvals WHERE platform = ?1 AND chat_id = ?2"),
    }


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
    elsewhere: bool = False  # read back: another live instance sends it (several instances)

    def payload(self) -> str:
        return json.dumps({"text": self.text, "buttons": self.buttons, "reply_to": self.reply_to,
                           "draft_message_id": self.draft_message_id, "files": self.files})


async def insert_outbox(db: Connection, item: OutboxItem, now: float) -> int:
    """Queue `item` inside a unit of work (another group's transaction: a turn's commit, a cron run's).
    Its first part is sent right after the commit: the row carries that part's intent (no write of its
    own before the send), unless it edits a draft."""
    row = await db.fetchrow(
        "INSERT INTO outbox (platform, chat_id, thread_id, inbox_id, payload, created_at, intent)"
        f" VALUES (?2, ?3, ?4, ?1, ?5, ?6, CASE WHEN ?7 THEN {_statements(db.dialect)['first_intent']} END)"
        " RETURNING id, intent",
        item.inbox_id, item.chat.platform, item.chat.chat_id, item.chat.thread_id, item.payload(), now,
        item.draft_message_id is None)
    assert row is not None  # (an insert returns its row)
    item.id, item.created_at = int(row["id"]), now
    intent = read_intent(row["intent"])  # (nothing went out under it yet, unless its turn's draft may have)
    item.intent = None if intent is None else replace(intent, tried=intent.draft)
    return item.id


class OutboxStore(Tables):
    async def add(self, item: OutboxItem, *, done_inbox_id: int | None = None) -> int:
        """Queue a reply; optionally mark the inbox message it answers as done, atomically."""
        now = time.time()

        async def add(db: Connection) -> int:
            if done_inbox_id is not None:
                await db.execute("UPDATE inbox SET state = 'done', updated_at = ? WHERE id = ?", now, done_inbox_id)
            return await insert_outbox(db, item, now)

        return await self.db.write(add, single=done_inbox_id is None)

    async def pending(self, platform: str | None = None, chat_id: str | None = None) -> list[OutboxItem]:
        """Pending replies, oldest first; a reply whose turn sent a preview edits that message. Several
        instances: a reply another live instance sends is `elsewhere`."""
        d = self.db.dialect
        elsewhere = f"o.sender <> {d.INSTANCE} AND {live_instance('o.sender', d.NOW_SECONDS)}"
        sql = (f"SELECT o.*, i.draft_message_id AS inbox_draft, coalesce({elsewhere}, FALSE) AS elsewhere FROM outbox o"
               " LEFT JOIN inbox i ON i.id = o.inbox_id WHERE o.state = 'pending'")
        args: tuple[Any, ...] = ()
        if platform is not None:
            sql += " AND o.platform = ? AND o.chat_id = ?"
            args = (platform, chat_id)
        items = []
        for r in await self.fetch(sql + " ORDER BY o.id", *args):
            p = json.loads(r["payload"])
            items.append(OutboxItem(chat=ChatRef(r["platform"], r["chat_id"], r["thread_id"]), text=p["text"],
                                    buttons=p.get("buttons") or [], reply_to=p.get("reply_to"),
                                    draft_message_id=p.get("draft_message_id") or r["inbox_draft"],
                                    inbox_id=r["inbox_id"], id=r["id"], sent_ids=json.loads(r["platform_message_ids"]),
                                    attempts=r["attempts"], files=p.get("files") or [], created_at=r["created_at"],
                                    intent=read_intent(r["intent"]), elsewhere=bool(r["elsewhere"])))
        return items

    async def take(self, item: OutboxItem) -> bool:
        """Several instances: make a pending reply read back this instance's to send — unless another live
        instance sends it (or it was sent meanwhile); whether it is this one's now. One database of its own:
        always."""
        if not self.db.engine.shared:
            return True
        d = self.db.dialect
        return await self.execute(
            f"UPDATE outbox SET sender = {d.INSTANCE} WHERE id = ? AND state = 'pending' AND (sender IS NULL"
            f" OR sender = {d.INSTANCE} OR NOT {live_instance('sender', d.NOW_SECONDS)})", item.id) == 1

    async def leave(self, item: OutboxItem) -> bool:
        """Several instances: this instance cannot send the reply now (its platform's connection is not running
        here, or the chat's is on another instance, as a web chat's tab): any instance may take it (`take`).
        Whether it was this one's to leave. One database of its own: nothing."""
        if not self.db.engine.shared:
            return False
        return await self.execute("UPDATE outbox SET sender = NULL WHERE id = ? AND state = 'pending'"
                                  f" AND sender = {self.db.dialect.INSTANCE}", item.id) == 1

    async def chats(self, before: float | None = None) -> list[tuple[str, str]]:
        """The chats that have pending replies (queued before `before`, when given)."""
        rows = await self.fetch("SELECT DISTINCT platform, chat_id FROM outbox WHERE state = 'pending'"
                                " AND created_at < ?", float("inf") if before is None else before)
        return [(r["platform"], r["chat_id"]) for r in rows]

    async def orphaned_chats(self) -> list[tuple[str, str]]:
        """Several instances: the chats that have pending replies no live instance is to send (its sender died,
        or left it: `leave`; or none was named: the CLI's)."""
        rows = await self.fetch("SELECT DISTINCT platform, chat_id FROM outbox WHERE state = 'pending'"
                                f" AND NOT {live_instance('sender', self.db.dialect.NOW_SECONDS)}")
        return [(r["platform"], r["chat_id"]) for r in rows]

    async def progress(self, item: OutboxItem, *, done: bool, error: str | None = None, failed: bool = False) -> None:
        """Record the parts sent so far, and the intent of the next (`item.intent`); `done` marks it sent,
        `failed` gives up on it."""
        state = "failed" if failed else ("sent" if done else "pending")
        intent = None if done or failed or item.intent is None else item.intent.encode()
        await self.execute("UPDATE outbox SET state = ?, platform_message_ids = ?, attempts = ?, error = ?,"
                           " sent_at = CASE WHEN ? = 'sent' THEN ? ELSE sent_at END, intent = ? WHERE id = ?",
                           state, json.dumps(item.sent_ids), item.attempts, error, state, time.time(), intent,
                           item.id)

    async def intend(self, item: OutboxItem, part: int) -> SendIntent:
        """Note, before it is sent, that part `part` of `item` is on its way (after the part before it, or
        for the first, as when queued): the intent a reply that waited for a while needs again."""
        after = item.sent_ids[-1] if part and item.sent_ids else None
        intent = await self.db.write(lambda db: db.fetchval(
            f"UPDATE outbox SET intent = {_statements(db.dialect)['next_intent']} WHERE id = ?6 RETURNING intent",
            item.inbox_id, item.chat.platform, item.chat.chat_id, part, after, item.id), single=True)
        return replace(read_intent(intent) or SendIntent(part), tried=False)

    def forget_intent(self, outbox_id: int, part: int) -> None:
        """Nothing went out under the row's intent for `part` (it waited instead): drop it, with the next
        commit, so a restart does not look for a message that was never made."""
        self.db.later(lambda db: db.execute("UPDATE outbox SET intent = NULL WHERE id = ? AND state = 'pending'"
                                            f" AND {db.dialect.json_number('intent', 'part')} = ?", outbox_id, part))

    async def known_ids(self, platform: str, chat_id: str) -> set[str]:
        """The ids of the messages of a chat chatgate knows: people's it received, and its own it recorded."""
        rows = await self.fetch(_statements(self.db.dialect)["known"], platform, chat_id)
        return {str(r["id"]) for r in rows if r["id"] is not None}
