"""The run ledger: one row per (job, scheduled time), claimed before the run starts.

A slot is claimed in the transaction that moves the job's next run on, so it runs at most once
across restarts and with several gateway processes on one database (how: `gateway.storage.cron`);
the ledger decides whether the slot runs, is skipped or was missed. Each process registers itself
and beats a heartbeat from the tick; a `running` row whose process is gone is marked `interrupted`
— it is never run again on a guess.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any

from gateway.cron.jobs import Job, utc
from gateway.storage.cron import CronStore
from gateway.storage.cron import SlotRecord
from gateway.storage.outbox import OutboxItem

MAX_CATCH_UP = 1000  # slots walked when working out what a long outage missed
MAX_MISSED_ROWS = 20  # ledger rows written for missed slots; older ones are counted in a note
FINAL_STATES = ("ok", "silent", "error", "skipped", "missed", "interrupted")


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


@dataclass(frozen=True, slots=True)
class _Decision(SlotRecord):
    """What `RunLedger.claim_slot` records, with the job it read and how many earlier slots were not run."""

    job: Job
    missed: int


_LIVE_HERE: set[str] = set()  # instances registered by this process and not yet stopped


def machine() -> str:
    """This process's machine as instance ids name it: its host name and its pid namespace. Two containers with one
    host name (host networking, a `hostname:` set alike) are two machines: a pid in one says nothing of the other.
    (A container started again has a namespace of its own: its earlier life counts as another machine's, found
    gone by its leases' end rather than by its pid.)"""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = 0
    return f"{socket.gethostname()}~{namespace:x}"


def new_instance_id() -> str:
    return f"{machine()}:{os.getpid()}:{secrets.token_hex(4)}"


def instance_gone(instance_id: str, me: str) -> bool:
    """Whether the gateway process an instance id (`new_instance_id`: machine:pid:token) names has certainly
    exited: it ran on this machine (`machine`) and its pid is gone (or is this process's, and not that instance)."""
    parts = instance_id.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit() or parts[0] != machine() or instance_id == me:
        return False
    pid = int(parts[1])
    if pid == os.getpid():  # this process, or an earlier life of its pid
        return instance_id not in _LIVE_HERE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class RunLedger:
    def __init__(self, cron: CronStore, instance_id: str) -> None:
        self.cron = cron
        self.instance_id = instance_id

    # -- instances ------------------------------------------------------------------------

    async def register(self) -> None:
        _LIVE_HERE.add(self.instance_id)
        await self.heartbeat()

    async def heartbeat(self) -> None:
        """Say this process is alive; an upsert, so a row a sibling dropped comes back."""
        await self.cron.heartbeat(self.instance_id, socket.gethostname(), os.getpid())

    async def unregister(self) -> None:
        _LIVE_HERE.discard(self.instance_id)
        await self.cron.unregister(self.instance_id)

    async def live_instances(self, stale_after: float) -> list[dict[str, Any]]:
        """Gateway processes that beat their heartbeat within `stale_after` and have not exited."""
        rows = await self.cron.instances_seen_since(time.time() - stale_after)
        return [r for r in rows if not instance_gone(r["id"], self.instance_id)]

    async def interrupt_orphans(self, stale_after: float) -> list[tuple[Job | None, int]]:
        """Mark runs whose process is gone as interrupted; return (job, run id) for each."""
        rows = await self.cron.running_runs()
        now = time.time()
        dead = [(r["job_id"], r["id"]) for r in rows if r["claimed_by"] != self.instance_id and (
            r["seen_at"] is None or r["seen_at"] < now - stale_after
            or instance_gone(r["claimed_by"] or "", self.instance_id))]

        def gone(i: dict[str, Any]) -> bool:
            """Whether a registered process has stopped (its row is forgotten)."""
            return i["id"] != self.instance_id and (
                i["seen_at"] < now - stale_after or instance_gone(i["id"], self.instance_id))

        found = await self.cron.interrupt_runs(dead, "the gateway process stopped during the run", now, gone)
        jobs = []
        for job_id, run_id in found:
            row = await self.cron.job(job_id)
            jobs.append((Job.from_row(row) if row else None, run_id))
        return jobs

    # -- claiming -------------------------------------------------------------------------

    async def claim_slot(self, job_id: int, slot: float, now: float, *, on_time: float, grace: float) -> SlotOutcome:
        """Take the job's slot `slot` if it is still its next run; decide run, skip or missed.

        A slot less than `on_time` seconds old runs. An older one (the gateway was down) runs
        when the job's policy is `run_once` and it is within `grace`; otherwise it is recorded
        as skipped (policy `skip`) or missed. Several missed slots run at most once: the newest.
        """
        def decide(row: dict[str, Any]) -> _Decision:
            job = Job.from_row(row)
            schedule = job.parsed()
            slots = [slot]
            upcoming = schedule.next_after(utc(slot))
            while upcoming is not None and upcoming.timestamp() <= now and len(slots) < MAX_CATCH_UP:
                slots.append(upcoming.timestamp())
                upcoming = schedule.next_after(upcoming)
            if upcoming is not None and upcoming.timestamp() <= now:  # an outage longer than MAX_CATCH_UP slots
                upcoming = schedule.next_after(utc(now))
            latest = slots[-1]
            late_by = now - latest
            runs = late_by <= on_time or (job.missed_policy == "run_once" and late_by <= grace)
            not_run = "skipped" if job.missed_policy == "skip" else "missed"
            older = slots[:-1]
            note = (f"{len(older) - MAX_MISSED_ROWS} earlier slot(s) also not run" if len(older) > MAX_MISSED_ROWS
                    else None)
            return _Decision(
                scheduled_at=latest, runs=runs, not_run=not_run,
                error=f"{late_by:.0f}s late; policy {job.missed_policy}",
                earlier=[(s, note if i == 0 and note else "the gateway was not running at that time")
                         for i, s in enumerate(older[-MAX_MISSED_ROWS:])],
                next_run_at=upcoming.timestamp() if upcoming else None,
                last_status=job.last_status if runs else not_run, last_run_at=job.last_run_at if runs else latest,
                job=job, missed=len(older))

        taken = await self.cron.claim_slot(job_id, slot, now, self.instance_id, decide)
        if taken is None:
            return SlotOutcome(None, None, "taken")
        decided, run_id = taken
        if not decided.runs or run_id is None:
            return SlotOutcome(None, decided.next_run_at, decided.not_run if run_id else "taken")
        claim = Claim(run_id, decided.job, decided.scheduled_at, now - decided.scheduled_at, missed=decided.missed)
        return SlotOutcome(claim, decided.next_run_at, "running")

    async def claim_queued(self) -> list[Claim]:
        rows = await self.cron.queued_runs()
        claims = []
        now = time.time()
        for row in rows:
            run_id = row["run_id"]
            if await self.cron.start_queued(run_id, self.instance_id, now):
                claims.append(Claim(run_id, Job.from_row(row), row["scheduled_at"],
                                    now - row["scheduled_at"], manual=True))
        return claims

    # -- finishing ------------------------------------------------------------------------

    async def finish(self, claim: Claim, state: str, *, output: str | None = None, error: str | None = None,
                     message: OutboxItem | None = None) -> None:
        """End a run and queue its message to the chat, in one transaction."""
        assert state in FINAL_STATES
        await self.cron.finish_run(claim.run_id, claim.job.id, claim.scheduled_at, state, output=output,
                                         error=error, message=message)

    # -- pruning --------------------------------------------------------------------------

    async def prune(self, keep: int) -> int:
        """Keep the newest `keep` (at least one) ledger rows of each job, removed jobs too; return how many
        older ones went, each with its run's session (`cron:<job>:<run>`, once ended).

        Only final rows go: a queued or running one stays whatever its age, and so does each job's
        newest. A forgotten slot cannot run again: it lies behind the job's `next_run_at`, which a claim
        compares and moves on; the slots a catch-up records are all newer than any claimed before.
        The outbox rows the pruned runs delivered are then pruned with the other sent messages.
        """
        return await self.cron.prune_runs(max(keep, 1), FINAL_STATES)
