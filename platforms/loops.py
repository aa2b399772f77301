"""Long-lived loops that cannot die silently or spin, and background tasks ended at shutdown
(the asyncio helpers of the whole daemon live here).

`supervise` runs a loop body; if it raises, the error is logged (the log handler redacts it),
reported through `on_down`, and the body starts again after a pause that doubles from
`first_pause` up to `max_pause` (and starts over once a run lasted `settled_after`). A body that
returns has finished on purpose (e.g. it reported a fatal error) and is not restarted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Iterable

log = logging.getLogger(__name__)


async def supervise(name: str, body: Callable[[], Awaitable[None]], *,
                    on_down: Callable[[str], Any] | None = None, first_pause: float = 1.0,
                    max_pause: float = 60.0, settled_after: float = 60.0) -> None:
    pause = first_pause
    while True:
        started = time.monotonic()
        try:
            await body()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if time.monotonic() - started >= settled_after:
                pause = first_pause
            log.exception("%s stopped unexpectedly; starting it again in %.1fs", name, pause)
            if on_down is not None:
                on_down(f"{type(exc).__name__}: {exc}"[:300])
        await asyncio.sleep(pause)
        pause = min(pause * 2, max_pause)


def start_supervised(name: str, body: Callable[[], Awaitable[None]], **options: Any) -> asyncio.Task[None]:
    """`supervise` as a named task."""
    return asyncio.create_task(supervise(name, body, **options), name=name)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for `event` up to `timeout` seconds; True when it was set.

    Loops use this rather than `asyncio.wait_for(event.wait(), …)`: on Python 3.11 `wait_for`
    swallows a cancellation that arrives just as the event is set, and a loop being stopped then
    sleeps on into its next wait.
    """
    try:
        async with asyncio.timeout(max(timeout, 0.0)):
            await event.wait()
        return True
    except TimeoutError:
        return event.is_set()


async def finish_or_cancel(tasks: Iterable[asyncio.Task[Any]], timeout: float, *,
                           before_cancel: Callable[[asyncio.Task[Any]], None] | None = None) -> None:
    """Let `tasks` finish for up to `timeout` seconds, cancel what is left (`before_cancel` hears of
    each first), and wait for all of them to end."""
    running = [t for t in tasks if not t.done()]
    if not running:
        return
    _, pending = await asyncio.wait(running, timeout=timeout)
    for task in pending:
        if before_cancel is not None:
            before_cancel(task)
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)


class Background:
    """The background tasks of a running gateway (a button press, a judge's call, a trajectory export):
    each is kept until it ends (asyncio holds tasks only weakly), its failure is logged, not lost, and
    `wait` lets those still running finish at shutdown."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Awaitable[Any], *, name: str | None = None) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        if name:
            task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

    async def wait(self, timeout: float) -> None:
        """Up to `timeout` seconds for the tasks still running (those that do not end are left to the
        loop's own shutdown)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
