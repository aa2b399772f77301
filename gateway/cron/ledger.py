"""The run ledger: one row per (job, scheduled time), claimed before the run starts.

A slot is claimed in one transaction that also moves the job's `next_run_at` on, guarded by
compare-and-set on the old value and by the ledger's UNIQUE key, so a slot runs at most once
across restarts and with several gateway processes on one database. Each process registers
itself in `gateway_instances` and beats a heartbeat from the tick; a `running` row whose
process is gone is marked `interrupted` — it is never run again on a guess.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any

import aiosqlite

from gateway.cron.jobs import Job, utc
from gateway.storage import Store
from gateway.storage.database import first_row
from gateway.storage.outbox import OutboxItem, insert_outbox
from gateway.storage.sessions import forget_sessions

MAX_CATCH_UP = 1000  # slots walked when working out what a long outage missed
MAX_MISSED_ROWS = 20  # ledger rows written for missed slots; older ones are counted in a note
FINAL_STATES = ("ok", "silent", "error", "skipped", "missed", "interrupted")
PRUNE_BATCH = 200  # ledger rows (and their sessions) per write when pruning


@dataclass(frozen=True, slots=True)
class Claim:
    """A run this process owns: it must finish it (or it ends as interrupted)."""

    run_id: int
    job: Job
    scheduled_at: float
    late_by: float  # seconds after the slot when it was claimed
    manual: bool = False
    missed: int = 0  # earlier slots that were not run


@dataclass(frozen=True, slots=True)
class SlotOutcome:
    claim: Claim | None  # None: nothing to run (lost the race, skipped or missed)
    next_run_at: float | None
    recorded: str  # what the ledger now says about the slot: running | skipped | missed | taken


_LIVE_HERE: set[str] = set()  # instances registered by this process and not yet stopped


def new_instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _process_gone(host: str, pid: int, instance_id: str, me: str) -> bool:
    """Whether a gateway process on this host has certainly exited."""
    if host != socket.gethostname() or instance_id == me:
        return False
    if pid == os.getpid():  # this process, or an earlier life of its pid (a container's pid 1)
        return instance_id not in _LIVE_HERE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class RunLedger:
    def __init__(self, store: Store, instance_id: str) -> None:
        self.store = store
        self.instance_id = instance_id

    # -- instances ------------------------------------------------------------------------

    async def register(self) -> None:
        _LIVE_HERE.add(self.instance_id)
        await self.heartbeat()

    async def heartbeat(self) -> None:
        """Say this process is alive; an upsert, so a row a sibling dropped comes back."""
        now = time.time()
        values = (self.instance_id, socket.gethostname(), os.getpid(), now, now)
        await self.store.execute("INSERT INTO gateway_instances VALUES (?, ?, ?, ?, ?)"
                                 " ON CONFLICT(id) DO UPDATE SET seen_at = excluded.seen_at", values)

    async def unregister(self) -> None:
        _LIVE_HERE.discard(self.instance_id)
        await self.store.execute("DELETE FROM gateway_instances WHERE id = ?", (self.instance_id,))

    async def live_instances(self, stale_after: float) -> list[dict[str, Any]]:
        """Gateway processes that beat their heartbeat within `stale_after` and have not exited."""
        rows = await self.store.fetch_all("SELECT * FROM gateway_instances WHERE seen_at >= ?",
                                          (time.time() - stale_after,))
        return [dict(r) for r in rows if not _process_gone(r["host"], r["pid"], r["id"], self.instance_id)]

    async def interrupt_orphans(self, stale_after: float) -> list[tuple[Job | None, int]]:
        """Mark runs whose process is gone as interrupted; return (job, run id) for each."""
        rows = await self.store.fetch_all(
            "SELECT r.id, r.job_id, r.claimed_by, i.host, i.pid, i.seen_at FROM cron_runs r"
            " LEFT JOIN gateway_instances i ON i.id = r.claimed_by WHERE r.state = 'running'")
        now = time.time()
        dead = [r for r in rows if r["claimed_by"] != self.instance_id and (
            r["seen_at"] is None or r["seen_at"] < now - stale_after
            or _process_gone(r["host"], r["pid"], r["claimed_by"], self.instance_id))]

        async def interrupt(db: aiosqlite.Connection) -> list[tuple[int, int]]:
            """(job id, run id) of the runs it marked interrupted."""
            found: list[tuple[int, int]] = []
            for r in dead:
                cur = await db.execute(
                    "UPDATE cron_runs SET state = 'interrupted', finished_at = ?, error = ? WHERE id = ?"
                    " AND state = 'running'", (now, "the gateway process stopped during the run", r["id"]))
                if cur.rowcount:
                    await db.execute("UPDATE cron_jobs SET last_status = 'interrupted', last_error = ?"
                                     " WHERE id = ?", ("the gateway process stopped during the run", r["job_id"]))
                    found.append((r["job_id"], r["id"]))
            gone = [i for i in await db.execute_fetchall("SELECT * FROM gateway_instances")
                    if i["id"] != self.instance_id and (
                        i["seen_at"] < now - stale_after
                        or _process_gone(i["host"], i["pid"], i["id"], self.instance_id))]
            await db.executemany("DELETE FROM gateway_instances WHERE id = ?", [(i["id"],) for i in gone])
            return found

        found = await self.store.write(interrupt)
        jobs = []
        for job_id, run_id in found:
            row = await self.store.fetch_one("SELECT * FROM cron_jobs WHERE id = ?", (job_id,))
            jobs.append((Job.from_row(row) if row else None, run_id))
        return jobs

    # -- claiming -------------------------------------------------------------------------

    async def claim_slot(self, job_id: int, slot: float, now: float, *, on_time: float, grace: float) -> SlotOutcome:
        """Take the job's slot `slot` if it is still its next run; decide run, skip or missed.

        A slot less than `on_time` seconds old runs. An older one (the gateway was down) runs
        when the job's policy is `run_once` and it is within `grace`; otherwise it is recorded
        as skipped (policy `skip`) or missed. Several missed slots run at most once: the newest.
        """
        async def take(db: aiosqlite.Connection) -> SlotOutcome:
            row = await first_row(db, "SELECT * FROM cron_jobs WHERE id = ? AND enabled = 1 AND next_run_at = ?",
                                  (job_id, slot))
            if row is None:
                return SlotOutcome(None, None, "taken")
            job = Job.from_row(row)
            schedule = job.parsed()
            slots = [slot]
            upcoming = schedule.next_after(utc(slot))
            while upcoming is not None and upcoming.timestamp() <= now and len(slots) < MAX_CATCH_UP:
                slots.append(upcoming.timestamp())
                upcoming = schedule.next_after(upcoming)
            if upcoming is not None and upcoming.timestamp() <= now:  # an outage longer than MAX_CATCH_UP slots
                upcoming = schedule.next_after(utc(now))
            next_run = upcoming.timestamp() if upcoming else None
            latest = slots[-1]
            late_by = now - latest
            runs = late_by <= on_time or (job.missed_policy == "run_once" and late_by <= grace)
            not_run = "skipped" if job.missed_policy == "skip" else "missed"
            older = slots[:-1]
            note = (f"{len(older) - MAX_MISSED_ROWS} earlier slot(s) also not run" if len(older) > MAX_MISSED_ROWS
                    else None)
            await db.executemany(
                "INSERT OR IGNORE INTO cron_runs (job_id, scheduled_at, state, finished_at, error)"
                " VALUES (?, ?, ?, ?, ?)",
                [(job_id, s, not_run, now, note if i == 0 and note else "the gateway was not running at that time")
                 for i, s in enumerate(older[-MAX_MISSED_ROWS:])])
            state = "running" if runs else not_run
            cur = await db.execute(
                "INSERT OR IGNORE INTO cron_runs (job_id, scheduled_at, state, claimed_by, started_at, finished_at,"
                " error) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job_id, latest, state, self.instance_id if runs else None, now if runs else None,
                 None if runs else now, None if runs else f"{late_by:.0f}s late; policy {job.missed_policy}"))
            run_id = int(cur.lastrowid) if cur.rowcount else None
            await db.execute(
                "UPDATE cron_jobs SET next_run_at = ?, updated_at = ?, last_status = ?, last_run_at = ? WHERE id = ?",
                (next_run, now, job.last_status if runs else not_run, job.last_run_at if runs else latest, job_id))
            if not runs or run_id is None:
                return SlotOutcome(None, next_run, not_run if run_id else "taken")
            claim = Claim(run_id, job, latest, late_by, missed=len(older))
            return SlotOutcome(claim, next_run, "running")

        return await self.store.write(take)

    async def request_run(self, job_id: int) -> int:
        """Queue a run now ("run now"); the gateway that sees it first claims it."""
        now = time.time()
        cursor = await self.store.write(lambda db: db.execute(
            "INSERT INTO cron_runs (job_id, scheduled_at, manual, state) VALUES (?, ?, 1, 'queued')",
            (job_id, now)), single=True)
        return int(cursor.lastrowid)

    async def claim_queued(self) -> list[Claim]:
        rows = await self.store.fetch_all(
            "SELECT r.id AS run_id, r.scheduled_at, j.* FROM cron_runs r JOIN cron_jobs j ON j.id = r.job_id"
            " WHERE r.state = 'queued' ORDER BY r.id")
        claims = []
        now = time.time()
        for row in rows:
            run_id = row["run_id"]
            started = await self.store.execute(
                "UPDATE cron_runs SET state = 'running', claimed_by = ?, started_at = ?"
                " WHERE id = ? AND state = 'queued'", (self.instance_id, now, run_id))
            if started:
                claims.append(Claim(run_id, Job.from_row(row), row["scheduled_at"],
                                    now - row["scheduled_at"], manual=True))
        return claims

    # -- finishing ------------------------------------------------------------------------

    async def finish(self, claim: Claim, state: str, *, output: str | None = None, error: str | None = None,
                     message: OutboxItem | None = None) -> None:
        """End a run and queue its message to the chat, in one transaction."""
        assert state in FINAL_STATES
        now = time.time()

        async def record(db: aiosqlite.Connection) -> None:
            outbox_id = await insert_outbox(db, message, now) if message else None
            await db.execute("UPDATE cron_runs SET state = ?, finished_at = ?, output = ?, error = ?, outbox_id = ?"
                       " WHERE id = ? AND state = 'running'",
                       (state, now, output, error, outbox_id, claim.run_id))
            await db.execute("UPDATE cron_jobs SET last_status = ?, last_error = ?, last_run_at = ? WHERE id = ?",
                       (state, error, claim.scheduled_at, claim.job.id))

        await self.store.write(record)

    # -- pruning --------------------------------------------------------------------------

    async def prune(self, keep: int) -> int:
        """Keep the newest `keep` (at least one) ledger rows of each job, removed jobs too; return how many
        older ones went, each with its run's session (`cron:<job>:<run>`, once ended).

        Only final rows go: a queued or running one stays whatever its age, and so does each job's
        newest. A forgotten slot cannot run again: it lies behind the job's `next_run_at`, which a claim
        compares and moves on; the slots a catch-up records are all newer than any claimed before.
        The outbox rows the pruned runs delivered are then pruned with the other sent messages.
        """
        keep = max(keep, 1)
        final = json.dumps(FINAL_STATES)
        over = await self.store.fetch_all("SELECT job_id FROM cron_runs GROUP BY job_id HAVING count(*) > ?", (keep,))
        pruned = 0
        for job_id in (r["job_id"] for r in over):
            edge = await self.store.fetch_one(  # the oldest row kept
                "SELECT scheduled_at, id FROM cron_runs WHERE job_id = ? ORDER BY scheduled_at DESC, id DESC"
                " LIMIT 1 OFFSET ?", (job_id, keep - 1))
            if edge is None:
                continue

            async def batch(db: aiosqlite.Connection) -> int:
                rows = await db.execute_fetchall(
                    "SELECT id FROM cron_runs WHERE job_id = ? AND (scheduled_at < ? OR (scheduled_at = ? AND id < ?))"
                    " AND state IN (SELECT value FROM json_each(?)) LIMIT ?",
                    (job_id, edge["scheduled_at"], edge["scheduled_at"], edge["id"], final, PRUNE_BATCH))
                ids = [r["id"] for r in rows]
                keys = json.dumps([f"cron:{job_id}:{i}" for i in ids])
                await forget_sessions(db, [r[0] for r in await db.execute_fetchall(
                    "SELECT id FROM sessions WHERE key IN (SELECT value FROM json_each(?))", (keys,))])
                await db.execute("DELETE FROM cron_runs WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(ids),))
                return len(ids)

            while n := await self.store.write(batch):
                pruned += n
        return pruned

    async def runs(self, job_id: int | None = None, limit: int = 20) -> list[dict[str, Any]]:
        """The newest ledger rows (with the delivered message ids), newest first."""
        where, args = ("WHERE r.job_id = ?", (job_id, limit)) if job_id is not None else ("", (limit,))
        rows = await self.store.fetch_all(
            "SELECT r.*, j.name, o.platform_message_ids, o.state AS delivery FROM cron_runs r"
            " LEFT JOIN cron_jobs j ON j.id = r.job_id LEFT JOIN outbox o ON o.id = r.outbox_id"
            f" {where} ORDER BY r.scheduled_at DESC, r.id DESC LIMIT ?", args)
        return [dict(r) for r in rows]
