"""Learning's tables: sessions' frozen prompt blocks, review counters, skills' provenance and usage,
curator runs, and what a trajectory export reads of a session.

* `sessions.prompt`: a session's frozen prompt block; the first one kept wins (`keep_prompt`).
* `review_counters`, a row per session: user turns since the last memory review and tool iterations since
  the last skill review. A turn is counted in the turn's own commit (`turn_count`, a unit of work for
  `SessionStore.commit_turn`'s `also=`), which resets a counter that reached its threshold.
* `skills`, a row per skill: who wrote it first (its provenance), who last, when it was last used (viewed
  or written), how often viewed, its curator state (active | stale | archived) and whether it is pinned.
  A skill put in place by hand is entered as the user's when first viewed, or when its state or pin is set.
* `curator_runs`: each run's start, trigger, whether it was a dry run, and once it ends its changes
  (JSON) or error. `gateway_facts` keeps when the gateway first started (the first run is due from it).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from gateway.storage.connection import Connection
from gateway.storage.tables import Tables

CURATOR_LOCK = 0x63757261  # the advisory lock the curator's claims take on PostgreSQL ("cura")
_APPLIED = "dry_run = 0 AND finished_at IS NOT NULL AND error IS NULL"  # a curator run applied and finished well


@dataclass(slots=True)
class TurnCount:
    """One turn counted, as a unit of work in the turn's transaction; it says afterwards whether a
    threshold was reached (the counter is reset in the same transaction: one review per threshold)."""

    session_id: int
    tool_iterations: int
    memory_every: int
    skill_every: int
    memory_due: bool = False
    skill_due: bool = False

    async def __call__(self, db: Connection) -> None:
        now = time.time()
        counted = await db.fetchrow(
            "INSERT INTO review_counters (session_id, turns_since_memory, iters_since_skill, updated_at)"
            " VALUES (?, 1, ?, ?) ON CONFLICT (session_id) DO UPDATE SET"
            " turns_since_memory = review_counters.turns_since_memory + 1,"
            " iters_since_skill = review_counters.iters_since_skill + ?,"
            " updated_at = ? RETURNING turns_since_memory, iters_since_skill",
            self.session_id, self.tool_iterations, now, self.tool_iterations, now)
        assert counted is not None  # (an upsert returns its row)
        self.memory_due = counted["turns_since_memory"] >= self.memory_every
        self.skill_due = counted["iters_since_skill"] >= self.skill_every
        if self.memory_due or self.skill_due:
            await db.execute(
                "UPDATE review_counters SET turns_since_memory = CASE WHEN ? THEN 0 ELSE turns_since_memory END,"
                " iters_since_skill = CASE WHEN ? THEN 0 ELSE iters_since_skill END WHERE session_id = ?",
                self.memory_due, self.skill_due, self.session_id)


class LearningStore(Tables):
    # -- the frozen block and the review counters ------------------------------------------

    async def keep_prompt(self, session_id: int, block: str) -> str | None:
        """Keep `block` as the session's prompt unless it has one; the one it keeps (None: no such session)."""
        kept = await self.db.write(lambda db: db.fetchval(
            "UPDATE sessions SET prompt = coalesce(prompt, ?) WHERE id = ? RETURNING prompt", block, session_id),
            single=True)
        return None if kept is None else str(kept)

    def turn_count(self, session_id: int, tool_iterations: int, memory_every: int, skill_every: int) -> TurnCount:
        """A finished turn's count, to run in the turn's own commit (see `TurnCount`)."""
        return TurnCount(session_id, tool_iterations, memory_every, skill_every)

    async def counters(self, session_id: int) -> tuple[int, int]:
        """The session's user turns since its last memory review and tool iterations since its last skill review."""
        row = await self.fetchrow("SELECT turns_since_memory, iters_since_skill FROM review_counters"
                                  " WHERE session_id = ?", session_id)
        return (int(row["turns_since_memory"]), int(row["iters_since_skill"])) if row else (0, 0)

    # -- skills ----------------------------------------------------------------------------

    async def skill_written(self, name: str, provenance: str) -> None:
        """A write by `provenance`; the first writer stays the skill's provenance, and it is active again."""
        now = time.time()
        await self.execute(
            "INSERT INTO skills (name, provenance, updated_by, created_at, updated_at, last_used_at)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET updated_by = excluded.updated_by,"
            " updated_at = excluded.updated_at, last_used_at = excluded.updated_at, state = 'active'",
            name, provenance, provenance, now, now, now)

    async def skill_viewed(self, name: str) -> None:
        """One view more; a stale skill is active again."""
        now = time.time()

        async def record_view(db: Connection) -> None:
            if not await db.execute("UPDATE skills SET views = views + 1, last_used_at = ?,"
                                    " state = CASE state WHEN 'stale' THEN 'active' ELSE state END WHERE name = ?",
                                    now, name):  # a skill put in place by hand: the user's
                await db.execute("INSERT INTO skills (name, provenance, updated_by, created_at, updated_at, views,"
                                 " last_used_at) VALUES (?, 'user', 'user', ?, ?, 1, ?)", name, now, now, now)

        await self.db.write(record_view)

    async def set_skill_state(self, name: str, state: str) -> None:
        now = time.time()
        await self.execute("INSERT INTO skills (name, provenance, updated_by, created_at, updated_at, state)"
                           " VALUES (?, 'user', 'user', ?, ?, ?) ON CONFLICT(name) DO UPDATE SET state = ?",
                           name, now, now, state, state)

    async def pin_skill(self, name: str, pinned: bool) -> None:
        now = time.time()
        await self.execute("INSERT INTO skills (name, provenance, updated_by, created_at, updated_at, pinned)"
                           " VALUES (?, 'user', 'user', ?, ?, ?) ON CONFLICT(name) DO UPDATE SET pinned = ?",
                           name, now, now, int(pinned), int(pinned))

    async def skills(self) -> dict[str, dict[str, Any]]:
        """Every skill's row (name, provenance, updated_by, created_at, updated_at, last_used_at, views,
        state, pinned), by name."""
        return {r["name"]: dict(r) for r in await self.fetch("SELECT * FROM skills")}

    # -- the curator -----------------------------------------------------------------------

    async def first_started_at(self, now: float) -> float:
        """When the gateway first started: `now`, unless an earlier start was recorded."""
        await self.execute(
            "INSERT INTO gateway_facts (key, value) VALUES ('first_started_at', ?) ON CONFLICT DO NOTHING", repr(now))
        row = await self.fetchrow("SELECT value FROM gateway_facts WHERE key = 'first_started_at'")
        return float(row["value"]) if row else now

    async def last_applied_run_start(self) -> float | None:
        """When the latest curator run that was applied (not a dry run) and finished without error started."""
        row = await self.fetchrow(f"SELECT max(started_at) AS t FROM curator_runs WHERE {_APPLIED}")
        return row["t"] if row else None

    async def last_applied_run(self) -> str | None:
        """The id of that run."""
        row = await self.fetchrow(f"SELECT id FROM curator_runs WHERE {_APPLIED} ORDER BY started_at DESC LIMIT 1")
        return row["id"] if row else None

    async def job_prompts(self) -> list[str]:
        """Every scheduled job's prompt (the skills they name are left alone)."""
        return [r["prompt"] for r in await self.fetch("SELECT prompt FROM cron_jobs")]

    async def run_started(self, run_id: str, started_at: float, dry_run: bool, trigger: str, *,
                          alone_since: float | None = None) -> bool:
        """Record a run's start; whether it is to run. `alone_since`: only when no run of the same trigger started
        after that time (several instances: the tick that comes first runs the due pass, the others skip it; the
        instances' claims are taken one at a time, `ADVISORY_LOCK`)."""
        async def start(db: Connection) -> bool:
            if alone_since is not None and db.dialect.ADVISORY_LOCK:
                await db.execute(db.dialect.ADVISORY_LOCK, CURATOR_LOCK)
            return await db.execute(
                "INSERT INTO curator_runs (id, started_at, dry_run, trigger) SELECT ?, ?, ?, ? WHERE NOT EXISTS"
                " (SELECT 1 FROM curator_runs WHERE trigger = ? AND dry_run = 0 AND started_at > ?)",
                run_id, started_at, int(dry_run), trigger, trigger,
                float("inf") if alone_since is None else alone_since) == 1
        return await self.db.write(start)

    async def run_finished(self, run_id: str, finished_at: float, changes: list[dict[str, Any]],
                           error: str | None) -> None:
        """A run's end: its changes (kept as JSON) or its error."""
        await self.execute("UPDATE curator_runs SET finished_at = ?, changes = ?, error = ? WHERE id = ?",
                           finished_at, json.dumps(changes), error, run_id)

    async def curator_runs(self, limit: int = 10) -> list[dict[str, Any]]:
        """The newest runs' rows (id, started_at, finished_at, dry_run, trigger, changes as JSON, error)."""
        rows = await self.fetch("SELECT * FROM curator_runs ORDER BY started_at DESC LIMIT ?", limit)
        return [dict(r) for r in rows]

    async def recorded_runs(self) -> dict[str, bool]:
        """Every recorded run's id, and whether it has finished."""
        return {r["id"]: r["finished_at"] is not None
                for r in await self.fetch("SELECT id, finished_at FROM curator_runs")}

    async def forget_runs(self, run_ids: list[str]) -> None:
        await self.execute(
            f"DELETE FROM curator_runs WHERE id {self.db.dialect.IN_LIST}", self.db.dialect.listed(run_ids))
