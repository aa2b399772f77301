"""The inbox: every message accepted from a platform, from arrival to done; and dead letters, the input
that could not be taken. The counts over the inbox, the outbox and dead letters the operator reads are here."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from gateway.storage.connection import Connection, Work
from gateway.storage.outbox import SendIntent, read_intent
from gateway.storage.tables import Tables
from platforms.base import Attachment, ChatRef, InboundMessage

# A turn's first visible step (a preview sent, a side effect started) marks its message 'processing'
# in the same write: no commit of its own on the way to the reply.
_STARTED = "state = CASE WHEN state = 'received' THEN 'processing' ELSE state END"
# The newest message chatgate knows in a row's chat before it sends there: the person's message the turn
# answers; for a goal's turn, the newest message a person sent in that chat. What a send makes comes after.
_AFTER_ROW = ("CASE WHEN origin = 'person' THEN platform_message_id ELSE (SELECT p.platform_message_id FROM inbox p"
              " WHERE p.platform = inbox.platform AND p.chat_id = inbox.chat_id AND p.origin = 'person'"
              " ORDER BY p.id DESC LIMIT 1) END")


@dataclass(frozen=True, slots=True)
class Unfinished:
    """An inbox message an earlier run accepted and did not finish."""

    inbox_id: int
    session_key: str
    msg: InboundMessage
    draft_message_id: str | None  # a message already sent for it (the streaming preview)
    effects: list[str]  # side-effecting tool calls its turn had started
    goal_turn: tuple[int, int] | None = None  # a goal's turn: (goal id, turn number); None: a person's message
    draft_intent: SendIntent | None = None  # its draft's first send was started, and its id never recorded


def encode_inbound(msg: InboundMessage) -> str:
    data = asdict(msg)
    data.pop("raw", None)
    return json.dumps(data)


def decode_inbound(payload: str) -> InboundMessage:
    data = json.loads(payload)
    data["attachments"] = tuple(Attachment(**a) for a in data.get("attachments") or ())
    if data.get("reply_in"):
        data["reply_in"] = ChatRef(**data["reply_in"])
    return InboundMessage(**data)


async def insert_inbox(db: Connection, msg: InboundMessage, session_key: str, *,
                       state: str = "received", error: str | None = None,
                       goal_turn: tuple[int, int] | None = None) -> int | None:
    """`InboxStore.add` inside a unit of work of another group's; `goal_turn`: the row is that turn of a
    goal (origin 'goal'), not a person's message."""
    now = time.time()
    goal_id, goal_seq = goal_turn or (None, None)
    return await db.fetchval(  # (no row back when it was there already)
        "INSERT INTO inbox (platform, chat_id, platform_message_id, session_key, payload, state, error,"
        " received_at, updated_at, origin, goal_id, goal_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT DO NOTHING RETURNING id", msg.platform, msg.chat_id, msg.message_id, session_key,
        encode_inbound(msg), state, error, now, now, "person" if goal_turn is None else "goal", goal_id, goal_seq)


UNFINISHED = "i.state IN ('received', 'processing')"  # (of the inbox as `i`)
UNFINISHED_COLUMNS = ", ".join(f"i.{c}" for c in ("id", "session_key", "payload", "draft_message_id", "effects",
                                                   "origin", "goal_id", "goal_seq", "draft_intent"))


def unfinished(row: Any) -> Unfinished:
    """An unfinished inbox row (its `UNFINISHED_COLUMNS`) as the turn that takes it up again sees it."""
    return Unfinished(row["id"], row["session_key"], decode_inbound(row["payload"]), row["draft_message_id"],
                      json.loads(row["effects"] or "[]"), goal_turn(row),
                      None if row["draft_message_id"] else read_intent(row["draft_intent"]))


def goal_turn(row: Any) -> tuple[int, int] | None:
    """(goal id, turn number) of an inbox row that is a goal's turn; None for a person's message."""
    return (row["goal_id"], row["goal_seq"]) if row["origin"] == "goal" else None


class InboxStore(Tables):
    async def add(self, msg: InboundMessage, session_key: str, *, state: str = "received",
                  error: str | None = None) -> int | None:
        """Store an inbound message; return its id, or None when it was already stored."""
        return await self.db.write(lambda db: insert_inbox(db, msg, session_key, state=state, error=error),
                                   single=True)

    async def add_claimed(self, msg: InboundMessage, session_key: str, claim: Work) -> tuple[int | None, bool]:
        """`add`, and in the same write `claim` (several instances: the conversation's, for this instance):
        the message's id (None: stored already), and whether the claim took."""
        async def add(db: Connection) -> tuple[int | None, bool]:
            inbox_id = await insert_inbox(db, msg, session_key)
            return inbox_id, inbox_id is not None and bool(await claim(db))
        return await self.db.write(add)

    async def set_state(self, inbox_ids: list[int], state: str, error: str | None = None, *,
                        fenced: Work | None = None) -> None:
        """`fenced`: a statement run first that may refuse the write (several instances: `owners.still_owned`)."""
        rows = [(state, error, time.time(), i) for i in inbox_ids]

        async def set_state(db: Connection) -> None:
            if fenced is not None:
                await fenced(db)
            await db.executemany("UPDATE inbox SET state = ?, error = ?, updated_at = ? WHERE id = ?", rows)
        await self.db.write(set_state, single=fenced is None)

    async def draft_intent(self, inbox_id: int) -> SendIntent:
        """Note, before the first send of a turn's draft, that it was started, and after which message (a
        crash before its id is recorded leaves the re-run something to look for: `set_draft`). Marks the
        message 'processing' in the same write."""
        intent = await self.db.write(lambda db: db.fetchval(
            f"UPDATE inbox SET draft_intent = {db.dialect.json_object(('after', _AFTER_ROW))}, {_STARTED} WHERE id = ?"
            " RETURNING draft_intent", inbox_id), single=True)
        return read_intent(intent) or SendIntent()

    def set_draft(self, inbox_id: int, message_id: str) -> None:
        """Remember the first message a turn sent, so a re-run edits it instead of sending another. It joins
        the next group commit: its intent (`draft_intent`) was committed before the send, so a crash that
        takes this record leaves the re-run looking for the message, not sending a second one."""
        self.db.later(lambda db: db.execute(f"UPDATE inbox SET draft_message_id = ?, draft_intent = NULL, {_STARTED}"
                                            " WHERE id = ?", message_id, inbox_id))

    async def add_effect(self, inbox_id: int, what: str) -> None:
        """Note, before it runs, a side-effecting tool call of this message's turn."""
        await self.execute(f"UPDATE inbox SET effects = {self.db.dialect.json_appended('effects')}, {_STARTED}"
                           " WHERE id = ?",
                           what, inbox_id)

    async def unfinished(self, inbox_id: int | None = None) -> list[Unfinished]:
        """Messages accepted but not finished (received or processing), oldest first (`inbox_id`: that one,
        if it is unfinished)."""
        rows = await self.fetch(f"SELECT {UNFINISHED_COLUMNS} FROM inbox i WHERE {UNFINISHED}"
                                " AND i.id = coalesce(?, i.id) ORDER BY i.id", inbox_id)
        return [unfinished(r) for r in rows]

    async def dead_letter(self, platform: str, ref: str, payload: str, reason: str) -> None:
        """Keep input that could not be taken (the payload cut to 64 KiB: enough to see what it was)."""
        await self.execute(
            "INSERT INTO dead_letters (platform, ref, payload, reason, created_at) VALUES (?, ?, ?, ?, ?)",
            platform, ref, payload[:65536], reason[:2000], time.time())

    async def dead_letters(self, limit: int = 50) -> list[dict[str, Any]]:
        return [dict(r) for r in await self.fetch("SELECT * FROM dead_letters ORDER BY id DESC LIMIT ?", limit)]

    async def last_received_at(self) -> float | None:
        return await self.fetchval("SELECT max(received_at) FROM inbox")

    async def failures(self, limit: int = 50) -> list[dict[str, Any]]:
        """Failed turns (inbox) and replies given up on (outbox), newest first."""
        rows = await self.fetch(
            "SELECT * FROM (SELECT 'turn' AS kind, platform, chat_id, error, updated_at AS at FROM inbox"
            " WHERE state = 'failed' UNION ALL SELECT 'delivery', platform, chat_id, error, created_at FROM outbox"
            " WHERE state = 'failed') AS failed ORDER BY at DESC LIMIT ?", limit)
        return [dict(r) for r in rows]

    async def trouble_counts(self) -> dict[str, int]:
        """How much waits, failed or was set aside (for `chatgate doctor`)."""
        row = await self.fetchrow(
            "SELECT (SELECT count(*) FROM dead_letters) AS dead_letters,"
            " (SELECT count(*) FROM inbox WHERE state = 'failed') AS failed_turns,"
            " (SELECT count(*) FROM outbox WHERE state = 'failed') AS failed_deliveries,"
            " (SELECT count(*) FROM outbox WHERE state = 'pending') AS pending_replies")
        return dict(row) if row else {}

    async def recent_errors(self, limit: int = 5) -> list[dict[str, Any]]:
        """The latest failed turns, undeliverable replies and dead letters, newest first."""
        rows = await self.fetch(
            "SELECT * FROM (SELECT 'turn' AS what, platform, updated_at AS at, error FROM inbox WHERE state = 'failed'"
            " UNION ALL SELECT 'reply', platform, coalesce(sent_at, created_at), error FROM outbox"
            " WHERE state = 'failed'"
            " UNION ALL SELECT 'input', platform, created_at, reason FROM dead_letters) AS errors"
            " ORDER BY at DESC LIMIT ?", limit)
        return [dict(r) for r in rows]

    async def queue_counts(self) -> dict[str, int]:
        """Messages waiting or running, and replies waiting to go out."""
        row = await self.fetchrow(
            "SELECT (SELECT count(*) FROM inbox WHERE state = 'received') AS waiting,"
            " (SELECT count(*) FROM inbox WHERE state = 'processing') AS running,"
            " (SELECT count(*) FROM outbox WHERE state = 'pending') AS outbox_pending")
        return dict(row) if row else {}

    async def prune(self, before: float) -> tuple[int, int]:
        """Forget finished inbox and outbox rows and dead letters older than `before`; how many inbox and
        outbox rows went. The outbox rows a cron run points at are kept: they hold the ids of the messages
        it delivered."""
        async def prune(db: Connection) -> tuple[int, int]:
            inbox = await db.execute("DELETE FROM inbox WHERE state NOT IN ('received', 'processing')"
                                     " AND updated_at < ?", before)
            await db.execute("DELETE FROM dead_letters WHERE created_at < ?", before)
            outbox = await db.execute(
                "DELETE FROM outbox WHERE state IN ('sent', 'failed') AND created_at < ?"
                " AND id NOT IN (SELECT outbox_id FROM cron_runs WHERE outbox_id IS NOT NULL)", before)
            return inbox, outbox

        return await self.db.write(prune)
