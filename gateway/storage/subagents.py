"""Subagent runs (`agent.delegation`'s `SubagentLog`).

A run is a row of `subagent_runs`, linked to the parent's session and turn (its inbox row), with its
transcript in a session of its own (key `subagent:<run id>`) that ends when the run ends. A run that
ended more than `gateway.retention_days` ago is forgotten with that transcript (`prune`).
"""

from __future__ import annotations

import time
from typing import Any

from gateway.storage.connection import Connection, Work
from gateway.storage.database import Database
from gateway.storage.sessions import BATCH, SessionStore, forget_sessions
from gateway.storage.tables import Tables

# a run's end state → its transcript's status (any other: failed)
TRANSCRIPT_STATUS = {"done": "ok", "stopped": "ok", "cancelled": "cancelled"}


def _end(run_id: int, session_id: int, state: str, summary: str) -> Work:
    """A unit for the transaction that commits the run's transcript: the run ends in `state` with its
    summary, and its session ends."""
    now = time.time()

    async def end(db: Connection) -> None:
        await db.execute("UPDATE subagent_runs SET state = ?, summary = ?, ended_at = ? WHERE id = ?",
                         state, summary, now, run_id)
        await db.execute("UPDATE sessions SET ended_at = ? WHERE id = ?", now, session_id)

    return end


class SubagentStore(Tables):
    """Runs, and their transcripts through `sessions` (the group that commits a transcript)."""

    def __init__(self, db: Database, sessions: SessionStore) -> None:
        super().__init__(db)
        self.sessions = sessions

    async def started(self, parent_session_id: int | None, parent_inbox_id: int | None, depth: int, task: str,
                      platform: str, chat_id: str, thread_id: str | None) -> int:
        """A running run and its transcript's session, in one write; the run's id."""
        now = time.time()

        async def start(db: Connection) -> int:
            run_id = int(await db.fetchval(
                "INSERT INTO subagent_runs (parent_session_id, parent_inbox_id, depth, task, state, started_at)"
                " VALUES (?, ?, ?, ?, 'running', ?) RETURNING id",
                parent_session_id, parent_inbox_id, depth, task, now))
            session_id = await db.fetchval(
                "INSERT INTO sessions (key, platform, chat_id, thread_id, chat_type, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, 'subagent', ?, ?) RETURNING id",
                f"subagent:{run_id}", platform, chat_id, thread_id, now, now)
            await db.execute("UPDATE subagent_runs SET session_id = ? WHERE id = ?", session_id, run_id)
            return run_id

        return await self.db.write(start)

    async def session(self, run_id: int) -> int | None:
        """The session of the run's transcript (None: no such run, or its session was forgotten)."""
        row = await self.fetchrow("SELECT session_id FROM subagent_runs WHERE id = ?", run_id)
        return row["session_id"] if row else None

    async def finished(self, run_id: int, state: str, messages: list[dict[str, Any]], summary: str) -> None:
        """The run's transcript is committed, and with it the run and its session end."""
        session_id = await self.session(run_id)
        assert session_id is not None
        await self.sessions.commit_turn(session_id, [], None, None, messages, None,
                                        status=TRANSCRIPT_STATUS.get(state, "failed"),
                                        also=_end(run_id, session_id, state, summary))

    async def interrupted(self) -> None:
        """At start: runs an earlier process left running were cut off with it; they and their sessions end,
        in one write."""
        now = time.time()

        async def interrupt(db: Connection) -> None:
            await db.execute("UPDATE sessions SET ended_at = ? WHERE ended_at IS NULL AND id IN"
                             " (SELECT session_id FROM subagent_runs WHERE state = 'running')", now)
            await db.execute("UPDATE subagent_runs SET state = 'interrupted', ended_at = ? WHERE state = 'running'",
                             now)

        await self.db.write(interrupt)

    async def prune(self, before: float) -> int:
        """Forget runs that ended before `before` (a running one never), each with its transcript's session,
        `BATCH` a write; return how many."""
        async def batch(db: Connection) -> int:
            rows = list(await db.fetch(
                "SELECT id, session_id FROM subagent_runs WHERE state != 'running' AND ended_at < ? LIMIT ?",
                before, BATCH))
            await forget_sessions(db, [r["session_id"] for r in rows if r["session_id"] is not None])
            await db.execute(f"DELETE FROM subagent_runs WHERE id {db.dialect.IN_LIST}",
                             db.dialect.listed([r["id"] for r in rows]))
            return len(rows)

        return await self.in_batches(batch)
