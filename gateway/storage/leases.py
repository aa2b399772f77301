"""Platform leases (`platform_leases`): which instance holds each connection that must be single (Telegram's
long poll, Discord's gateway, Slack's Socket Mode) while several instances share one database.

A lease is one row per platform: its holder and the time it ends, by the database's clock (`NOW_SECONDS`), so
that instances whose machines' clocks differ agree on it. Taking and renewing are one statement, an upsert
that changes the row only when it is free, ended or already the taker's: two instances taking at once meet on
the primary key, and the database lets exactly one of them win (`RETURNING` gives a row to the winner only).
"""

from __future__ import annotations

from typing import Any

from gateway.storage.connection import Connection, Work
from gateway.storage.tables import Tables


class LeaseStore(Tables):
    async def take(self, platform: str, holder: str, seconds: float, *, replacing: str | None = None) -> bool:
        """Take or renew `platform`'s lease for `holder`, to end `seconds` from now; whether it is `holder`'s
        now (False: another holds it and its lease has not ended). `replacing`: a holder known to be gone
        (its process exited), whose lease is taken as if it had ended; if another took it meanwhile, it stays
        that one's."""
        return await self.db.write(self._upsert(platform, holder, seconds, replacing), single=True)

    def record(self, platform: str, holder: str, seconds: float) -> None:
        """Record `holder`'s lease on a database no other instance uses, whoever held it before (a daemon of this
        home that was killed): nothing to wait for, in the next group commit."""
        now = self.db.dialect.NOW_SECONDS
        self.db.later(lambda db: db.execute(
            f"INSERT INTO platform_leases (platform, holder, until) VALUES (?, ?, {now} + ?)"
            " ON CONFLICT (platform) DO UPDATE SET holder = excluded.holder, until = excluded.until",
            platform, holder, float(seconds)))

    def _upsert(self, platform: str, holder: str, seconds: float, replacing: str | None) -> Work:
        now = self.db.dialect.NOW_SECONDS

        async def upsert(db: Connection) -> bool:
            return await db.fetchval(
                f"INSERT INTO platform_leases (platform, holder, until) VALUES (?1, ?2, {now} + ?3)"
                " ON CONFLICT (platform) DO UPDATE SET holder = excluded.holder, until = excluded.until"
                " WHERE platform_leases.holder = excluded.holder OR platform_leases.holder = ?4"
                f" OR platform_leases.until < {now} RETURNING holder",
                platform, holder, float(seconds), replacing or "") is not None
        return upsert

    async def release(self, platform: str, holder: str) -> bool:
        """End `holder`'s lease of `platform` now (a standby may take it at once); whether it held it."""
        return await self.execute("DELETE FROM platform_leases WHERE platform = ? AND holder = ?",
                                  platform, holder) > 0

    async def held(self) -> list[dict[str, Any]]:
        """The leases that have not ended: platform, holder, and `left` (seconds until it ends)."""
        now = self.db.dialect.NOW_SECONDS
        rows = await self.fetch(f"SELECT platform, holder, until - {now} AS left_seconds FROM platform_leases"
                                f" WHERE until >= {now} ORDER BY platform")
        return [{"platform": r["platform"], "holder": r["holder"], "left": float(r["left_seconds"])} for r in rows]
