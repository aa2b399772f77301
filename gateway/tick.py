"""The housekeeping tick: one APScheduler `AsyncIOScheduler` on the gateway's loop.

Every `gateway.tick_seconds` each hook (claim cron work, expire approvals and pairing codes,
prune old rows, the curator, …) is started as a task of its own, so a slow hook — the curator's
LLM pass — delays no other; a hook still running from an earlier tick is not started twice.
Others (the cron timers, the instance heartbeat) add their own jobs to `aps`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from platforms.loops import finish_or_cancel

if TYPE_CHECKING:  # APScheduler is imported when the tick starts: after the platforms are up
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

log = logging.getLogger(__name__)
logging.getLogger("apscheduler").setLevel(logging.WARNING)  # it logs every run at INFO

Hook = Callable[[], Awaitable[Any]]
INTERVAL_JOB = {"coalesce": True, "max_instances": 1, "misfire_grace_time": None}


class Tick:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.hooks: list[tuple[str, Hook]] = []
        self.aps: AsyncIOScheduler | None = None
        self._running: dict[str, asyncio.Task[None]] = {}
        self._stops: list[Callable[[float], Awaitable[None]]] = []
        self._jobs: list[tuple[float, Hook, str]] = []  # (`every` before the start: added when it starts)
        self.count = 0

    def stops_with(self, stop: Callable[[float], Awaitable[None]]) -> None:
        """`stop(timeout)` at the tick's stop: work the hooks started that outlives them (the board's runs)."""
        self._stops.append(stop)

    def add_hook(self, name: str, hook: Hook) -> None:
        """Run `hook` on every tick; its errors are logged, never raised."""
        self.hooks.append((name, hook))

    def every(self, seconds: float, job: Hook, name: str) -> None:
        """A job of its own on the same scheduler (not a hook: it never waits behind one); asked before the
        tick starts, it is added when it starts."""
        if self.aps is None:
            self._jobs.append((seconds, job, name))
            return
        from apscheduler.triggers.interval import IntervalTrigger

        self.aps.add_job(job, IntervalTrigger(seconds=seconds), id=name, **INTERVAL_JOB)

    async def start(self) -> None:
        if self.aps is not None:
            return
        from apscheduler.schedulers.asyncio import AsyncIOScheduler
        from apscheduler.triggers.interval import IntervalTrigger

        self.aps = AsyncIOScheduler(timezone="UTC")
        self.aps.start()
        self.aps.add_job(self.run_hooks, IntervalTrigger(seconds=self.seconds), id="tick", **INTERVAL_JOB)
        for seconds, job, name in self._jobs:
            self.every(seconds, job, name)

    async def stop(self, timeout: float) -> None:
        """Stop firing; let running hooks finish up to `timeout`, then cancel them."""
        if self.aps is None:
            return
        self.aps.shutdown(wait=False)
        self.aps = None
        for stop in self._stops:
            await stop(timeout)
        await finish_or_cancel(self._running.values(), timeout)

    async def run_hooks(self) -> None:
        self.count += 1
        for name, hook in self.hooks:
            earlier = self._running.get(name)
            if earlier is not None and not earlier.done():
                log.debug("tick hook %s is still running; not started again", name)
                continue
            self._running[name] = asyncio.create_task(self._guarded(name, hook), name=f"tick:{name}")

    async def wait_idle(self) -> None:
        """Until the hooks started so far have finished (tests and benchmarks use it)."""
        await asyncio.gather(*self._running.values(), return_exceptions=True)

    @staticmethod
    async def _guarded(name: str, hook: Hook) -> None:
        try:
            await hook()
        except Exception:
            log.exception("tick hook %s failed", name)
