"""Scheduled jobs (`cron_jobs`), their run ledger (`cron_runs`) and the gateway processes that claim
runs (`gateway_instances`).

The ledger has one row per (job, scheduled time, manual), unique. A slot is claimed in one transaction
(`CronStore.claim_slot`) that reads the job only while its `next_run_at` is still that slot, records the
slot (and the earlier ones it missed) with ON CONFLICT DO NOTHING, and moves `next_run_at` on: compare-and-set
on the old value and the UNIQUE key, so a slot runs at most once across restarts and with several
processes on one database. A "run now" row is queued, then started by whoever updates it from `queued`
first; a run ends (`finish_run`) only from `running`, in the transaction that queues its message in the
outbox. Each run's transcript is the session `run_session_key(job, run)`: pruning a ledger row forgets it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from gateway.storage.connection import Connection
from gateway.storage.outbox import OutboxItem, insert_outbox
from gateway.storage.sessions import forget_sessions
from gateway.storage.tables import Tables

PRUNE_BATCH = 200  # ledger rows (and their sessions) per write when pruning
# The columns of a job `change_job` may set (their names go into the statement)
JOB_SETTINGS = frozenset({"name", "prompt", "schedule", "timezone", "target", "enabled", "missed_policy",
                          "next_run_at", "model"})


def run_session_key(job_id: int, run_id: int) -> str:
    """The key of the session a run's transcript is kept in."""
    return f"cron:{job_id}:{run_id}"


@dataclass(frozen=True, slots=True)
class SlotRecord:
    """What claiming a job's slot records; decided from the job's row inside the claim's transaction."""

    scheduled_at: float  # the slot taken: the newest one due
    runs: bool  # it runs now, claimed by the caller; else it is final at once, as `not_run`, with `error`
    not_run: str  # skipped | missed: the state of a slot that is not run
    error: str | None  # why this slot is not run
    earlier: list[tuple[float, str]]  # earlier slots not run, recorded as `not_run`: (scheduled_at, why)
    next_run_at: float | None  # the job's next run after the claim
    last_status: str | None  # the job's last status and last run after the claim
    last_run_at: float | None


Decided = TypeVar("Decided", bound=SlotRecord)


class CronStore(Tables):
    # -- jobs -----------------------------------------------------------------------------------

    async def add_job(self, *, name: str, prompt: str, schedule: str, timezone: str, target: str,
                      owner_platform: str, owner_id: str, owner_chat: str | None, owner_key: str | None,
                      missed_policy: str, next_run_at: float | None, model: str | None, now: float) -> int:
        """Store a new job (enabled); its id."""
        async def insert(db: Connection) -> int:
            return int(await db.fetchval(
                "INSERT INTO cron_jobs (name, prompt, schedule, timezone, target, owner_platform, owner_id, owner_chat,"
                " owner_key, missed_policy, next_run_at, created_at, updated_at, model)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id", name, prompt, schedule, timezone, target,
                owner_platform, owner_id, owner_chat, owner_key, missed_policy, next_run_at, now, now, model))

        return await self.db.write(insert, single=True)

    async def job(self, job_id: int) -> dict[str, Any] | None:
        """A job's row (its columns by name); None: there is no such job."""
        row = await self.fetchrow("SELECT * FROM cron_jobs WHERE id = ?", job_id)
        return dict(row) if row else None

    async def jobs(self, owner: tuple[str, str] | None = None) -> list[dict[str, Any]]:
        """The rows of all jobs, or of those of `owner` (platform, user id), oldest first."""
        if owner is None:
            rows = await self.fetch("SELECT * FROM cron_jobs ORDER BY id")
        else:
            rows = await self.fetch("SELECT * FROM cron_jobs WHERE owner_platform = ? AND owner_id = ? ORDER BY id",
                                    *owner)
        return [dict(r) for r in rows]

    async def change_job(self, job_id: int, changes: dict[str, Any], now: float) -> None:
        """Set some of a job's `JOB_SETTINGS` (column → value), and its `updated_at` to `now`."""
        unknown = set(changes) - JOB_SETTINGS
        if unknown:
            raise ValueError(f"not a job setting: {', '.join(sorted(unknown))}")
        columns = ", ".join(f"{name} = ?" for name in changes)
        await self.execute(f"UPDATE cron_jobs SET {columns}, updated_at = ? WHERE id = ?",
                           *changes.values(), now, job_id)

    async def remove_job(self, job_id: int) -> bool:
        """Delete a job, and skip its queued "run now" requests; whether it was there. Its other ledger
        rows stay."""
        async def delete(db: Connection) -> bool:
            deleted = await db.execute("DELETE FROM cron_jobs WHERE id = ?", job_id)
            await db.execute("UPDATE cron_runs SET state = 'skipped', error = 'job removed' "
                             "WHERE job_id = ? AND state = 'queued'", job_id)
            return deleted > 0

        return await self.db.write(delete)

    async def due_before(self, until: float) -> list[tuple[int, float]]:
        """(job id, next run) of enabled jobs due at or before `until`, soonest first."""
        rows = await self.fetch(
            "SELECT id, next_run_at FROM cron_jobs WHERE enabled = 1 AND next_run_at IS NOT NULL"
            " AND next_run_at <= ? ORDER BY next_run_at", until)
        return [(int(r["id"]), float(r["next_run_at"])) for r in rows]

    # -- gateway processes ----------------------------------------------------------------------

    async def heartbeat(self, instance_id: str, host: str, pid: int) -> None:
        """Register the process, or note that it is still alive (a row a sibling dropped comes back)."""
        now = time.time()
        await self.execute("INSERT INTO gateway_instances VALUES (?, ?, ?, ?, ?)"
                           " ON CONFLICT(id) DO UPDATE SET seen_at = excluded.seen_at",
                           instance_id, host, pid, now, now)

    async def unregister(self, instance_id: str) -> None:
        await self.execute("DELETE FROM gateway_instances WHERE id = ?", instance_id)

    async def instances_seen_since(self, since: float) -> list[dict[str, Any]]:
        """The processes (id, host, pid, started_at, seen_at) whose last heartbeat is at or after `since`."""
        return [dict(r) for r in await self.fetch("SELECT * FROM gateway_instances WHERE seen_at >= ?", since)]

    # -- claiming runs --------------------------------------------------------------------------

    async def running_runs(self) -> list[dict[str, Any]]:
        """The runs in progress: id, job_id, claimed_by, and that process's host, pid and seen_at (None when
        it is not registered)."""
        rows = await self.fetch("SELECT r.id, r.job_id, r.claimed_by, i.host, i.pid, i.seen_at FROM cron_runs r"
                                " LEFT JOIN gateway_instances i ON i.id = r.claimed_by WHERE r.state = 'running'")
        return [dict(r) for r in rows]

    async def interrupt_runs(self, runs: list[tuple[int, int]], error: str, now: float,
                             gone: Callable[[dict[str, Any]], bool]) -> list[tuple[int, int]]:
        """In one write: end the `runs` (job id, run id) still running as interrupted (with `error`, also the
        job's last status), and forget the processes (rows as `instances_seen_since` gives) that `gone`
        says have ended. The (job id, run id) of the runs it ended."""
        async def interrupt(db: Connection) -> list[tuple[int, int]]:
            found: list[tuple[int, int]] = []
            for job_id, run_id in runs:
                if await db.execute("UPDATE cron_runs SET state = 'interrupted', finished_at = ?, error = ?"
                                    " WHERE id = ? AND state = 'running'", now, error, run_id):
                    await db.execute("UPDATE cron_jobs SET last_status = 'interrupted', last_error = ? WHERE id = ?",
                                     error, job_id)
                    found.append((job_id, run_id))
            ended = [i for i in await db.fetch("SELECT * FROM gateway_instances") if gone(dict(i))]
            await db.executemany("DELETE FROM gateway_instances WHERE id = ?", [(i["id"],) for i in ended])
            return found

        return await self.db.write(interrupt)

    async def claim_slot(self, job_id: int, slot: float, now: float, instance_id: str,
                         decide: Callable[[dict[str, Any]], Decided]) -> tuple[Decided, int | None] | None:
        """Take the job's slot `slot` if the job is enabled and that is still its next run (None: it is
        not). In the same transaction `decide` reads the job's row and says what to record (a `SlotRecord`,
        or more: it is handed back); the slot's row is claimed by `instance_id` when it runs. With it, the
        run's id: None when the slot was already in the ledger (another process took it)."""
        async def take(db: Connection) -> tuple[Decided, int | None] | None:
            row = await db.fetchrow("SELECT * FROM cron_jobs WHERE id = ? AND enabled = 1 AND next_run_at = ?",
                                    job_id, slot)
            if row is None:
                return None
            record = decide(dict(row))
            runs = record.runs
            await db.executemany(
                "INSERT INTO cron_runs (job_id, scheduled_at, state, finished_at, error)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [(job_id, s, record.not_run, now, why) for s, why in record.earlier])
            run_id = await db.fetchval(  # (None: the slot was in the ledger already)
                "INSERT INTO cron_runs (job_id, scheduled_at, state, claimed_by, started_at, finished_at, error)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id",
                job_id, record.scheduled_at, "running" if runs else record.not_run, instance_id if runs else None,
                now if runs else None, None if runs else now, None if runs else record.error)
            await db.execute(
                "UPDATE cron_jobs SET next_run_at = ?, updated_at = ?, last_status = ?, last_run_at = ? WHERE id = ?",
                record.next_run_at, now, record.last_status, record.last_run_at, job_id)
            return record, run_id

        return await self.db.write(take)

    async def queue_run(self, job_id: int) -> int:
        """Queue a "run now" of the job (the gateway that sees it first claims it); the run's id."""
        return int(await self.db.write(lambda db: db.fetchval(
            "INSERT INTO cron_runs (job_id, scheduled_at, manual, state) VALUES (?, ?, 1, 'queued') RETURNING id",
            job_id, time.time()), single=True))

    async def queued_runs(self) -> list[dict[str, Any]]:
        """The queued runs, oldest first: each its job's row with the run's `run_id` and `scheduled_at`."""
        rows = await self.fetch("SELECT r.id AS run_id, r.scheduled_at, j.* FROM cron_runs r JOIN cron_jobs j"
                                " ON j.id = r.job_id WHERE r.state = 'queued' ORDER BY r.id")
        return [dict(r) for r in rows]

    async def start_queued(self, run_id: int, instance_id: str, now: float) -> bool:
        """Claim a queued run for `instance_id`; False: it was not queued any more (another process took it)."""
        return bool(await self.execute("UPDATE cron_runs SET state = 'running', claimed_by = ?, started_at = ?"
                                       " WHERE id = ? AND state = 'queued'", instance_id, now, run_id))

    # -- ending runs ----------------------------------------------------------------------------

    async def finish_run(self, run_id: int, job_id: int, scheduled_at: float, state: str, *, output: str | None,
                         error: str | None, message: OutboxItem | None) -> None:
        """End a running run as `state`, make that the job's last status, and queue `message` (when given)
        to the chat: one transaction."""
        now = time.time()

        async def record(db: Connection) -> None:
            outbox_id = await insert_outbox(db, message, now) if message else None
            await db.execute("UPDATE cron_runs SET state = ?, finished_at = ?, output = ?, error = ?, outbox_id = ?"
                             " WHERE id = ? AND state = 'running'", state, now, output, error, outbox_id, run_id)
            await db.execute("UPDATE cron_jobs SET last_status = ?, last_error = ?, last_run_at = ? WHERE id = ?",
                             state, error, scheduled_at, job_id)

        await self.db.write(record)

    async def prune_runs(self, keep: int, final: tuple[str, ...]) -> int:
        """Keep the newest `keep` ledger rows of each job, removed jobs too; delete older ones in a `final`
        state, each with its run's session (once ended), `PRUNE_BATCH` a write; return how many went."""
        states = self.db.dialect.listed(final)
        over = await self.fetch("SELECT job_id FROM cron_runs GROUP BY job_id HAVING count(*) > ?", keep)
        pruned = 0
        for job_id in (r["job_id"] for r in over):
            edge = await self.fetchrow(  # the oldest row kept
                "SELECT scheduled_at, id FROM cron_runs WHERE job_id = ? ORDER BY scheduled_at DESC, id DESC"
                " LIMIT 1 OFFSET ?", job_id, keep - 1)
            if edge is None:
                continue

            async def batch(db: Connection) -> int:
                rows = await db.fetch(
                    "SELECT id FROM cron_runs WHERE job_id = ? AND (scheduled_at < ? OR (scheduled_at = ? AND id < ?))"
                    f" AND state {db.dialect.IN_LIST} LIMIT ?",
                    job_id, edge["scheduled_at"], edge["scheduled_at"], edge["id"], states, PRUNE_BATCH)
                ids = [r["id"] for r in rows]
                keys = db.dialect.listed([run_session_key(job_id, i) for i in ids])
                await forget_sessions(db, [r["id"] for r in await db.fetch(
                    f"SELECT id FROM sessions WHERE key {db.dialect.IN_LIST}", keys)])
                await db.execute(f"DELETE FROM cron_runs WHERE id {db.dialect.IN_LIST}", db.dialect.listed(ids))
                return len(ids)

            pruned += await self.in_batches(batch)
        return pruned

    async def runs(self, job_id: int | None = None, limit: int = 20) -> list[dict[str, Any]]:
        """The newest ledger rows (of one job, when given), newest first: each with its job's `name`, and
        the `platform_message_ids` and `delivery` state of the message it sent."""
        where, args = ("WHERE r.job_id = ?", (job_id, limit)) if job_id is not None else ("", (limit,))
        rows = await self.fetch(
            "SELECT r.*, j.name, o.platform_message_ids, o.state AS delivery FROM cron_runs r"
            " LEFT JOIN cron_jobs j ON j.id = r.job_id LEFT JOIN outbox o ON o.id = r.outbox_id"
            f" {where} ORDER BY r.scheduled_at DESC, r.id DESC LIMIT ?", *args)
        return [dict(r) for r in rows]
