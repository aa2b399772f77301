"""Tables a migration rebuilds, and the disk that takes.

SQLite cannot change a table's constraints in place: its documented way is a new table, the rows copied
into it, the old one dropped and the new one renamed (https://www.sqlite.org/lang_altertable.html), so a
migration that must (016: the inbox's unique keys) writes every row again. The copy passes through the
WAL before it reaches the file, and made whole before the old table is dropped it would also leave the
file twice the table's size (the old pages free, but still the file's). So:

- before the first pending migration runs, `check_room` measures each table one of them rebuilds (one it
  copies rows from, then drops), with its indexes, and refuses in one line when the disk has less free
  than the largest rebuild needs: the database is left as it was;
- a plain copy — `INSERT INTO new (columns) SELECT columns FROM old;`, `old` dropped later in the same
  migration and without triggers of its own — is made `MOVE_ROWS` rows at a time, each step deleting
  the rows it copied: the pages the old table frees take the new one's rows, and the file stays about
  its size (measured in bench/migration_space.py);
- after such a migration commits, `gateway.storage.upkeep.hand_back` empties the WAL.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from dataclasses import dataclass

import aiosqlite

from gateway.storage.database import SchemaError

MOVE_ROWS = 1000  # rows copied and deleted per step of a move (the file grows by about that many)
MARGIN = 1.1  # over the measured size: the new indexes are built after the rows, page by page
MIB = 1024 * 1024
_COPY = re.compile(r"\s*INSERT\s+INTO\s+(\w+)\s*\([\w\s,]+\)\s*SELECT\s+[\w\s,]+?\s+FROM\s+(\w+)\s*;\s*", re.I)
_DROP = re.compile(r"\s*DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?(\w+)\s*;\s*", re.I)


def _bare(statement: str) -> str:
    """A statement without its comments, to be matched (never run)."""
    return re.sub(r"--[^\n]*", " ", statement)


@dataclass(frozen=True, slots=True)
class Rebuild:
    table: str  # dropped by the migration, once its rows are copied
    copy: int | None  # the index of its plain copy among the migration's statements; None: copied otherwise


def rebuilds(statements: list[str]) -> list[Rebuild]:
    """The tables a migration rebuilds: those it drops after an INSERT copied rows from them."""
    bare = [_bare(statement) for statement in statements]
    inserts = [statement for statement in bare if re.match(r"\s*INSERT\b", statement, re.I)]
    plain: dict[str, int] = {}
    for index, statement in enumerate(bare):
        if (copy := _COPY.fullmatch(statement)) and copy.group(1).lower() != copy.group(2).lower():
            plain[copy.group(2).lower()] = index
    dropped = [drop.group(1) for statement in bare if (drop := _DROP.fullmatch(statement))]
    return [Rebuild(table, plain.get(table.lower())) for table in dropped
            if any(re.search(rf"\bFROM\s+{table}\b", insert, re.I) for insert in inserts)]


async def _movable(db: aiosqlite.Connection, rebuild: Rebuild) -> bool:
    """Whether its rows can be moved step by step (a trigger on the old table would fire at each delete)."""
    if rebuild.copy is None:
        return False
    rows = await db.execute_fetchall("SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?",
                                     (rebuild.table,))
    return not rows


async def _size(db: aiosqlite.Connection, table: str) -> int:
    """The bytes `table` and its indexes hold (0: no such table yet); without SQLite's dbstat, the whole
    database's (which holds them: more than they need)."""
    try:
        [(size,)] = await db.execute_fetchall(
            "SELECT coalesce(sum(pgsize), 0) FROM dbstat('main', 1) WHERE name = ?1 OR name IN "
            "(SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?1)", (table,))
    except sqlite3.OperationalError:
        [(size,)] = await db.execute_fetchall("SELECT (page_count - freelist_count) * page_size FROM "
                                              "pragma_page_count, pragma_freelist_count, pragma_page_size")
    return int(size)


async def check_room(db: aiosqlite.Connection, pending: list[tuple[int, list[str]]], *, path: str,
                     version: int) -> None:
    """Refuse (`SchemaError`, one line) when the disk has less free than the largest rebuild among the
    `pending` migrations (number, statements) needs: its copy passes through the WAL, and a copy that is
    not moved stays in the file beside the old table until the migration ends."""
    [(file,)] = await db.execute_fetchall("SELECT file FROM pragma_database_list WHERE name = 'main'")
    if not file:  # (a database in memory)
        return
    needs = []
    for number, statements in pending:
        for rebuild in rebuilds(statements):
            copies = 1 if await _movable(db, rebuild) else 2
            needs.append((int(await _size(db, rebuild.table) * copies * MARGIN), number, rebuild.table))
    if not needs:
        return
    need, number, table = max(needs)
    free = shutil.disk_usage(os.path.dirname(file)).free
    if free < need:
        raise SchemaError(f"{path}: upgrading it rewrites its {table} table (migration {number:03d}), which needs "
                          f"{-(-need // MIB)} MiB free on its disk, and {free // MIB} MiB are free: make room, "
                          f"then start again (the database is left as it was, at schema version {version})")


async def apply(db: aiosqlite.Connection, statements: list[str]) -> bool:
    """Run a migration's statements (in its transaction), moving the rows of a plain copy step by step;
    whether it rebuilt a table."""
    found = rebuilds(statements)
    moves = {rebuild.copy: rebuild.table for rebuild in found if await _movable(db, rebuild)}
    for index, statement in enumerate(statements):
        if index in moves:
            await _move(db, statement, moves[index])
        else:
            await db.execute(statement)
    return bool(found)


async def _move(db: aiosqlite.Connection, copy: str, table: str) -> None:
    """`copy` (a plain `INSERT ... SELECT ... FROM table;`) made `MOVE_ROWS` rows at a time, in rowid order,
    each step deleting from `table` the rows it copied."""
    step = f"{copy.rstrip().removesuffix(';')} WHERE rowid <= ?"
    while True:
        [(last,)] = await db.execute_fetchall(
            f"SELECT max(r) FROM (SELECT rowid AS r FROM {table} ORDER BY rowid LIMIT {MOVE_ROWS})")
        if last is None:
            return
        await db.execute(step, (last,))
        await db.execute(f"DELETE FROM {table} WHERE rowid <= ?", (last,))
