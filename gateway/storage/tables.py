"""What every group of tables is built on: the shared database and three one-statement shortcuts."""

from __future__ import annotations

import sqlite3
from typing import Any

from gateway.storage.database import Database, Work, first_row


class Tables:
    """The statements of one group of tables (a module of `gateway.storage`), over the shared database.

    Its methods take and return plain values; a unit of work that must share a transaction with another
    group's is a function of the connection (`Work`) the other group's method accepts (`also=`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def fetch_one(self, sql: str, args: tuple[Any, ...] = ()) -> sqlite3.Row | None:
        return await self.db.read(lambda c: first_row(c, sql, args))

    async def fetch_all(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return list(await self.db.read(lambda c: c.execute_fetchall(sql, args)))

    async def in_batches(self, batch: Work) -> int:
        """Run `batch` (a write that does part of a big job and says how many rows it did) in one write after
        another until it does none, so other writes go between its parts; how many rows in all."""
        done = 0
        while n := await self.db.write(batch):
            done += n
        return done

    async def execute(self, sql: str, args: tuple[Any, ...] = ()) -> int:
        """One write statement, group-committed; how many rows it changed."""
        cursor = await self.db.write(lambda c: c.execute(sql, args), single=True)
        return int(cursor.rowcount)

    async def data_version(self) -> int:
        """Changes when another connection (another process) commits to the database."""
        row = await self.fetch_one("PRAGMA data_version")
        return int(row[0]) if row else 0
