"""What the database gives back: its free pages, its WAL, and the one-time switch to incremental vacuum.

A database `Store.open` creates runs with `auto_vacuum = INCREMENTAL`: pages a prune frees are handed back
to the file system by `PRAGMA incremental_vacuum` (`give_back`, some pages per call, so other work goes
between), and a WAL checkpoint (`checkpoint`) lets the file shrink. One made before that
(`auto_vacuum = NONE`) needs one VACUUM to switch (`switch_to_incremental`): it rewrites the whole file
while every other use of the database waits, and needs free disk for a second copy (it passes
through the WAL). When to do which is `gateway.retention`'s.

All of it is SQLite's own (its file, its pages, its WAL): the units here take the aiosqlite connection
itself (`SqliteConnection.raw`). PostgreSQL gives space back by its own (auto)vacuum: there, nothing.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass

import aiosqlite

from gateway.storage.sqlite_connection import SqliteConnection
from gateway.storage.tables import Tables

log = logging.getLogger(__name__)
INCREMENTAL = 2  # PRAGMA auto_vacuum


@dataclass(frozen=True, slots=True)
class Space:
    """The database file's state, as far as giving space back goes."""

    incremental: bool  # free pages can be handed back (`give_back`); False: it needs `switch_to_incremental`
    free_pages: int
    size: int  # bytes in use by the file (its pages)


class Upkeep(Tables):
    async def space(self) -> Space:
        """(A shared database, PostgreSQL's, has nothing to give back here: its autovacuum does.)"""
        if self.db.engine.shared:
            return Space(True, 0, 0)
        row = await self.fetchrow(
            "SELECT auto_vacuum, freelist_count, page_count, page_size"
            " FROM pragma_auto_vacuum, pragma_freelist_count, pragma_page_count, pragma_page_size")
        assert row is not None  # (pragmas have a row)
        return Space(row["auto_vacuum"] == INCREMENTAL, row["freelist_count"], row["page_count"] * row["page_size"])

    async def give_back(self, pages: int) -> int:
        """Hand back up to `pages` free pages to the file system; the free pages left."""
        async def some(db: SqliteConnection) -> int:
            await db.raw.executescript(f"PRAGMA incremental_vacuum({int(pages)});")  # (execute() frees one page a call)
            return int(await db.fetchval("PRAGMA freelist_count"))

        return await self.db.read(some)

    async def checkpoint(self) -> None:
        """Copy the WAL into the file (which shrinks to the pages in use) and empty it; without waiting for a
        reader another process has open (an operator's `sqlite3` shell): then only as far as it can."""
        await self.db.read(lambda db: _checkpoint(db.raw))

    async def switch_to_incremental(self) -> None:
        """The one VACUUM that turns on incremental vacuum (see the module doc), then a checkpoint."""
        async def vacuum(db: SqliteConnection) -> None:
            await db.raw.executescript("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")
            await _checkpoint(db.raw)

        await self.db.read(vacuum)


async def hand_back(db: aiosqlite.Connection) -> None:
    """Every free page back to the file system (where incremental vacuum is on) and the WAL emptied, outside
    a transaction: after a migration that rewrote a table. As far as another program allows at that
    moment (a reader it has open keeps the WAL; its write lock, held past the wait, the free pages:
    the ticks give those back)."""
    try:
        await db.executescript("PRAGMA incremental_vacuum;")
        await _checkpoint(db)
    except sqlite3.OperationalError as exc:
        log.warning("could not give the space back at once after upgrading the database: %s", exc)


async def _checkpoint(db: aiosqlite.Connection) -> None:
    """`Upkeep.checkpoint` inside a unit of work."""
    [(timeout,)] = await db.execute_fetchall("PRAGMA busy_timeout")
    await db.execute("PRAGMA busy_timeout = 0")
    try:
        await db.execute_fetchall("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        await db.execute(f"PRAGMA busy_timeout = {int(timeout)}")
