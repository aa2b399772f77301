"""Forgetting transcripts: a session with everything that hangs on it, never an active one.

A session goes with its messages (and so their rows in the full-text index: the `messages` triggers
delete them), its compression summaries and its review counters. A subagent run whose own session
goes is deleted with it when it has finished; a run whose parent session goes keeps its row, without
the link. Its token usage stays (in the sums of `gateway.usage`).

What deletes sessions: `gateway.transcript_retention_days` (people's conversations, off by default:
`prune_transcripts`), and the ledgers whose runs have a session of their own — a scheduled run's
(`cron:<job>:<run>`, with its ledger row) and a subagent's (`subagent:<run>`, with its run row).
"""

from __future__ import annotations

import json

import aiosqlite

from gateway.store import Store

BATCH = 200  # sessions per write: a big first prune leaves room for other writes between its parts
_IDS = "(SELECT value FROM json_each(?))"


async def forget_sessions(db: aiosqlite.Connection, ids: list[int]) -> int:
    """Inside a unit of work: delete those of the sessions `ids` that have ended, with what hangs on
    them; return how many were deleted."""
    if not ids:
        return 0
    ended = json.dumps([r[0] for r in await db.execute_fetchall(
        f"SELECT id FROM sessions WHERE id IN {_IDS} AND ended_at IS NOT NULL", (json.dumps(ids),))])
    for sql in (f"DELETE FROM messages WHERE session_id IN {_IDS}",
                f"DELETE FROM session_summaries WHERE session_id IN {_IDS}",
                f"DELETE FROM review_counters WHERE session_id IN {_IDS}",
                f"DELETE FROM subagent_runs WHERE session_id IN {_IDS} AND state != 'running'",
                f"UPDATE subagent_runs SET session_id = NULL WHERE session_id IN {_IDS}",
                f"UPDATE subagent_runs SET parent_session_id = NULL WHERE parent_session_id IN {_IDS}"):
        await db.execute(sql, (ended,))
    return (await db.execute(f"DELETE FROM sessions WHERE id IN {_IDS}", (ended,))).rowcount


async def prune_transcripts(store: Store, before: float) -> int:
    """Delete sessions that ended and were last touched before `before`; return how many."""
    async def batch(db: aiosqlite.Connection) -> int:
        ids = [r[0] for r in await db.execute_fetchall(
            "SELECT id FROM sessions WHERE ended_at IS NOT NULL AND ended_at < ? AND updated_at < ? LIMIT ?",
            (before, before, BATCH))]
        return await forget_sessions(db, ids)

    deleted = 0
    while n := await store.write(batch):
        deleted += n
    return deleted


async def prune_leftovers(store: Store, before: float) -> tuple[int, int]:
    """What a kept transcript no longer needs, older than `before`: summaries a later one of the same
    session replaced (only the latest is ever read), and the review counters of ended sessions."""
    async def prune(db: aiosqlite.Connection) -> tuple[int, int]:
        summaries = (await db.execute(
            "DELETE FROM session_summaries WHERE created_at < ? AND id NOT IN"
            " (SELECT max(id) FROM session_summaries GROUP BY session_id)", (before,))).rowcount
        counters = (await db.execute(
            "DELETE FROM review_counters WHERE updated_at < ? AND session_id IN"
            " (SELECT id FROM sessions WHERE ended_at IS NOT NULL AND ended_at < ?)", (before, before))).rowcount
        return summaries, counters

    return await store.write(prune)
