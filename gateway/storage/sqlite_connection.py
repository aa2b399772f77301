"""SQLite's `Connection` (gateway.storage.connection): aiosqlite's, wrapped as thinly as it goes.

Every aiosqlite call is one hop between the event loop and the connection's thread, which costs about as
much CPU as a few dozen small statements: each method here is exactly one such call (`execute_fetchall`
for rows, whatever a statement returns), and `pipelined` queues several at once. `raw` is the aiosqlite
connection itself, for what only SQLite does (its engine in `gateway.storage.database`, the migrations,
`gateway.storage.upkeep`, the online backup).
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any, Awaitable, Iterable, Sequence

import aiosqlite

from gateway.storage import sqlite_dialect


class SqliteConnection:
    __slots__ = ("raw",)
    dialect = sqlite_dialect

    def __init__(self, raw: aiosqlite.Connection) -> None:
        self.raw = raw

    async def fetch(self, sql: str, *args: Any) -> list[sqlite3.Row]:
        return await self.raw.execute_fetchall(sql, args)  # type: ignore[return-value]  # (a list)

    async def fetchrow(self, sql: str, *args: Any) -> sqlite3.Row | None:
        rows = await self.raw.execute_fetchall(sql, args)
        return next(iter(rows), None)  # (a cursor's `fetchone` would be a second hop)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        row = next(iter(await self.raw.execute_fetchall(sql, args)), None)
        return None if row is None else row[0]

    async def execute(self, sql: str, *args: Any) -> int:
        """The statement; how many rows it changed (sqlite3's `rowcount`: -1 for one that changes none by
        its kind, a SELECT or a PRAGMA)."""
        return (await self.raw.execute(sql, args)).rowcount

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        await self.raw.executemany(sql, rows)

    async def pipelined(self, *calls: Awaitable[Any]) -> list[Any]:
        """Statements of a unit that do not need each other's results, queued at once: aiosqlite runs them
        in the order given, and the unit waits for one round trip instead of one each. All of them have
        ended when this returns; then the first error, if any, is raised."""
        results = await asyncio.gather(*calls, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results

    async def begin(self) -> None:
        await self.raw.execute("BEGIN IMMEDIATE")  # (the write lock at once: a conflict shows here, not later)

    async def commit(self) -> None:
        await self.raw.execute("COMMIT")

    async def rollback(self) -> None:
        """sqlite3's rollback does nothing when no transaction is open."""
        await self.raw.rollback()

    async def close(self) -> None:
        await self.raw.close()  # (SQLite rolls back what was left open)

    def changes(self) -> int:
        return self.raw.total_changes
