"""What every group of tables is built on: the shared database and its one-statement shortcuts."""

from __future__ import annotations

from typing import Any

from gateway.storage.connection import Row, Work
from gateway.storage.database import Database


def live_instance(holder: str, now: str) -> str:
    """SQL: the instance `holder` (an expression) has a life lease that has not ended by `now` (the dialect's
    NOW_SECONDS): it is alive (gateway.leases.LifeLease)."""
    return f"EXISTS (SELECT 1 FROM instance_leases l WHERE l.holder = {holder} AND l.until >= {now})"


class Tables:
    """The statements of one group of tables (a module of `gateway.storage`), over the shared database.

    Its methods take and return plain values; a unit of work that must share a transaction with another
    group's is a function of the connection (`Work`) the other group's method accepts (`also=`). The
    shortcuts are the connection's methods (gateway.storage.connection), each one statement on its own:
    the reads between group commits, `execute` group-committed."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        return await self.db.read(lambda c: c.fetch(sql, *args))

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        return await self.db.read(lambda c: c.fetchrow(sql, *args))

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self.db.read(lambda c: c.fetchval(sql, *args))

    async def execute(self, sql: str, *args: Any) -> int:
        """One write statement, group-committed; how many rows it changed."""
        return await self.db.write(lambda c: c.execute(sql, *args), single=True)

    async def in_batches(self, batch: Work) -> int:
        """Run `batch` (a write that does part of a big job and says how many rows it did) in one write after
        another until it does none, so other writes go between its parts; how many rows in all."""
        done = 0
        while n := await self.db.write(batch):
            done += n
        return done

    async def data_version(self) -> int:
        """Changes when another connection (another process) commits to the database."""
        return int(await self.fetchval(self.db.dialect.DATA_VERSION) or 0)
