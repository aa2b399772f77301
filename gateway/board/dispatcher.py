"""The dispatcher: claims ready tasks and runs them; finds runs that were lost.

It looks at the board on every tick (the runner runs the tick's hooks once at start: lost runs are reclaimed
and ready tasks started at once), every `WATCH_SECONDS` when the board's version changed (a `chatgate board`
command, another instance) — and for lost runs every half `board.stale_seconds` — and whenever this process
changed the board (`changed`). A look claims what the
board allows (`board.max_running` on every instance together: gateway.storage.board) and starts each as a run of
its own (`runs.TaskRuns`); a run that ends makes room for the next look. A running task whose run is gone — its
instance dead (its life lease ended; on SQLite, any instance but this one), or no heartbeat for
`board.stale_seconds` — is made ready again by whoever sees it first. At stop the runs still going are stopped;
each frees its task for the next start.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from gateway.board.runs import TaskRuns
from gateway.cron.ledger import instance_gone
from gateway.storage.board import BoardStore, Task
from gateway.tick import Tick

log = logging.getLogger(__name__)

WATCH_SECONDS = 1.0  # how soon another process's change (the CLI's) is seen


class Dispatcher:
    def __init__(self, store: BoardStore, runs: TaskRuns, tick: Tick, *, instance_id: str, max_running: int,
                 stale_seconds: float) -> None:
        self.store, self.runs, self.tick = store, runs, tick
        self.me, self.max_running, self.stale_seconds = instance_id, max_running, stale_seconds
        self._running: dict[int, asyncio.Task[None]] = {}
        self._version: tuple[float, int] | None = None
        self._look: asyncio.Task[None] | None = None
        self._reclaimed = 0.0  # (time.monotonic() of the watch's latest search for lost runs)
        self._stopped = False
        self._claiming = asyncio.Lock()

    @property
    def running(self) -> list[int]:
        """The tasks this instance runs now."""
        return sorted(self._running)

    def changed(self) -> None:
        """The board was changed in this process: look soon (looks coalesce)."""
        if self._stopped or self.tick.aps is None or (self._look is not None and not self._look.done()):
            return
        self._look = asyncio.create_task(self.look(), name="board-look")

    async def on_tick(self) -> None:
        """A tick hook: lost runs reclaimed, then a look."""
        await self.reclaim()
        await self.look()

    async def reclaim(self) -> list[Task]:
        """Make the tasks whose run is gone ready again (each by compare-and-set on the run it had): those of an
        instance on this machine whose process has exited (an earlier life of this one: at once, not when its
        lease or heartbeat runs out), and those the board says are lost."""
        running = [t for t in await self.store.list("running") if t.runner != self.me]
        exited = {t.id: t for t in running if t.runner and instance_gone(t.runner, self.me)}
        lost = [t for t in await self.store.lost_runs(self.me, time.time() - self.stale_seconds) if t.id not in exited]
        freed = []
        for task, why in [*((t, "its process exited") for t in exited.values()),
                          *((t, f"no heartbeat for {self.stale_seconds:g} s, or its instance is gone") for t in lost)]:
            released = await self.store.release(task.id, task.runner, kind="reclaimed",
                                                text=f"its run on {task.runner or 'an unknown instance'} was lost: {why}")
            if released is not None:
                log.warning("task %s: its run on %s was lost (%s); it is ready again", task.id, task.runner, why)
                freed.append(released)
        return freed

    async def look(self) -> None:
        """Claim what may run now and start it."""
        if self._stopped:
            return
        async with self._claiming:
            for task in await self.store.claim(self.me, self.max_running):
                log.info("task %s started (run %d): %s", task.id, task.attempts, task.title)
                run = asyncio.create_task(self.runs.run(task), name=f"task:{task.id}")
                self._running[task.id] = run
                run.add_done_callback(lambda done, task_id=task.id: self._ended(task_id, done))

    def _ended(self, task_id: int, run: asyncio.Task[Any]) -> None:
        if self._running.get(task_id) is run:  # (not a later run of the task, claimed while this one stopped)
            del self._running[task_id]
        if not run.cancelled() and run.exception() is not None:
            log.error("the run of task %s failed", task_id, exc_info=run.exception())
        self.changed()  # (a slot is free)

    async def watch(self) -> None:
        """Every `WATCH_SECONDS`: a look when the board changed; every half `stale_seconds`, lost runs too."""
        now = time.monotonic()
        if now - self._reclaimed >= self.stale_seconds / 2:
            self._reclaimed = now
            if await self.reclaim():
                await self.look()
        version = await self.store.version()
        if version != self._version:
            self._version = version
            await self.look()

    async def stop(self, timeout: float) -> None:
        """Stop starting runs; stop those going (each frees its task), waiting for them up to `timeout`."""
        self._stopped = True
        runs = list(self._running.values())
        for run in runs:
            run.cancel()
        if runs:
            await asyncio.wait(runs, timeout=timeout)
