"""The gateway's side of subagents (`agent.delegation`): each child's run linked to the parent's
session and turn, and its transcript kept in a session of its own (ended when the child ends). A run
that ended more than `gateway.retention_days` ago is forgotten with that transcript (`prune`)."""

from __future__ import annotations

import json
import time
from typing import Any

import aiosqlite

from agent.tools import ToolContext
from gateway.storage import Store
from gateway.storage.sessions import BATCH, forget_sessions

TRANSCRIPT_STATUS = {"done": "ok", "stopped": "ok", "cancelled": "cancelled"}  # else: failed


class SubagentRuns:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def started(self, ctx: ToolContext, task: str, depth: int) -> int:
        now = time.time()

        async def start(db: aiosqlite.Connection) -> int:
            cur = await db.execute(
                "INSERT INTO subagent_runs (parent_session_id, parent_inbox_id, depth, task, state, started_at)"
                " VALUES (?, ?, ?, ?, 'running', ?)", (ctx.session_id, ctx.extras.get("inbox_id"), depth, task, now))
            run_id = int(cur.lastrowid)
            cur = await db.execute(
                "INSERT INTO sessions (key, platform, chat_id, thread_id, chat_type, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, 'subagent', ?, ?)",
                (f"subagent:{run_id}", ctx.platform, ctx.chat_id, ctx.extras.get("thread_id"), now, now))
            await db.execute("UPDATE subagent_runs SET session_id = ? WHERE id = ?", (cur.lastrowid, run_id))
            return run_id

        return await self.store.write(start)

    async def finished(self, run_id: int, state: str, messages: list[dict[str, Any]], summary: str) -> None:
        row = await self.store.fetch_one("SELECT session_id FROM subagent_runs WHERE id = ?", (run_id,))
        assert row is not None
        now = time.time()

        async def end(db: aiosqlite.Connection) -> None:
            await db.execute("UPDATE subagent_runs SET state = ?, summary = ?, ended_at = ? WHERE id = ?",
                             (state, summary, now, run_id))
            await db.execute("UPDATE sessions SET ended_at = ? WHERE id = ?", (now, row["session_id"]))

        await self.store.sessions.commit_turn(row["session_id"], [], None, None, messages, None,
                                     status=TRANSCRIPT_STATUS.get(state, "failed"), also=end)

    async def interrupted(self) -> None:
        """At start: children an earlier run left running were cut off with it (their sessions end)."""
        now = time.time()

        async def interrupt(db: aiosqlite.Connection) -> None:
            await db.execute("UPDATE sessions SET ended_at = ? WHERE ended_at IS NULL AND id IN"
                       " (SELECT session_id FROM subagent_runs WHERE state = 'running')", (now,))
            await db.execute("UPDATE subagent_runs SET state = 'interrupted', ended_at = ? WHERE state = 'running'", (now,))

        await self.store.write(interrupt)

    async def prune(self, before: float) -> int:
        """Forget runs that ended before `before` (a running one never), each with its transcript; return
        how many."""
        async def batch(db: aiosqlite.Connection) -> int:
            rows = list(await db.execute_fetchall("SELECT id, session_id FROM subagent_runs"
                                                  " WHERE state != 'running' AND ended_at < ? LIMIT ?", (before, BATCH)))
            await forget_sessions(db, [r["session_id"] for r in rows if r["session_id"] is not None])
            await db.execute("DELETE FROM subagent_runs WHERE id IN (SELECT value FROM json_each(?))",
                       (json.dumps([r["id"] for r in rows]),))
            return len(rows)

        pruned = 0
        while n := await self.store.write(batch):
            pruned += n
        return pruned
