"""When scheduled jobs run: exact-time timers on the tick's APScheduler, and the instance heartbeat.

* On every **tick** (a hook of `gateway.tick.Tick`): mark runs of dead processes interrupted,
  take "run now" requests, and arm the timers of jobs due within the next two ticks.
* One **timer** per job that is due soon: a `DateTrigger` at the job's exact next run time, so a
  job fires on time rather than on the next tick. A timer only asks the ledger to claim the
  slot; the ledger decides (run, skip, missed, or someone else took it).
* The **heartbeat** is a job of its own (an upsert), so a long hook cannot make a sibling
  gateway think this one is gone.

Changes made in this process (the `cron` tool, `/cron`) call `changed()`; changes made by
another process on the same database (the `chatgate cron` CLI) are noticed within a second
through the database's data version (`data_version`), which another process's commit changes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from gateway.cron.jobs import utc
from gateway.cron.ledger import Claim, RunLedger
from gateway.storage.cron import CronStore
from platforms.loops import finish_or_cancel
from gateway.tick import Tick

log = logging.getLogger(__name__)

RunJob = Callable[[Claim], Awaitable[None]]
WATCH_SECONDS = 1.0
ARM_BATCH = 100  # timers armed between two yields to the event loop


class CronTimers:
    """Made first (a job changed or paused wakes them), then given what runs a due job (`serve`) before
    `start`."""

    def __init__(self, tick: Tick, cron: CronStore, ledger: RunLedger, *, grace_seconds: float,
                 max_concurrent: int = 4) -> None:
        self.tick = tick
        self.cron = cron  # which jobs are due (the ledger claims them)
        self.ledger = ledger
        self._run: RunJob | None = None
        self._on_interrupted: Callable[[list[Any]], Awaitable[None]] | None = None
        self.grace = grace_seconds
        self.horizon = 2 * tick.seconds  # timers are armed for jobs due this soon
        self.on_time = max(tick.seconds, 1.0)  # a slot younger than this is on time, not missed
        self.stale_after = 3 * tick.seconds + 5.0  # a process silent this long is gone
        self._slots = asyncio.Semaphore(max_concurrent)
        self._started = False
        self._armed: dict[int, float] = {}  # job id → slot its timer is set for
        self._running: set[asyncio.Task[None]] = set()
        self._reload: asyncio.Task[None] | None = None
        self._data_version: int | None = None
        tick.add_hook("cron", self.on_tick)

    @property
    def busy(self) -> bool:
        return any(not t.done() for t in self._running)

    @property
    def _aps(self) -> Any:
        return self.tick.aps if self._started else None

    # -- lifecycle ------------------------------------------------------------------------

    def serve(self, run: RunJob, on_interrupted: Callable[[list[Any]], Awaitable[None]] | None = None) -> None:
        self._run, self._on_interrupted = run, on_interrupted

    async def start(self) -> None:
        """Register this instance; the tick must be started (its first round arms what is due)."""
        if self._started:
            return
        assert self._run is not None, "CronTimers.serve first"
        await self.ledger.register()
        self._started = True
        self.tick.every(self.tick.seconds, self.ledger.heartbeat, "heartbeat")
        self.tick.every(WATCH_SECONDS, self._watch, "cron-watch")
        self._data_version = await self.cron.data_version()  # later commits by others trigger a reload

    async def stop(self, timeout: float) -> None:
        """Stop arming; let running jobs finish up to `timeout`, then interrupt them."""
        if not self._started:
            return
        for job_id in list(self._armed):
            self._disarm(job_id)
        self._started = False
        if self._reload is not None:
            self._reload.cancel()
        await finish_or_cancel(self._running, timeout)
        await self.ledger.unregister()

    # -- the tick -------------------------------------------------------------------------

    async def on_tick(self) -> None:
        interrupted = await self.ledger.interrupt_orphans(self.stale_after)
        if interrupted and self._on_interrupted is not None:
            await self._on_interrupted(interrupted)
        await self.reload()

    async def reload(self) -> None:
        """Take "run now" requests and (re)arm timers from the database."""
        if self._aps is None:
            return
        for claim in await self.ledger.claim_queued():
            self._start(claim)
        due = await self.cron.due_before(time.time() + self.horizon)
        wanted = dict(due)
        for job_id in [j for j in self._armed if j not in wanted]:
            self._disarm(job_id)
        for n, (job_id, slot) in enumerate(due, 1):
            self._arm(job_id, slot)
            if n % ARM_BATCH == 0:
                await asyncio.sleep(0)  # an APScheduler job costs ~0.1 ms to add: let the loop breathe

    def changed(self) -> None:
        """Jobs were changed in this process: reload soon (coalesced)."""
        if self._aps is None or (self._reload is not None and not self._reload.done()):
            return
        self._reload = asyncio.create_task(self.reload(), name="cron-reload")

    async def _watch(self) -> None:
        """Notice changes another process (the CLI) committed to the database."""
        version = await self.cron.data_version()
        if self._data_version is not None and version != self._data_version:
            await self.reload()
        self._data_version = version

    # -- timers and runs ------------------------------------------------------------------

    def _arm(self, job_id: int, slot: float) -> None:
        if self._aps is None or self._armed.get(job_id) == slot:
            return
        self._armed[job_id] = slot
        from apscheduler.triggers.date import DateTrigger  # (the tick has imported APScheduler by now)

        self._aps.add_job(self._fire, DateTrigger(run_date=utc(slot)), args=(job_id, slot), id=f"job:{job_id}",
                          replace_existing=True, misfire_grace_time=None)

    def _disarm(self, job_id: int) -> None:
        self._armed.pop(job_id, None)
        if self._aps is not None and self._aps.get_job(f"job:{job_id}") is not None:
            self._aps.remove_job(f"job:{job_id}")

    async def _fire(self, job_id: int, slot: float) -> None:
        if self._armed.get(job_id) == slot:
            del self._armed[job_id]
        outcome = await self.ledger.claim_slot(job_id, slot, time.time(), on_time=self.on_time, grace=self.grace)
        if outcome.claim is not None:
            self._start(outcome.claim)
        elif outcome.recorded in ("skipped", "missed"):
            log.info("job %s: slot %s %s", job_id, utc(slot).isoformat(), outcome.recorded)
        if outcome.next_run_at is not None and outcome.next_run_at <= time.time() + self.horizon:
            self._arm(job_id, outcome.next_run_at)

    def _start(self, claim: Claim) -> None:
        task = asyncio.create_task(self._bounded(claim), name=f"cron-run:{claim.run_id}")
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _bounded(self, claim: Claim) -> None:
        async with self._slots:
            try:
                await self._run(claim)
            except Exception:
                log.exception("cron run %s of job %s failed", claim.run_id, claim.job.id)
