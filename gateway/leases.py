"""This instance's leases of the connections that must be single (`Capabilities.single_connection`: Telegram's
long poll, Discord's gateway, Slack's Socket Mode) when several instances share one database.

A lease lasts `LEASE_SECONDS` by the database's clock (gateway.storage.leases) and its holder renews it every
`RENEW_EVERY` seconds. The holder counts on it only until `STOP_MARGIN` seconds before it could have ended, by
its own monotonic clock from the moment it sent the statement that last renewed it (a renewal the database
took later only ends later): past that, with no renewal confirmed (the database unreachable, or slower than
that), it stops the connection before any other instance may take the lease. So two instances never hold the
connection side by side, and a holder that dies (kill -9, power loss, a network cut) is replaced by a standby
(which tries every `STANDBY_EVERY` seconds) within LEASE_SECONDS + STANDBY_EVERY of its last renewal: 8 s,
and the time to connect, inside the 10 s allowed. A holder whose process is known to have exited (it ran on this
machine) is replaced at once.

On a database no other instance uses (`shared` False: SQLite, whose home's lock file keeps any other daemon out)
the same steps run, but the lease cannot be another's: it is recorded (for `chatgate status`) without waiting for
the database, in the next group commit, over a killed daemon's, for as long as the daemon runs (`ALONE_SECONDS`),
and never renewed: no write every few seconds, and a database that does not answer (a program holding SQLite's
write lock) never stops the connection, which goes on as it always has.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

from gateway.cron.ledger import instance_gone
from gateway.storage.leases import LeaseStore
from gateway.storage.owners import OwnerStore

log = logging.getLogger(__name__)

LEASE_SECONDS = 7.0
RENEW_EVERY = 2.0
STANDBY_EVERY = 1.0
STOP_MARGIN = 1.5
ALONE_SECONDS = 10 * 365 * 86400.0  # a lease on a database no other instance uses: released at stop, or overwritten
LIFE_SECONDS = 20.0  # an instance's life lease (`LifeLease`)
LIFE_RENEW_EVERY = 3.0
LIFE_MARGIN = 5.0


class PlatformLeases:
    """Takes, keeps and releases this instance's (`holder`'s) leases, one per platform."""

    def __init__(self, store: LeaseStore, holder: str, *, seconds: float = LEASE_SECONDS,
                 renew_every: float = RENEW_EVERY, standby_every: float = STANDBY_EVERY,
                 margin: float = STOP_MARGIN, shared: bool = True) -> None:
        self.store, self.holder, self.shared = store, holder, shared
        self.seconds, self.renew_every, self.standby_every, self.margin = seconds, renew_every, standby_every, margin

    async def take(self, platform: str) -> bool:
        """Take (or renew) the lease; whether this instance holds it now. A holder whose process has exited is
        replaced. A storage error is raised."""
        if not self.shared:
            self.store.record(platform, self.holder, ALONE_SECONDS)
            return True
        if await self.store.take(platform, self.holder, self.seconds):
            return True
        for lease in await self.store.held():
            if lease["platform"] == platform and instance_gone(lease["holder"], self.holder):
                log.info("%s: the instance that held the connection (%s) has exited; taking over", platform,
                         lease["holder"])
                return await self.store.take(platform, self.holder, self.seconds, replacing=lease["holder"])
        return False

    async def keep(self, platform: str, taken_at: float) -> str:
        """Renew the lease, taken by a statement sent at `taken_at` (time.monotonic()), until it can no longer be
        counted on; then return why (the caller stops the connection at once)."""
        if not self.shared:
            return await asyncio.get_running_loop().create_future()  # (never lost: until the gateway stops)
        return await keep_renewed(lambda: self.store.take(platform, self.holder, self.seconds), taken_at,
                                  seconds=self.seconds, renew_every=self.renew_every, margin=self.margin,
                                  what=f"{platform}: the connection's lease")

    async def release(self, platform: str) -> None:
        """Give the lease up (a standby takes it at its next try); a failure only means it ends by itself."""
        try:
            await asyncio.wait_for(self.store.release(platform, self.holder), self.seconds)
        except Exception as exc:
            log.warning("%s: releasing the connection's lease failed (it ends by itself within %.0fs): %s",
                        platform, self.seconds, exc)


async def keep_renewed(renew: Callable[[], Awaitable[bool]], taken_at: float, *, seconds: float, renew_every: float,
                       margin: float, what: str, renewed: Callable[[float], None] | None = None) -> str:
    """Renew a lease of `seconds` (`renew`: whether it is still ours), taken by a statement sent at `taken_at`
    (time.monotonic()), every `renew_every` seconds until it can no longer be counted on — `margin` seconds
    before it could have ended, counted from the sending of the last renewal confirmed (`renewed` is told that
    moment); then return why."""
    deadline = taken_at + seconds - margin
    while True:
        await asyncio.sleep(max(0.0, min(renew_every, deadline - time.monotonic())))
        sent = time.monotonic()
        if sent >= deadline:
            return "the lease could not be renewed in time (the database did not answer)"
        try:
            held = await asyncio.wait_for(renew(), deadline - sent)
        except TimeoutError:
            return "the lease could not be renewed in time (the database did not answer)"
        except Exception as exc:  # (a storage error: tried again until the deadline)
            log.warning("renewing %s failed: %s", what, exc)
            continue
        if not held:
            return "another instance took the lease"
        deadline = sent + seconds - margin
        if renewed is not None:
            renewed(sent)


class LifeLease:
    """This instance's life lease, while several instances share one database: renewed every `LIFE_RENEW_EVERY`
    seconds, it ends `LIFE_SECONDS` after the last renewal by the database's clock, and then other instances take
    this one's conversations over (gateway.chat.owners). It is counted on only until `LIFE_MARGIN` seconds before
    it could have ended (as a connection's lease): past that, with no renewal confirmed, the instance lets every
    turn go (`when_lost`) and sends nothing (`fence`) until a renewal is confirmed again. On a database of its own
    it is always counted on and nothing is written."""

    def __init__(self, store: OwnerStore, holder: str, *, shared: bool) -> None:
        self.store, self.holder, self.shared = store, holder, shared
        self._deadline = 0.0  # time.monotonic() until which it is counted on
        self._renewed = asyncio.Event()
        self._lost: list[Callable[[], None]] = []
        self._back: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None

    def when_lost(self, call: Callable[[], None]) -> None:
        self._lost.append(call)

    def when_renewed(self, call: Callable[[], None]) -> None:
        """`call` once the lease is counted on again after it was lost."""
        self._back.append(call)

    def counted_on(self) -> bool:
        return not self.shared or time.monotonic() < self._deadline

    async def fence(self) -> None:
        """Wait (before sending anything) until the lease can be counted on."""
        while not self.counted_on():
            self._renewed.clear()
            await self._renewed.wait()

    async def start(self) -> None:
        if self.shared:
            sent = time.monotonic()
            await self._renew()
            self._confirmed(sent)
            self._task = asyncio.create_task(self._keep(sent), name="life-lease")

    async def stop(self) -> None:
        """End the lease now (its conversations with it: another instance takes up what is left at once)."""
        if self._task is None:
            return
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task, self._deadline = None, 0.0
        await self.store.end(self.holder)

    async def _keep(self, sent: float) -> None:
        while True:
            why = await keep_renewed(self._renew, sent, seconds=LIFE_SECONDS, renew_every=LIFE_RENEW_EVERY,
                                     margin=LIFE_MARGIN, what="this instance's life lease", renewed=self._confirmed)
            log.error("%s: this instance lets every turn go (another instance takes its conversations over)", why)
            for call in self._lost:
                call()
            while True:
                await asyncio.sleep(LIFE_RENEW_EVERY)
                sent = time.monotonic()
                try:
                    await self._renew()
                    break
                except Exception as exc:
                    log.warning("renewing this instance's life lease failed: %s", exc)
            log.info("this instance's life lease is renewed: it takes conversations again")
            self._confirmed(sent)
            for call in self._back:
                call()

    async def _renew(self) -> bool:
        await self.store.live(self.holder, LIFE_SECONDS)
        return True

    def _confirmed(self, sent: float) -> None:
        self._deadline = sent + LIFE_SECONDS - LIFE_MARGIN
        self._renewed.set()
