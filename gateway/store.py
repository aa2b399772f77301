"""Durable state in one SQLite database (WAL): sessions, transcripts, inbox, outbox.

Every method is a small unit of work, an async function of the aiosqlite connection (`gateway.database`); the ones
that change several tables run in one transaction, so a crash leaves either all of a turn's
effects or none of them. Writes are group-committed: many sessions' writes share one
transaction and one fsync, and a caller's await returns once its write is durable. Commits are
`synchronous=FULL` by default: a message acknowledged to a platform survives a power loss
(`gateway.durability: normal` trades that for speed: then only a crash of the process is safe).
The state directory is 0700 and the database files 0600.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import aiosqlite

from agent.compression import SUMMARY_PREFIX
from gateway.database import LOCK_WAIT, Database, SchemaError, Work, first_row, pipelined
from platforms.base import Attachment, ChatRef, InboundMessage

log = logging.getLogger(__name__)
T = TypeVar("T")


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


@dataclass(frozen=True, slots=True)
class Unfinished:
    """An inbox message an earlier run accepted and did not finish."""

    inbox_id: int
    session_key: str
    msg: InboundMessage
    draft_message_id: str | None  # a message already sent for it (the streaming preview)
    effects: list[str]  # side-effecting tool calls its turn had started


@dataclass(frozen=True, slots=True)
class TurnStart:
    """What a turn starts from (`Store.open_turn`)."""

    session_id: int
    history: list[dict[str, Any]]
    ids: list[int | None]  # each history message's id (None: a summary)
    prompt: str | None  # the session's frozen prompt snapshot, once it has one


@dataclass(frozen=True, slots=True)
class SearchHit:
    session_id: int
    role: str
    snippet: str
    created_at: float


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


# A turn's first visible step (a preview sent, a side effect started) marks its message 'processing'
# in the same write: no commit of its own on the way to the reply.
_STARTED = "state = CASE WHEN state = 'received' THEN 'processing' ELSE state END"


def _private(path: Path, mode: int) -> None:
    """Tighten permissions of a file or folder we own (a database made by an older version)."""
    try:
        if path.exists() and path.stat().st_mode & 0o777 != mode:
            path.chmod(mode)
    except OSError:
        pass  # not ours to change (e.g. a mounted volume); SQLite still works


def migrations() -> list[tuple[int, str]]:
    """The numbered migrations that come with this chatgate: (number, SQL), in order."""
    folder = resources.files("gateway") / "migrations"
    return sorted((int(f.name.split("_", 1)[0]), f.read_text(encoding="utf-8"))
                  for f in folder.iterdir() if f.name.endswith(".sql"))


def _statements(sql: str) -> list[str]:
    """A migration's statements, one by one (`executescript` would commit the transaction first)."""
    found, start = [], 0
    for end, char in enumerate(sql):
        if char == ";" and sqlite3.complete_statement(sql[start:end + 1]):
            found.append(sql[start:end + 1])
            start = end + 1
    if sql[start:].strip():
        found.append(sql[start:])
    return found


async def _version(db: aiosqlite.Connection) -> int:
    return int((await db.execute_fetchall("PRAGMA user_version"))[0][0])


async def _migrate(db: aiosqlite.Connection, *, path: str = "the database", upgrade: bool = True,
             found: list[tuple[int, str]] | None = None) -> None:
    """Apply the numbered migrations the database has not had yet (at open), each in a write
    transaction of its own that reads the version again first: another process may have applied
    it meanwhile. A failure leaves the database at the last migration that committed. A database
    from a newer chatgate is refused; `upgrade` False: one from an older one too (not upgraded
    under the daemon that uses it)."""
    found = migrations() if found is None else found
    latest = found[-1][0] if found else 0
    version = await _version(db)
    if version > latest:
        raise SchemaError(f"{path} was made by a newer chatgate (schema version {version}; this one knows up to "
                          f"{latest}): run that version, or restore a backup made with this one")
    if version == latest:
        return
    if not upgrade:
        raise SchemaError(f"{path} is at schema version {version} and this chatgate needs {latest}: the chatgate "
                          "running on it is older; restart it with this version (it upgrades the database), "
                          "then try again")
    for number, sql in found:
        if number <= version:
            continue
        await db.execute("BEGIN IMMEDIATE")
        try:
            version = await _version(db)  # under the write lock: what another process applied meanwhile counts
            if number > version:
                for statement in _statements(sql):
                    await db.execute(statement)
                await db.execute(f"PRAGMA user_version = {number}")
                version = number
            await db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                await db.rollback()
            raise


# A session's row and its latest summary; `{}`: how it is found (`_BY_ID` or `_BY_KEY`, one argument)
_SESSION = ("SELECT s.id, s.prompt, l.through_message_id, l.summary FROM sessions s LEFT JOIN session_summaries l"
            " ON l.id = (SELECT max(id) FROM session_summaries WHERE session_id = s.id) WHERE {}")
_BY_ID, _BY_KEY = "s.id = ?", "s.key = ? AND s.ended_at IS NULL"
# The newest messages after that summary (at most one argument more: how many), oldest first
_WINDOW = ("SELECT id, role, content, tool_calls, tool_call_id, name FROM (SELECT m.* FROM ({}) s JOIN messages m"
           " ON m.session_id = s.id AND m.status = 'ok' AND m.id > coalesce(s.through_message_id, 0)"
           " ORDER BY m.id DESC LIMIT ?) ORDER BY id")


async def _window(db: aiosqlite.Connection, where: str, arg: Any, limit: int) -> tuple[sqlite3.Row | None, list[Any]]:
    """A session's row (None: no such session) and the rows of its history window (see
    `Store.history_window`): both queries in one round trip."""
    session = _SESSION.format(where)
    row, found = await pipelined(first_row(db, session, (arg,)),
                                 db.execute_fetchall(_WINDOW.format(session), (arg, limit)))
    rows: list[Any] = list(found)
    if row is not None and row["summary"] is not None:
        first = await first_row(db, "SELECT id, role, content, tool_calls, tool_call_id, name FROM messages"
                                    " WHERE session_id = ? AND status = 'ok' AND role = 'user' ORDER BY id LIMIT 1",
                                (row["id"],))
        rows = [*([first] if first else []), {"id": None, "role": "user", "tool_calls": None, "tool_call_id": None,
                                              "content": SUMMARY_PREFIX + row["summary"], "name": None}, *rows]
    return row, rows


def _history(rows: list[Any]) -> tuple[list[dict[str, Any]], list[int | None]]:
    """Window rows in chat-completions form, and each one's message id."""
    out: list[dict[str, Any]] = []
    ids: list[int | None] = []
    for r in rows:
        msg: dict[str, Any] = {"role": r["role"], "content": r["content"]}
        if r["tool_calls"]:
            msg["tool_calls"] = json.loads(r["tool_calls"])
        if r["tool_call_id"]:
            msg["tool_call_id"] = r["tool_call_id"]
        if r["name"] and r["role"] == "tool":
            msg["name"] = r["name"]
        out.append(msg)
        ids.append(r["id"])
    while out and out[0]["role"] == "tool":  # the window must not start inside a tool exchange
        out.pop(0)
        ids.pop(0)
    return out, ids


class Store:
    """The gateway's SQLite store. Open with `await Store.open(path)`; close with `close()`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @property
    def batches(self) -> int:
        """Group commits so far (the tests read it)."""
        return self.db.batches

    @classmethod
    async def open(cls, path: Path | str, *, durability: str = "full", migrate: bool = True,
                   lock_wait: float = LOCK_WAIT) -> "Store":
        """Open (and migrate) the database; `durability` "full" or "normal" (see the module doc).
        `migrate` False: a database that needs migrating is refused (`SchemaError`), as is always
        one from a newer chatgate. `lock_wait`: see `gateway.database`."""
        path = Path(path)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _private(path.parent, 0o700)
        synchronous = "FULL" if durability == "full" else "NORMAL"
        old_mask = os.umask(0o077)  # the files SQLite creates (database, -wal, -shm) are the owner's only
        try:
            new = not path.exists() or path.stat().st_size == 0
            pragmas = ["auto_vacuum=INCREMENTAL"] * new  # (only before anything is written: see retention)
            pragmas += ["journal_mode=WAL", f"synchronous={synchronous}", "foreign_keys=ON"]
            db = await Database.open(str(path), pragmas,
                                     functools.partial(_migrate, path=str(path), upgrade=migrate),
                                     lock_wait=lock_wait)
        finally:
            os.umask(old_mask)
        for suffix in ("", "-wal", "-shm"):
            _private(Path(f"{path}{suffix}"), 0o600)
        return cls(db)

    async def close(self) -> None:
        await self.db.close()

    def health(self) -> dict[str, Any]:
        """Whether writes work now (see `Database.health`)."""
        return self.db.health()

    async def data_version(self) -> int:
        """Changes when another connection (another process) commits to the database."""
        row = await self.fetch_one("PRAGMA data_version")
        return int(row[0]) if row else 0

    async def write(self, work: Callable[[aiosqlite.Connection], Awaitable[T]], *, single: bool = False) -> T:
        """Run `work` in the next group commit (see `gateway.database`); its result once durable."""
        return await self.db.write(work, single=single)

    def later(self, work: Work) -> None:
        """Put `work` into the next group commit without waiting (see `gateway.database`)."""
        self.db.later(work)

    async def read(self, work: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
        """Run `work` between group commits (several queries, none of them uncommitted)."""
        return await self.db.read(work)

    async def fetch_one(self, sql: str, args: tuple[Any, ...] = ()) -> sqlite3.Row | None:
        return await self.db.read(lambda db: first_row(db, sql, args))

    async def fetch_all(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return list(await self.db.read(lambda db: db.execute_fetchall(sql, args)))

    # -- inbox ----------------------------------------------------------------------------

    async def inbox_add(self, msg: InboundMessage, session_key: str, *, state: str = "received",
                        error: str | None = None) -> int | None:
        """Store an inbound message; return its id, or None when it was already stored."""
        return await self.write(lambda db: self.insert_inbox(db, msg, session_key, state=state, error=error),
                                single=True)

    @staticmethod
    async def insert_inbox(db: aiosqlite.Connection, msg: InboundMessage, session_key: str, *,
                     state: str = "received", error: str | None = None) -> int | None:
        """`inbox_add` inside a unit of work of the caller's."""
        now = time.time()
        cur = await db.execute(
            "INSERT OR IGNORE INTO inbox (platform, chat_id, platform_message_id, session_key, payload, state,"
            " error, received_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (msg.platform, msg.chat_id, msg.message_id, session_key, encode_inbound(msg), state, error, now, now))
        return cur.lastrowid if cur.rowcount else None

    async def execute(self, sql: str, args: tuple[Any, ...] = ()) -> int:
        """One write statement, group-committed; how many rows it changed."""
        cursor = await self.write(lambda db: db.execute(sql, args), single=True)
        return int(cursor.rowcount)

    async def inbox_set_state(self, inbox_ids: list[int], state: str, error: str | None = None) -> None:
        rows = [(state, error, time.time(), i) for i in inbox_ids]
        await self.write(lambda db: db.executemany("UPDATE inbox SET state = ?, error = ?, updated_at = ? WHERE id = ?",
                                                   rows), single=True)

    async def inbox_set_draft(self, inbox_id: int, message_id: str) -> None:
        """Remember the first message a turn sent, so a re-run edits it instead of sending another."""
        await self.execute(f"UPDATE inbox SET draft_message_id = ?, {_STARTED} WHERE id = ?", (message_id, inbox_id))

    async def inbox_add_effect(self, inbox_id: int, what: str) -> None:
        """Note, before it runs, a side-effecting tool call of this message's turn."""
        await self.execute("UPDATE inbox SET effects = json_insert(coalesce(effects, '[]'), '$[#]', ?),"
                        f" {_STARTED} WHERE id = ?", (what, inbox_id))

    async def inbox_unfinished(self) -> list[Unfinished]:
        """Messages accepted but not finished (received or processing), oldest first."""
        rows = await self.fetch_all("SELECT id, session_key, payload, draft_message_id, effects FROM inbox"
                                    " WHERE state IN ('received', 'processing') ORDER BY id")
        return [Unfinished(r["id"], r["session_key"], decode_inbound(r["payload"]), r["draft_message_id"],
                           json.loads(r["effects"] or "[]")) for r in rows]

    # -- dead letters ---------------------------------------------------------------------

    async def dead_letter(self, platform: str, ref: str, payload: str, reason: str) -> None:
        """Keep input that could not be taken (the payload cut to 64 KiB: enough to see what it was)."""
        await self.execute("INSERT INTO dead_letters (platform, ref, payload, reason, created_at) VALUES (?, ?, ?, ?, ?)",
                        (platform, ref, payload[:65536], reason[:2000], time.time()))

    async def dead_letters(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = await self.fetch_all("SELECT * FROM dead_letters ORDER BY id DESC LIMIT ?", (limit,))
        return [dict(r) for r in rows]

    async def last_inbound_at(self) -> float | None:
        row = await self.fetch_one("SELECT max(received_at) FROM inbox")
        return row[0] if row else None

    async def failures(self, limit: int = 50) -> list[dict[str, Any]]:
        """Failed turns (inbox) and replies given up on (outbox), newest first."""
        rows = await self.fetch_all(
            "SELECT * FROM (SELECT 'turn' AS kind, platform, chat_id, error, updated_at AS at FROM inbox"
            " WHERE state = 'failed' UNION ALL SELECT 'delivery', platform, chat_id, error, created_at FROM outbox"
            " WHERE state = 'failed') ORDER BY at DESC LIMIT ?", (limit,))
        return [dict(r) for r in rows]

    async def trouble_counts(self) -> dict[str, int]:
        """How much waits, failed or was set aside (for `chatgate doctor`)."""
        row = await self.fetch_one(
            "SELECT (SELECT count(*) FROM dead_letters) AS dead_letters,"
            " (SELECT count(*) FROM inbox WHERE state = 'failed') AS failed_turns,"
            " (SELECT count(*) FROM outbox WHERE state = 'failed') AS failed_deliveries,"
            " (SELECT count(*) FROM outbox WHERE state = 'pending') AS pending_replies")
        return dict(row) if row else {}

    async def recent_errors(self, limit: int = 5) -> list[dict[str, Any]]:
        """The latest failed turns, undeliverable replies and dead letters, newest first."""
        rows = await self.fetch_all(
            "SELECT * FROM (SELECT 'turn' AS what, platform, updated_at AS at, error FROM inbox WHERE state = 'failed'"
            " UNION ALL SELECT 'reply', platform, coalesce(sent_at, created_at), error FROM outbox WHERE state = 'failed'"
            " UNION ALL SELECT 'input', platform, created_at, reason FROM dead_letters) ORDER BY at DESC LIMIT ?",
            (limit,))
        return [dict(r) for r in rows]

    async def queue_counts(self) -> dict[str, int]:
        """Messages waiting or running, and replies waiting to go out."""
        row = await self.fetch_one(
            "SELECT (SELECT count(*) FROM inbox WHERE state = 'received') AS waiting,"
            " (SELECT count(*) FROM inbox WHERE state = 'processing') AS running,"
            " (SELECT count(*) FROM outbox WHERE state = 'pending') AS outbox_pending")
        return dict(row) if row else {}

    async def backup(self, target: Path) -> None:
        """A consistent copy of the database while it is in use (SQLite's online backup)."""
        async def copy(db: aiosqlite.Connection) -> None:
            async with aiosqlite.connect(target) as to:
                await db.backup(to)

        await self.read(copy)

    # -- sessions and transcripts ---------------------------------------------------------

    async def active_session(self, key: str, chat: ChatRef, chat_type: str) -> int:
        """The id of the key's current session, created when there is none."""
        row = await self.fetch_one("SELECT id FROM sessions WHERE key = ? AND ended_at IS NULL", (key,))
        return int(row["id"]) if row else await self._new_session(key, chat, chat_type)

    async def _new_session(self, key: str, chat: ChatRef, chat_type: str) -> int:
        """Create the key's session, or take the one another writer made first: one write."""
        now = time.time()

        async def create(db: aiosqlite.Connection) -> int:
            row = await first_row(db, "INSERT INTO sessions (key, platform, chat_id, thread_id, chat_type, created_at,"
                                      " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id",
                                  (key, chat.platform, chat.chat_id, chat.thread_id, chat_type, now, now)) \
                or await first_row(db, "SELECT id FROM sessions WHERE key = ? AND ended_at IS NULL", (key,))
            return int(row[0])  # type: ignore[index]

        return await self.write(create)

    async def in_thread(self, platform: str, chat_id: str, thread_id: str, key: str) -> bool:
        """Whether the agent is in this thread: it took the message that opened it, or the
        thread's session is active (the agent was addressed later in the thread)."""
        row = await self.fetch_one(
            "SELECT EXISTS (SELECT 1 FROM inbox WHERE platform = ? AND chat_id = ? AND platform_message_id = ?"
            " AND state != 'refused') OR EXISTS (SELECT 1 FROM sessions WHERE key = ? AND ended_at IS NULL) AS found",
            (platform, chat_id, thread_id, key))
        return bool(row and row["found"])

    async def end_session(self, key: str) -> int | None:
        """End the key's active session; return its id (None: there was none)."""
        async def end(db: aiosqlite.Connection) -> int | None:
            row = await first_row(db, "UPDATE sessions SET ended_at = ? WHERE key = ? AND ended_at IS NULL RETURNING id",
                                 (time.time(), key))
            return int(row[0]) if row else None

        return await self.write(end, single=True)

    async def history(self, session_id: int, limit: int = 200) -> list[dict[str, Any]]:
        """The session's transcript in chat-completions form, without cancelled turns."""
        return (await self.history_window(session_id, limit))[0]

    async def history_window(self, session_id: int, limit: int = 200) -> tuple[list[dict[str, Any]], list[int | None]]:
        """What the model is sent of the session, and each message's id (None: a summary). After a
        compression: the first user message, the latest summary, and the messages after it."""
        _, rows = await self.read(lambda db: _window(db, _BY_ID, session_id, limit))
        return _history(rows)

    async def open_turn(self, key: str, chat: ChatRef, chat_type: str, limit: int = 200) -> TurnStart:
        """What a turn starts from, in one read: the key's session (created when there is none), its
        history window and the prompt snapshot it keeps."""
        row, rows = await self.read(lambda db: _window(db, _BY_KEY, key, limit))
        if row is None:
            return TurnStart(await self._new_session(key, chat, chat_type), [], [], None)
        return TurnStart(int(row["id"]), *_history(rows), row["prompt"])

    async def save_summary(self, session_id: int, through_message_id: int, summary: str) -> None:
        """A compression's summary of the session up to a message (the transcript stays whole)."""
        await self.execute("INSERT INTO session_summaries (session_id, through_message_id, summary, created_at)"
                        " VALUES (?, ?, ?, ?)", (session_id, through_message_id, summary, time.time()))

    async def commit_turn(self, session_id: int, inbox_ids: list[int], author: ChatRef | None,
                          user_id: str | None, messages: list[dict[str, Any]], reply: OutboxItem | None,
                          *, status: str = "ok", inbox_state: str | None = None, also: Work | None = None) -> int | None:
        """Record a finished turn atomically; return the reply's outbox id.

        `status` (ok | cancelled | failed) is the transcript's: only `ok` messages are replayed to
        the model. The inbox rows become done, cancelled or failed accordingly, or `inbox_state`.
        `also`: more statements for the same transaction. A user message's author is `user_id`, or
        its own `author_id` (a message another person folded into the turn).
        """
        now = time.time()
        rows = [(session_id, inbox_ids[0] if inbox_ids else None, m["role"], m.get("content") or "",
                 json.dumps(m["tool_calls"]) if m.get("tool_calls") else None, m.get("tool_call_id"),
                 m.get("name"), author.platform if author and m["role"] == "user" else None,
                 m.get("author_id", user_id) if m["role"] == "user" else None, status, now) for m in messages]
        inbox_state = inbox_state or {"ok": "done"}.get(status, status)

        async def commit(db: aiosqlite.Connection) -> int | None:
            done = await pipelined(
                db.executemany("INSERT INTO messages (session_id, inbox_id, role, content, tool_calls, tool_call_id,"
                               " name, platform, user_id, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                               rows),
                db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_id)),
                db.executemany("UPDATE inbox SET state = ?, updated_at = ? WHERE id = ?",
                               [(inbox_state, now, i) for i in inbox_ids]),
                *([also(db)] if also is not None else []),
                *([self.insert_outbox(db, reply, now)] if reply else []))
            return done[-1] if reply else None

        return await self.write(commit)

    # -- outbox ---------------------------------------------------------------------------

    @staticmethod
    async def insert_outbox(db: aiosqlite.Connection, item: OutboxItem, now: float) -> int:
        """Queue `item` inside a unit of work of the caller's (`store.write`)."""
        cur = await db.execute(
            "INSERT INTO outbox (platform, chat_id, thread_id, inbox_id, payload, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (item.chat.platform, item.chat.chat_id, item.chat.thread_id, item.inbox_id, item.payload(), now))
        item.id, item.created_at = int(cur.lastrowid), now
        return item.id

    async def outbox_add(self, item: OutboxItem, *, done_inbox_id: int | None = None) -> int:
        """Queue a reply; optionally mark the inbox message it answers as done, atomically."""
        now = time.time()

        async def add(db: aiosqlite.Connection) -> int:
            if done_inbox_id is not None:
                await db.execute("UPDATE inbox SET state = 'done', updated_at = ? WHERE id = ?", (now, done_inbox_id))
            return await self.insert_outbox(db, item, now)

        return await self.write(add, single=done_inbox_id is None)

    async def outbox_pending(self, platform: str | None = None, chat_id: str | None = None) -> list[OutboxItem]:
        """Pending replies, oldest first; a reply whose turn sent a preview edits that message."""
        sql = ("SELECT o.*, i.draft_message_id AS inbox_draft FROM outbox o LEFT JOIN inbox i ON i.id = o.inbox_id"
               " WHERE o.state = 'pending'")
        args: tuple[Any, ...] = ()
        if platform is not None:
            sql += " AND o.platform = ? AND o.chat_id = ?"
            args = (platform, chat_id)
        rows = await self.fetch_all(sql + " ORDER BY o.id", args)
        items = []
        for r in rows:
            p = json.loads(r["payload"])
            items.append(OutboxItem(chat=ChatRef(r["platform"], r["chat_id"], r["thread_id"]), text=p["text"],
                                    buttons=p.get("buttons") or [], reply_to=p.get("reply_to"),
                                    draft_message_id=p.get("draft_message_id") or r["inbox_draft"],
                                    inbox_id=r["inbox_id"], id=r["id"], sent_ids=json.loads(r["platform_message_ids"]),
                                    attempts=r["attempts"], files=p.get("files") or [], created_at=r["created_at"]))
        return items

    async def outbox_chats(self, before: float | None = None) -> list[tuple[str, str]]:
        """The chats that have pending replies (queued before `before`, when given)."""
        rows = await self.fetch_all("SELECT DISTINCT platform, chat_id FROM outbox WHERE state = 'pending'"
                                    " AND created_at < ?", (float("inf") if before is None else before,))
        return [(r["platform"], r["chat_id"]) for r in rows]

    async def outbox_progress(self, item: OutboxItem, *, done: bool, error: str | None = None,
                              failed: bool = False) -> None:
        """Record the parts sent so far; `done` marks it sent, `failed` gives up on it."""
        state = "failed" if failed else ("sent" if done else "pending")
        await self.execute("UPDATE outbox SET state = ?, platform_message_ids = ?, attempts = ?, error = ?,"
                        " sent_at = CASE WHEN ? = 'sent' THEN ? ELSE sent_at END WHERE id = ?",
                        (state, json.dumps(item.sent_ids), item.attempts, error, state, time.time(), item.id))

    async def prune(self, before: float) -> tuple[int, int]:
        """Forget finished inbox and outbox rows older than `before`; return how many of each.

        Outbox rows a cron run points at are kept: they hold the ids of the messages it delivered.
        """
        async def prune(db: aiosqlite.Connection) -> tuple[int, int]:
            inbox = await db.execute("DELETE FROM inbox WHERE state NOT IN ('received', 'processing')"
                                     " AND updated_at < ?", (before,))
            await db.execute("DELETE FROM dead_letters WHERE created_at < ?", (before,))
            outbox = await db.execute(
                "DELETE FROM outbox WHERE state IN ('sent', 'failed') AND created_at < ?"
                " AND id NOT IN (SELECT outbox_id FROM cron_runs WHERE outbox_id IS NOT NULL)", (before,))
            return inbox.rowcount, outbox.rowcount

        return await self.write(prune)

    # -- search and listings --------------------------------------------------------------

    async def search(self, query: str, *, platform: str, user_id: str, limit: int = 10,
                     session_id: int | None = None) -> list[SearchHit]:
        """Full-text search over transcripts of sessions this user took part in (`session_id`: of that one only)."""
        terms = " ".join('"' + t.replace('"', '""') + '"' for t in query.split() if t)
        if not terms:
            return []
        among, who = ("= ?", (session_id,)) if session_id is not None else \
            ("IN (SELECT DISTINCT session_id FROM messages WHERE platform = ? AND user_id = ?)", (platform, user_id))
        rows = await self.fetch_all(
            "SELECT m.session_id, m.role, snippet(messages_fts, 0, '[', ']', '…', 12) AS snip, m.created_at"
            " FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
            f" WHERE messages_fts MATCH ? AND m.role IN ('user', 'assistant') AND m.session_id {among}"
            " ORDER BY rank LIMIT ?", (terms, *who, limit))
        return [SearchHit(r["session_id"], r["role"], r["snip"], r["created_at"]) for r in rows]

    async def session_summary(self, key: str) -> dict[str, Any] | None:
        row = await self.fetch_one(
            "SELECT s.id, s.created_at, (SELECT count(*) FROM messages m WHERE m.session_id = s.id"
            " AND m.status = 'ok') AS messages FROM sessions s WHERE s.key = ? AND s.ended_at IS NULL", (key,))
        return dict(row) if row else None

    async def list_sessions(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = await self.fetch_all(
            "SELECT s.id, s.key, s.created_at, s.updated_at, s.ended_at, (SELECT count(*) FROM messages m"
            " WHERE m.session_id = s.id) AS messages FROM sessions s ORDER BY s.updated_at DESC LIMIT ?", (limit,))
        return [dict(r) for r in rows]
