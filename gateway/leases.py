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

from gateway.cron.ledger import instance_gone
from gateway.storage.leases import LeaseStore

log = logging.getLogger(__name__)

LEASE_SECONDS = 7.0
RENEW_EVERY = 2.0
STANDBY_EVERY = 1.0
STOP_MARGIN = 1.5
ALONE_SECONDS = 10 * 365 * 86400.0  # a lease on a database no other instance uses: released at stop, or overwritten


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
        deadline = taken_at + self.seconds - self.margin
        while True:
            await asyncio.sleep(max(0.0, min(self.renew_every, deadline - time.monotonic())))
            sent = time.monotonic()
            if sent >= deadline:
                return "the lease could not be renewed in time (the database did not answer)"
            try:
                held = await asyncio.wait_for(self.store.take(platform, self.holder, self.seconds), deadline - sent)
            except TimeoutError:
                return "the lease could not be renewed in time (the database did not answer)"
            except Exception as exc:  # (a storage error: tried again until the deadline)
                log.warning("%s: renewing the connection's lease failed: %s", platform, exc)
                continue
            if not held:
                return "another instance took the lease"
            deadline = sent + self.seconds - self.margin

    async def release(self, platform: str) -> None:
        """Give the lease up (a standby takes it at its next try); a failure only means it ends by itself."""
        try:
            await asyncio.wait_for(self.store.release(platform, self.holder), self.seconds)
        except Exception as exc:
            log.warning("%s: releasing the connection's lease failed (it ends by itself within %.0fs): %s",
                        platform, self.seconds, exc)
