"""The schema: numbered migrations (`migrations/NNN_name.sql`), applied in order at open.

The database's `user_version` is the number of the last migration it had. A migration runs in a write
transaction of its own, statement by statement, after reading the version again under the lock (two
processes opening a new database do not both apply it). One that rebuilds a table is checked for room
on the disk first, moves the rows, and gives the space back after it commits (`gateway.storage.rebuild`).
"""

from __future__ import annotations

import sqlite3
from importlib import resources

import aiosqlite

from gateway.storage import rebuild, upkeep
from gateway.storage.database import SchemaError


def migrations() -> list[tuple[int, str]]:
    """The numbered migrations that come with this chatgate: (number, SQL), in order."""
    folder = resources.files("gateway.storage") / "migrations"
    return sorted((int(f.name.split("_", 1)[0]), f.read_text(encoding="utf-8"))
                  for f in folder.iterdir() if f.name.endswith(".sql"))


def statements(sql: str) -> list[str]:
    """A migration's statements, one by one (`executescript` would commit the transaction first)."""
    found, start = [], 0
    for end, char in enumerate(sql):
        if char == ";" and sqlite3.complete_statement(sql[start:end + 1]):
            found.append(sql[start:end + 1])
            start = end + 1
    if sql[start:].strip():
        found.append(sql[start:])
    return found


async def _version(db: aiosqlite.Connection) -> int:
    return int((await db.execute_fetchall("PRAGMA user_version"))[0][0])


async def migrate(db: aiosqlite.Connection, *, path: str = "the database", upgrade: bool = True,
             found: list[tuple[int, str]] | None = None) -> None:
    """Apply the numbered migrations the database has not had yet (at open), each in a write
    transaction of its own that reads the version again first: another process may have applied
    it meanwhile. A failure leaves the database at the last migration that committed. A database
    from a newer chatgate is refused; `upgrade` False: one from an older one too (not upgraded
    under the daemon that uses it)."""
    found = migrations() if found is None else found
    latest = found[-1][0] if found else 0
    version = await _version(db)
    if version > latest:
        raise SchemaError(f"{path} was made by a newer chatgate (schema version {version}; this one knows up to "
                          f"{latest}): run that version, or restore a backup made with this one")
    if version == latest:
        return
    if not upgrade:
        raise SchemaError(f"{path} is at schema version {version} and this chatgate needs {latest}: the chatgate "
                          "running on it is older; restart it with this version (it upgrades the database), "
                          "then try again")
    pending = [(number, statements(sql)) for number, sql in found if number > version]
    rows = version > 0  # (a new database has no rows to make room for, nor space to give back)
    if rows:
        await rebuild.check_room(db, pending, path=path, version=version)  # (before the first: refused, untouched)
    rebuilt = False
    for number, parts in pending:
        await db.execute("BEGIN IMMEDIATE")
        try:
            version = await _version(db)  # under the write lock: what another process applied meanwhile counts
            if number > version:
                rebuilt = await rebuild.apply(db, parts) or rebuilt
                await db.execute(f"PRAGMA user_version = {number}")
                version = number
            await db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                await db.rollback()
            raise
    if rebuilt and rows:  # (once the last has committed: what later ones wrote is not left in the WAL)
        await upkeep.hand_back(db)
