"""Connecting the platforms, each on its own: one that cannot connect keeps no other, nor the web
chat, from serving.

Each adapter's start runs in a task of its own (`Connections.begin`). A try that fails for a reason
that may pass — no network yet at boot, DNS, a refused connection, a timeout, a 5xx or a 429 —
leaves the platform `down` with the reason and the settings to check (`/readyz`, `chatgate
status`), and is made again after 1 s, 2 s, 4 s … up to 5 minutes, each pause longer by a random
part of it (up to a quarter, at most 10 s) so that gateways restarted together do not knock at the
same instant. The log says so in one WARNING line, which shows again only at the 2nd, 4th, 8th …
try or when the reason changes, and in one INFO line once it is up. A refusal that trying again
cannot change (`PlatformRefused`: a revoked token, a missing intent or scope) is one ERROR line
(the adapter's `fail`), and the platform stays `failed` until the next start.

What a down platform's people sent before stays in the inbox and is answered; the answers wait
in the outbox (delivery leaves a platform that is not running alone) and go out once it is up.

A connection the platform allows once per bot (`Capabilities.single_connection`: Telegram's long poll,
Discord's gateway, Slack's Socket Mode) is made only while this instance holds the platform's lease in
the database (`gateway.leases`, given to `begin`): the others stand by (`standby`, ready for
`/readyz`: their part is to wait) and try again every few seconds. A holder that cannot renew its lease
stops the connection at once (a handover: no last call that would reach the new holder's); at stop, the
connection closes first and the lease is released after, so that a standby takes over at once and
never beside it. On SQLite, with one daemon per home, the lease is always free: taken at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Awaitable, Callable, Iterable

from gateway.ops import systemd
from gateway.leases import PlatformLeases
from platforms.base import PlatformAdapter, PlatformRefused, failure_text

log = logging.getLogger(__name__)

FIRST_PAUSE = 1.0  # seconds before the second try
MAX_PAUSE = 300.0  # the longest pause between two tries
JITTER = 0.25  # a pause grows by up to this part of it, at random …
JITTER_CAP = 10.0  # … and by at most this many seconds


class NothingToServe(RuntimeError):
    """Every platform refused chatgate for good: nothing can serve until the configuration changes."""


def pause_before(tries: int, first: float = FIRST_PAUSE, longest: float = MAX_PAUSE) -> float:
    """Seconds to wait after `tries` failed tries: doubling from `first` up to `longest`, plus jitter."""
    pause = min(first * 2 ** min(tries - 1, 32), longest)
    return pause + random.uniform(0.0, min(pause * JITTER, JITTER_CAP))


def worth_telling(tries: int) -> bool:
    """Whether the `tries`-th failure in a row is logged as a warning again (the 1st, 2nd, 4th, 8th …)."""
    return tries & (tries - 1) == 0


class Connections:
    """The platforms' connecting tasks, and what the gateway knows of each platform's health.

    `connected(adapter)` runs each time one is up; `ready_again(adapter)`, once serving (`serving`),
    each time one is ready again after a fault (what waited for it goes out). `failed` is set when
    every platform has refused for good (`failure` says why)."""

    def __init__(self, adapters: Iterable[PlatformAdapter], connected: Callable[[PlatformAdapter], Awaitable[None]],
                 *, ready_again: Callable[[PlatformAdapter], Any] = lambda adapter: None,
                 first_pause: float = FIRST_PAUSE, max_pause: float = MAX_PAUSE) -> None:
        self._adapters = list(adapters)
        self._connected, self._ready_again = connected, ready_again
        self._first_pause, self._max_pause = first_pause, max_pause
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._tried: dict[str, asyncio.Event] = {}  # set once a platform's first try has ended
        self.serving = False
        self.failed = asyncio.Event()
        self.failure: str | None = None
        self.leases: PlatformLeases | None = None  # (see `_while_held`)

    def adapter_failed(self, adapter: PlatformAdapter, reason: str) -> None:
        """A platform refused for good (the adapter logged what to fix). The rest serves on; when
        nothing is left that can, the gateway has failed."""
        if all(a.health.state == "failed" for a in self._adapters):
            self.failure = "; ".join(f"{a.name}: {a.health.error}" for a in self._adapters)
            self.failed.set()

    def health_changed(self, adapter: PlatformAdapter) -> None:
        """A platform's state changed; systemd's status line says who serves."""
        if not self.serving:
            return
        if adapter.ready:
            self._ready_again(adapter)
        systemd.notify(f"STATUS=running {self.summary()}")

    def summary(self) -> str:
        """"with webchat, telegram; down: discord" — who serves, and who does not."""
        states = {adapter.name: adapter.health.state for adapter in self._adapters}
        serving = [name for name, state in states.items() if state == "ready"]
        others = [f"{name} {state}" for name, state in states.items() if state != "ready"]
        return f"with {', '.join(serving) or 'no platform ready'}" + (f"; {', '.join(others)}" if others else "")

    def readiness(self) -> dict[str, dict[str, Any]]:
        return {adapter.name: adapter.health.as_dict() for adapter in self._adapters}

    def begin(self, leases: PlatformLeases | None = None) -> None:
        """Start connecting every platform; `leases`: this instance's, for the connections that must be single
        (None: each is made at once)."""
        self.leases = leases
        for adapter in self._adapters:
            self._tried[adapter.name] = asyncio.Event()
            self._tasks[adapter.name] = asyncio.create_task(self._connect(adapter), name=f"connect:{adapter.name}")

    async def first_tries(self, timeout: float) -> list[str]:
        """Wait until every platform's first try has ended (up, down or refused), at most `timeout`
        seconds; the names of those still on their first try."""
        waiting = [asyncio.ensure_future(tried.wait()) for tried in self._tried.values()]
        if waiting:
            await asyncio.wait(waiting, timeout=timeout)
        for waiter in waiting:
            waiter.cancel()
        return [name for name, tried in self._tried.items() if not tried.is_set()]

    async def stop(self) -> None:
        """End the tries under way (a try cut short releases what it opened)."""
        tasks = [task for task in self._tasks.values() if not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _connect(self, adapter: PlatformAdapter) -> None:
        if self.leases is not None and adapter.capabilities.single_connection:
            await self._while_held(adapter, self.leases)
        else:
            await self._until_up(adapter)

    async def _until_up(self, adapter: PlatformAdapter) -> bool:
        """Try to start the adapter until it is up (True) or refused for good (False)."""
        tries, down_since, told = 0, time.monotonic(), ""
        while True:
            tries += 1
            try:
                await adapter.start()
            except PlatformRefused:  # (the adapter said what to fix, once)
                self._tried[adapter.name].set()
                return False
            except Exception:
                pause = pause_before(tries, self._first_pause, self._max_pause)
                told = self._tell(adapter, tries, pause, down_since, told)
                self._tried[adapter.name].set()
                await asyncio.sleep(pause)
                continue
            self._tried[adapter.name].set()
            if tries > 1:
                log.info("%s is up, after %d tries in %.0fs", adapter.name, tries, time.monotonic() - down_since)
            await self._connected(adapter)
            return True

    async def _while_held(self, adapter: PlatformAdapter, leases: PlatformLeases) -> None:
        """A connection that must be single: served only while this instance holds its lease; a standby
        meanwhile, trying again every `standby_every` seconds. At the end (the gateway stops, or the
        platform refused for good) the adapter is stopped first, then the lease released, so that a standby
        takes over at once and never beside it."""
        try:
            while True:
                taken_at = time.monotonic()
                if not await self._take(adapter, leases):
                    self._tried[adapter.name].set()
                    await asyncio.sleep(leases.standby_every)
                    continue
                lost = await self._serve_held(adapter, leases, taken_at)
                if lost is None:
                    return
                log.warning("%s: stopped: %s; this instance stands by", adapter.name, lost)
                adapter.set_health("standby", f"stopped: {lost}")
        finally:
            await adapter.stop()
            await leases.release(adapter.name)

    @staticmethod
    async def _take(adapter: PlatformAdapter, leases: PlatformLeases) -> bool:
        """Whether this instance holds the adapter's lease now (a standby otherwise, or down: no database)."""
        try:
            held = await leases.take(adapter.name)
        except Exception as exc:
            adapter.set_health("down", f"cannot take the connection's lease: {failure_text(exc)}")
            return False
        if not held:
            adapter.set_health("standby", "another instance holds this connection")
        return held

    async def _serve_held(self, adapter: PlatformAdapter, leases: PlatformLeases, taken_at: float) -> str | None:
        """Start the adapter and keep its lease until the lease is lost (why is returned: the adapter is
        stopped by then) or the platform refuses for good (None)."""
        connecting = asyncio.create_task(self._until_up(adapter), name=f"start:{adapter.name}")
        keeping = asyncio.create_task(leases.keep(adapter.name, taken_at), name=f"lease:{adapter.name}")
        try:
            done, _ = await asyncio.wait({connecting, keeping}, return_when=asyncio.FIRST_COMPLETED)
            if connecting in done and not connecting.result():
                return None
            lost = await keeping
            connecting.cancel()
            await asyncio.gather(connecting, return_exceptions=True)
            await adapter.stop(handover=True)
            return lost
        finally:
            for task in (connecting, keeping):
                task.cancel()
            await asyncio.gather(connecting, keeping, return_exceptions=True)
            await adapter.stop()

    def _tell(self, adapter: PlatformAdapter, tries: int, pause: float, down_since: float, told: str) -> str:
        """Log a failed try when it is the first, a power of two, or fails for another reason; the reason."""
        reason = adapter.health.error or "no reason given"
        if tries == 1:
            log.warning("%s cannot connect: %s. The rest of chatgate runs meanwhile; the next try is in %.0fs, "
                        "then less often (up to every %.0fs).", adapter.name, reason, pause, self._max_pause)
        elif worth_telling(tries) or reason != told:
            log.warning("%s still cannot connect after %d tries in %.0fs: %s. The next try is in %.0fs.",
                        adapter.name, tries, time.monotonic() - down_since, reason, pause)
        else:
            log.debug("%s: try %d failed: %s", adapter.name, tries, reason)
        return reason
