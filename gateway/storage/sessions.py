"""Sessions and their transcripts: the messages, compression summaries, full-text search, a turn's
start and its atomic commit, and forgetting a session with everything that hangs on it.

A turn reads its start in one round trip (`open_turn`) and records its end in one transaction
(`commit_turn`: the messages, the inbox rows' state, the reply in the outbox, and what the caller adds).
A session goes (`forget`) with its messages (and so their rows in the full-text index: the `messages`
triggers delete them), its compression summaries and its review counters. A subagent run whose own
session goes is deleted with it when it has finished; a run whose parent session goes keeps its row,
without the link. Its token usage stays (in the daily sums).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from agent.compression import SUMMARY_PREFIX
from gateway.storage.connection import Connection, Row, Work
from gateway.storage.outbox import OutboxItem, insert_outbox
from gateway.storage.tables import Tables
from platforms.base import ChatRef

BATCH = 200  # sessions deleted per write: a big first prune leaves room for other writes between its parts


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """What a trajectory export says of a session besides its messages."""

    platform: str
    created_at: float
    ended_at: float | None


@dataclass(frozen=True, slots=True)
class TurnStart:
    """What a turn starts from (`SessionStore.open_turn`)."""

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


# A session's row and its latest summary; `{}`: how it is found (`_BY_ID` or `_BY_KEY`, one argument)
_SESSION = ("SELECT s.id, s.prompt, l.through_message_id, l.summary FROM sessions s LEFT JOIN session_summaries l"
            " ON l.id = (SELECT max(id) FROM session_summaries WHERE session_id = s.id) WHERE {}")
_BY_ID, _BY_KEY = "s.id = ?", "s.key = ? AND s.ended_at IS NULL"
# The newest messages after that summary (at most one argument more: how many), oldest first
_WINDOW = ("SELECT id, role, content, tool_calls, tool_call_id, name FROM (SELECT m.* FROM ({}) s JOIN messages m"
           " ON m.session_id = s.id AND m.status = 'ok' AND m.id > coalesce(s.through_message_id, 0)"
           " ORDER BY m.id DESC LIMIT ?) AS newest ORDER BY id")


async def _window(db: Connection, where: str, arg: Any, limit: int) -> tuple[Row | None, list[Any]]:
    """A session's row (None: no such session) and the rows of its history window (see
    `SessionStore.history_window`): both queries in one round trip."""
    session = _SESSION.format(where)
    row, found = await db.pipelined(db.fetchrow(session, arg), db.fetch(_WINDOW.format(session), arg, limit))
    rows: list[Any] = list(found)
    if row is not None and row["summary"] is not None:
        first = await db.fetchrow("SELECT id, role, content, tool_calls, tool_call_id, name FROM messages"
                                  " WHERE session_id = ? AND status = 'ok' AND role = 'user' ORDER BY id LIMIT 1",
                                  row["id"])
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


# `speakers`, on the index `messages_speakers` (every turn asks): from each person to the next in index order
# (a later user id on the same platform, else the first one of a later platform; a missing platform sorts
# first), then each one's latest message — a few lookups per person, however long the session.
_SPOKEN = "FROM messages WHERE session_id = ?1 AND role = 'user' AND status = 'ok' AND user_id IS NOT NULL"
_SPEAKERS = f"""WITH RECURSIVE who (platform, user_id) AS (
    SELECT * FROM (SELECT platform, user_id {_SPOKEN} ORDER BY platform, user_id LIMIT 1) AS lowest
    UNION ALL
    SELECT m.platform, m.user_id FROM who JOIN messages m ON m.id = coalesce(
        (SELECT id {_SPOKEN} AND platform IS NOT DISTINCT FROM who.platform AND user_id > who.user_id
         ORDER BY user_id LIMIT 1),
        (SELECT id {_SPOKEN} AND platform > who.platform ORDER BY platform, user_id LIMIT 1),
        (SELECT id {_SPOKEN} AND who.platform IS NULL AND platform IS NOT NULL ORDER BY platform, user_id LIMIT 1)))
SELECT platform, user_id,
    (SELECT max(id) {_SPOKEN} AND platform IS NOT DISTINCT FROM who.platform AND user_id = who.user_id) AS latest
FROM who ORDER BY latest"""


class SessionStore(Tables):
    async def active(self, key: str, chat: ChatRef, chat_type: str) -> int:
        """The id of the key's current session, created when there is none."""
        row = await self.fetchrow("SELECT id FROM sessions WHERE key = ? AND ended_at IS NULL", key)
        return int(row["id"]) if row else await self._new(key, chat, chat_type)

    async def _new(self, key: str, chat: ChatRef, chat_type: str) -> int:
        """Create the key's session, or take the one another writer made first: one write."""
        now = time.time()

        async def create(db: Connection) -> int:
            made = await db.fetchval("INSERT INTO sessions (key, platform, chat_id, thread_id, chat_type, created_at,"
                                     " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id",
                                     key, chat.platform, chat.chat_id, chat.thread_id, chat_type, now, now)
            return int(made or await db.fetchval("SELECT id FROM sessions WHERE key = ? AND ended_at IS NULL", key))

        return await self.db.write(create)

    async def in_thread(self, platform: str, chat_id: str, thread_id: str, key: str) -> bool:
        """Whether the agent is in this thread: it took the message that opened it, or the
        thread's session is active (the agent was addressed later in the thread)."""
        row = await self.fetchrow(
            "SELECT EXISTS (SELECT 1 FROM inbox WHERE platform = ? AND chat_id = ? AND platform_message_id = ?"
            " AND origin = 'person' AND state != 'refused')"
            " OR EXISTS (SELECT 1 FROM sessions WHERE key = ? AND ended_at IS NULL) AS found",
            platform, chat_id, thread_id, key)
        return bool(row and row["found"])

    async def end(self, key: str) -> int | None:
        """End the key's active session; return its id (None: there was none)."""
        async def end(db: Connection) -> int | None:
            ended = await db.fetchval(
                "UPDATE sessions SET ended_at = ? WHERE key = ? AND ended_at IS NULL RETURNING id", time.time(), key)
            return None if ended is None else int(ended)

        return await self.db.write(end, single=True)

    async def history(self, session_id: int, limit: int = 200) -> list[dict[str, Any]]:
        """The session's transcript in chat-completions form, without cancelled turns."""
        return (await self.history_window(session_id, limit))[0]

    async def history_window(self, session_id: int, limit: int = 200) -> tuple[list[dict[str, Any]], list[int | None]]:
        """What the model is sent of the session, and each message's id (None: a summary). After a
        compression: the first user message, the latest summary, and the messages after it."""
        _, rows = await self.db.read(lambda db: _window(db, _BY_ID, session_id, limit))
        return _history(rows)

    async def open_turn(self, key: str, chat: ChatRef, chat_type: str, limit: int = 200) -> TurnStart:
        """What a turn starts from, in one read: the key's session (created when there is none), its
        history window and the prompt snapshot it keeps."""
        row, rows = await self.db.read(lambda db: _window(db, _BY_KEY, key, limit))
        if row is None:
            return TurnStart(await self._new(key, chat, chat_type), [], [], None)
        return TurnStart(int(row["id"]), *_history(rows), row["prompt"])

    async def save_summary(self, session_id: int, through_message_id: int, summary: str) -> None:
        """A compression's summary of the session up to a message (the transcript stays whole)."""
        await self.execute("INSERT INTO session_summaries (session_id, through_message_id, summary, created_at)"
                           " VALUES (?, ?, ?, ?)", session_id, through_message_id, summary, time.time())

    async def commit_turn(self, session_id: int, inbox_ids: list[int], author: ChatRef | None,
                          user_id: str | None, messages: list[dict[str, Any]], reply: OutboxItem | None,
                          *, status: str = "ok", inbox_state: str | None = None,
                          also: Work | None = None, fenced: Work | None = None) -> int | None:
        """Record a finished turn atomically; return the reply's outbox id.

        `status` (ok | cancelled | failed) is the transcript's: only `ok` messages are replayed to
        the model. The inbox rows become done, cancelled or failed accordingly, or `inbox_state`.
        `also`: more statements for the same transaction; `fenced`: one run first, that may refuse the commit
        (several instances: `gateway.storage.owners.still_owned`). A user message's author is `user_id`, or
        its own `author_id` (a message another person folded into the turn).
        """
        now = time.time()
        rows = [(session_id, inbox_ids[0] if inbox_ids else None, m["role"], m.get("content") or "",
                 json.dumps(m["tool_calls"]) if m.get("tool_calls") else None, m.get("tool_call_id"),
                 m.get("name"), author.platform if author and m["role"] == "user" else None,
                 m.get("author_id", user_id) if m["role"] == "user" else None, status, now) for m in messages]
        inbox_state = inbox_state or {"ok": "done"}.get(status, status)

        async def commit(db: Connection) -> int | None:
            if fenced is not None:
                await fenced(db)
            done = await db.pipelined(
                db.executemany("INSERT INTO messages (session_id, inbox_id, role, content, tool_calls, tool_call_id,"
                               " name, platform, user_id, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                               rows),
                db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", now, session_id),
                db.executemany("UPDATE inbox SET state = ?, updated_at = ? WHERE id = ?",
                               [(inbox_state, now, i) for i in inbox_ids]),
                *([also(db)] if also is not None else []),
                *([insert_outbox(db, reply, now)] if reply else []))
            return done[-1] if reply else None

        return await self.db.write(commit)

    async def search(self, query: str, *, platform: str, user_id: str, limit: int = 10,
                     session_id: int | None = None) -> list[SearchHit]:
        """Full-text search over transcripts of sessions this user took part in (`session_id`: of that one only)."""
        statement = self.db.dialect.search(query, platform=platform, user_id=user_id, limit=limit,
                                           session_id=session_id)
        if statement is None:
            return []
        rows = await self.fetch(*statement)
        return [SearchHit(r["session_id"], r["role"], r["snip"], r["created_at"]) for r in rows]

    async def speakers(self, session_id: int) -> list[tuple[str, str]]:
        """(platform, user id) of everyone whose messages the session's transcript holds (kept, by a
        person), in the order of their latest message."""
        rows = await self.fetch(_SPEAKERS, session_id)
        return [(r["platform"] or "", r["user_id"]) for r in rows]

    async def facts(self, session_id: int) -> SessionFacts | None:
        row = await self.fetchrow("SELECT platform, created_at, ended_at FROM sessions WHERE id = ?", session_id)
        return SessionFacts(row["platform"], row["created_at"], row["ended_at"]) if row else None

    async def chat_type(self, key: str) -> str | None:
        """The chat type ("dm", "group", "channel") of the key's latest session; None: it has none (kept)."""
        row = await self.fetchrow("SELECT chat_type FROM sessions WHERE key = ? ORDER BY id DESC LIMIT 1", key)
        return str(row["chat_type"]) if row else None

    async def summary(self, key: str) -> dict[str, Any] | None:
        row = await self.fetchrow(
            "SELECT s.id, s.created_at, (SELECT count(*) FROM messages m WHERE m.session_id = s.id"
            " AND m.status = 'ok') AS messages FROM sessions s WHERE s.key = ? AND s.ended_at IS NULL", key)
        return dict(row) if row else None

    async def listing(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = await self.fetch(
            "SELECT s.id, s.key, s.created_at, s.updated_at, s.ended_at, (SELECT count(*) FROM messages m"
            " WHERE m.session_id = s.id) AS messages FROM sessions s ORDER BY s.updated_at DESC LIMIT ?", limit)
        return [dict(r) for r in rows]

    # -- forgetting ------------------------------------------------------------------------

    async def prune_ended(self, before: float) -> int:
        """Delete sessions that ended and were last touched before `before` (`forget`); return how many."""
        async def batch(db: Connection) -> int:
            ids = [r["id"] for r in await db.fetch(
                "SELECT id FROM sessions WHERE ended_at IS NOT NULL AND ended_at < ? AND updated_at < ? LIMIT ?",
                before, before, BATCH)]
            return await forget_sessions(db, ids)

        return await self.in_batches(batch)

    async def prune_leftovers(self, before: float) -> tuple[int, int]:
        """What a kept transcript no longer needs, older than `before`: summaries a later one of the same
        session replaced (only the latest is ever read), and the review counters of ended sessions."""
        async def prune(db: Connection) -> tuple[int, int]:
            summaries = await db.execute(
                "DELETE FROM session_summaries WHERE created_at < ? AND id NOT IN"
                " (SELECT max(id) FROM session_summaries GROUP BY session_id)", before)
            counters = await db.execute(
                "DELETE FROM review_counters WHERE updated_at < ? AND session_id IN"
                " (SELECT id FROM sessions WHERE ended_at IS NOT NULL AND ended_at < ?)", before, before)
            return summaries, counters

        return await self.db.write(prune)


async def forget_sessions(db: Connection, ids: list[int]) -> int:
    """Inside a unit of work (a ledger's prune): delete those of the sessions `ids` that have ended,
    with what hangs on them (see the module doc); return how many were deleted."""
    if not ids:
        return 0
    d = db.dialect
    ended = d.listed([r["id"] for r in await db.fetch(
        f"SELECT id FROM sessions WHERE id {d.IN_LIST} AND ended_at IS NOT NULL", d.listed(ids))])
    for sql in (f"DELETE FROM messages WHERE session_id {d.IN_LIST}",
                f"DELETE FROM session_summaries WHERE session_id {d.IN_LIST}",
                f"DELETE FROM review_counters WHERE session_id {d.IN_LIST}",
                f"DELETE FROM subagent_runs WHERE session_id {d.IN_LIST} AND state != 'running'",
                f"UPDATE subagent_runs SET session_id = NULL WHERE session_id {d.IN_LIST}",
                f"UPDATE subagent_runs SET parent_session_id = NULL WHERE parent_session_id {d.IN_LIST}"):
        await db.execute(sql, ended)
    return await db.execute(f"DELETE FROM sessions WHERE id {d.IN_LIST}", ended)
