"""SQLite's engine: one connection through aiosqlite (its own thread; every call is a hop to it), the
file's PRAGMAs, and which of sqlite3's errors are the storage's.

Another program's write lock (an operator's `sqlite3` shell in a transaction, a backup tool) is a
conflict that passes: SQLite itself waits only `BUSY_TIMEOUT_MS` per try on the connection's thread, and
the group commit (gateway.storage.database) waits the rest out on the event loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Awaitable, Callable

import aiosqlite

from gateway.storage import sqlite_dialect
from gateway.storage.database import LOCK_WAIT, Database, storage_error
from gateway.storage.sqlite_connection import SqliteConnection

Setup = Callable[[aiosqlite.Connection], Awaitable[None]]  # what runs on a new connection first (the migrations)
BUSY_TIMEOUT_MS = 100  # SQLite's own wait for a lock, per try, on the connection's thread
OPEN_TIMEOUT_MS = 30_000  # the same while opening (another process may be migrating the database)
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
_STORAGE = frozenset({*_BUSY, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR,
                      sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN,
                      sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_NOTADB})


def _code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None) if isinstance(exc, sqlite3.DatabaseError) else None
    return code & 0xFF if isinstance(code, int) else None


class SqliteEngine:
    dialect = sqlite_dialect
    shared = False  # (the home's lock keeps any other daemon out)

    def __init__(self, path: str, pragmas: str) -> None:
        self.path, self.pragmas = path, pragmas

    async def connect(self, setup: Setup | None = None) -> SqliteConnection:
        """A connection with the PRAGMAs applied. `setup`: opening the store, what to run on the new
        connection (the migrations), with SQLite waiting up to `OPEN_TIMEOUT_MS` for locks; None: the
        connection opened again after a failure. Switching a new file to WAL beside another opener is
        refused without waiting (SQLite's deadlock rule): opening tries again until `OPEN_TIMEOUT_MS`,
        and the migrations read the version anew."""
        deadline = time.monotonic() + OPEN_TIMEOUT_MS / 1000
        while True:
            conn = await aiosqlite.connect(self.path, isolation_level=None)  # transactions are ours: BEGIN/COMMIT
            try:
                conn.row_factory = sqlite3.Row
                await conn.executescript(f"PRAGMA busy_timeout = {OPEN_TIMEOUT_MS if setup else BUSY_TIMEOUT_MS};"
                                         + self.pragmas)
                if setup is not None:
                    await setup(conn)
                    await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                return SqliteConnection(conn)
            except sqlite3.OperationalError as exc:
                await conn.close()
                if not (setup is not None and self.busy(exc) and time.monotonic() < deadline):
                    raise
            except BaseException:
                await conn.close()
                raise
            await asyncio.sleep(0.05)

    def busy(self, exc: BaseException) -> bool:
        """Another connection holds the lock this needed."""
        return _code(exc) in _BUSY

    def fault(self, exc: BaseException) -> bool:
        return _code(exc) in _STORAGE

    def describe_busy(self) -> str:
        return "the database is locked by another program"


async def open_sqlite(path: str, pragmas: list[str], setup: Setup | None = None, *,
                      lock_wait: float = LOCK_WAIT) -> Database:
    """Connect, apply `pragmas`, then run `setup` (the migrations) on the new connection.
    `lock_wait`: how long a write waits for another program's lock (see gateway.storage.database)."""
    engine = SqliteEngine(path, "".join(f"PRAGMA {pragma};" for pragma in pragmas))
    try:
        conn = await engine.connect(setup or _nothing)
    except Exception as exc:
        raise storage_error(engine, exc, OPEN_TIMEOUT_MS / 1000)  # (a locked or unreadable file: said in one line)
    return Database(engine, conn, lock_wait)


async def _nothing(conn: aiosqlite.Connection) -> None:
    """No work (no setup)."""
