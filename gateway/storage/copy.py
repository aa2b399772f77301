"""`chatgate storage migrate`'s copy: every row of an SQLite home's database into an empty PostgreSQL one.

The tables and their columns are read from the SQLite file itself (its FTS5 tables `messages_fts*` aside:
PostgreSQL computes `messages.search_vector` from each row; and SQLite's own `sqlite_*`), so a table a
later migration adds is copied without a change here. The SQLite database must be at the version
PostgreSQL's schema has (`migrations/postgres`): an older one is upgraded by starting the daemon of this
version once, a newer one belongs to a newer chatgate.

Everything happens in ONE PostgreSQL transaction: the schema created (when the database has none yet), the
check that no chatgate table holds a row and no other table is there, the rows copied (in batches, with
COPY), the identity sequences moved past the largest id copied. Any failure — a value that cannot be
converted, a row PostgreSQL refuses, the connection lost — rolls it all back: the database is left as it was.
The home's documents (its `memory/` and `skills/` files: agent.documents), which an instance on PostgreSQL reads
from the `documents` table, are written into it in the same transaction.
The schema's advisory lock is held for the whole transaction, so an instance started on the database
meanwhile waits for the copy to end instead of creating the schema beside it.

SQLite's types are loose (a TEXT column may hold an integer, an INTEGER column a float that old code
wrote): each value is converted to what its PostgreSQL column takes when that loses nothing, and a value
that cannot be names its table, column and row.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import time
from dataclasses import dataclass, field
from graphlib import TopologicalSorter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping
from urllib.parse import urlsplit

import aiosqlite

from gateway.storage import postgres_engine
from gateway.storage.database import SchemaError, StorageError
from gateway.storage.postgres_engine import PostgresEngine, where

if TYPE_CHECKING:
    import asyncpg

BATCH = 1000  # rows per COPY
SKIPPED = re.compile(r"sqlite_.*|messages_fts.*")  # SQLite's own tables, and FTS5's (PostgreSQL computes its own)
_INTEGER = re.compile(r"\s*[-+]?\d+\s*")
_INTEGER_BITS = {"bigint": 64, "integer": 32, "smallint": 16}


class CopyRefused(Exception):
    """Nothing was copied (the PostgreSQL database is as it was); the message, one line, says why."""


class Unconvertible(ValueError):
    """A SQLite value that its PostgreSQL column cannot take without changing it."""


# -- values ----------------------------------------------------------------------------------------------------

def _integer(bits: int) -> Callable[[Any], Any]:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if type(value) is int:
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, str) and _INTEGER.fullmatch(value):
            number = int(value)
        else:
            raise Unconvertible(f"{value!r:.80} is not a whole number")
        if not low <= number <= high:
            raise Unconvertible(f"{number} does not fit a {bits}-bit integer")
        return number
    return convert


def _double(value: Any) -> Any:
    if value is None or type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise Unconvertible(f"{value!r:.80} is not a number")


def _text(value: Any) -> Any:
    if type(value) is str:
        if "\0" in value:
            raise Unconvertible("the text holds a NUL character, which PostgreSQL's text cannot")
        return value
    if value is None:
        return None
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, bytes):
        try:
            return _text(value.decode("utf-8"))
        except UnicodeDecodeError:
            raise Unconvertible(f"{len(value)} bytes that are not UTF-8 text") from None
    raise Unconvertible(f"{value!r:.80} is not text")


def converter(pg_type: str) -> Callable[[Any], Any] | None:
    """What turns a SQLite value into one the PostgreSQL column of `pg_type` takes (None: a type not known)."""
    if pg_type in _INTEGER_BITS:
        return _integer(_INTEGER_BITS[pg_type])
    return {"double precision": _double, "text": _text}.get(pg_type)


# -- the plan --------------------------------------------------------------------------------------------------

@dataclass
class Table:
    """One table to copy: its columns (SQLite's, in order), its key (to name a row), what it references."""

    name: str
    columns: list[str]
    key: list[str]
    references: set[str]
    converters: list[Callable[[Any], Any]] = field(default_factory=list)

    def convert(self, row: Any) -> tuple[Any, ...]:
        try:
            return tuple([convert(value) for convert, value in zip(self.converters, row)])
        except Unconvertible:
            for column, convert, value in zip(self.columns, self.converters, row):
                try:
                    convert(value)
                except Unconvertible as exc:
                    key = ", ".join(f"{k} {row[self.columns.index(k)]!r:.60}" for k in self.key) or "without a key"
                    raise CopyRefused(f"{self.name}.{column} of the row {key} cannot be copied: {exc}") from None
            raise


async def sqlite_tables(source: aiosqlite.Connection) -> list[Table]:
    """The tables to copy, each after those it references."""
    names = [r[0] for r in await source.execute_fetchall("SELECT name FROM sqlite_master WHERE type = 'table'")
             if not SKIPPED.fullmatch(r[0])]
    found: dict[str, Table] = {}
    for name in names:
        info = await source.execute_fetchall(f'PRAGMA table_info("{name}")')
        keys = sorted((r[5], r[1]) for r in info if r[5])
        references = {r[2] for r in await source.execute_fetchall(f'PRAGMA foreign_key_list("{name}")')} - {name}
        found[name] = Table(name, [r[1] for r in info], [k for _, k in keys], references)
    order = TopologicalSorter()  # (SQLite's order, each table after those it references)
    for name, table in found.items():
        order.add(name, *sorted(table.references & set(found)))
    return [found[name] for name in order.static_order()]


_PG_COLUMNS = """
SELECT table_name, column_name, data_type, is_generated = 'ALWAYS' AS generated, is_identity = 'YES' AS identity
FROM information_schema.columns WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"""
_PG_TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
PG_ONLY = {"chatgate_schema"}  # the schema's version (SQLite: PRAGMA user_version), made with the schema


async def _plan(target: "asyncpg.Connection", tables: list[Table], url: str) -> list[tuple[str, str]]:
    """Check the PostgreSQL database against SQLite's tables: chatgate's and no other, each empty, the same
    columns; give each column its converter. The identity columns, (table, column), to move past the copy."""
    ours = {t.name for t in tables}
    present = {r["tablename"] for r in await target.fetch(_PG_TABLES)}
    if others := sorted(present - ours - PG_ONLY):
        raise CopyRefused(f"{where(url)} holds tables that are not chatgate's ({', '.join(others[:5])}): "
                          "name an empty database")
    columns: dict[str, dict[str, asyncpg.Record]] = {}
    for r in await target.fetch(_PG_COLUMNS):
        columns.setdefault(r["table_name"], {})[r["column_name"]] = r
    for table in tables:
        pg = columns.get(table.name, {})
        wanted = {name for name, c in pg.items() if not c["generated"]}
        if table.name not in present or set(table.columns) != wanted:
            raise CopyRefused(f"the table {table.name} differs between the SQLite database and {where(url)}: "
                              "both must be at the same schema version")
        if await target.fetchval(f'SELECT EXISTS (SELECT 1 FROM "{table.name}")'):
            raise CopyRefused(f"{where(url)} is not empty (the table {table.name} has rows): name an empty database")
        table.converters = [_converter_of(table.name, c, pg[c]["data_type"]) for c in table.columns]
    return [(t.name, name) for t in tables for name, c in columns[t.name].items() if c["identity"]]


def _converter_of(table: str, column: str, pg_type: str) -> Callable[[Any], Any]:
    found = converter(pg_type)
    if found is None:
        raise CopyRefused(f"{table}.{column} is of the type {pg_type}, which this copy does not know")
    return found


# -- the copy --------------------------------------------------------------------------------------------------

async def _copy_table(source: aiosqlite.Connection, target: "asyncpg.Connection", table: Table,
                      batch: int) -> int:
    import asyncpg

    listed = ", ".join(f'"{c}"' for c in table.columns)
    copied = 0
    async with source.execute(f'SELECT {listed} FROM "{table.name}"') as cursor:
        while rows := await cursor.fetchmany(batch):
            records = [table.convert(row) for row in rows]
            try:
                await target.copy_records_to_table(table.name, records=records, columns=table.columns)
            except asyncpg.PostgresError as exc:
                detail = f" ({exc.detail})" if getattr(exc, "detail", None) else ""
                refusal = f"PostgreSQL refused a row of {table.name}: {exc.message}{detail}"
                raise CopyRefused(_one_line(refusal)) from None
            copied += len(records)
    return copied


async def _move_sequences(target: "asyncpg.Connection", identities: list[tuple[str, str]]) -> None:
    """Each identity's next value past the largest copied (the code never gives an id; the copy did)."""
    for table, column in identities:
        await target.execute(f'SELECT setval(pg_get_serial_sequence($1, $2), max("{column}")) FROM "{table}"'
                             f' HAVING max("{column}") IS NOT NULL', table, column)


def _one_line(text: str) -> str:
    return " ".join(text.split())


@dataclass
class Copied:
    """What was copied: rows per table (in the order copied), and how long it took."""

    rows: dict[str, int]
    seconds: float
    documents: int = 0  # the home's documents written into the `documents` table

    @property
    def total(self) -> int:
        return sum(self.rows.values())


async def _open_source(path: Path, latest: int) -> aiosqlite.Connection:
    if not path.is_file():
        raise CopyRefused(f"there is no database at {path}: nothing to copy")
    old_mask = os.umask(0o077)  # (the -wal and -shm files the first read makes are the owner's only, as Store's)
    source = None
    try:
        source = await aiosqlite.connect(path)
        version = (await source.execute_fetchall("PRAGMA user_version"))[0][0]
    except sqlite3.Error as exc:
        if source is not None:
            await source.close()
        raise CopyRefused(f"{path} cannot be read: {exc}") from None
    finally:
        os.umask(old_mask)
    try:
        if version < latest:
            raise CopyRefused(f"{path} is at schema version {version} and the copy needs {latest}: start the daemon of "
                              "this chatgate once (it upgrades the database), stop it, then migrate")
        if version > latest:
            raise CopyRefused(f"{path} was made by a newer chatgate (schema version {version}; this one knows up to "
                              f"{latest}): migrate with that version")
        await source.execute("BEGIN")  # (one snapshot for every table)
    except BaseException:
        await source.close()
        raise
    return source


async def copy_to_postgres(path: Path, url: str, *, documents: Mapping[str, str] | None = None,
                           batch: int = BATCH) -> Copied:
    """Copy the SQLite database at `path` into the empty PostgreSQL database `url`, and `documents` (name → text)
    into its `documents` table, all or nothing (see the module doc); `CopyRefused` (one line, no password) when
    it did not."""
    import asyncpg

    latest = postgres_engine.schema_version()
    source = await _open_source(path, latest)
    try:
        tables = await sqlite_tables(source)
        try:
            conn = await PostgresEngine(url).connect()
        except StorageError as exc:
            raise CopyRefused(str(exc)) from None
        try:
            return await _copy_all(source, conn.raw, tables, url, batch, documents or {})
        except sqlite3.Error as exc:  # (a value SQLite cannot give back as text: not UTF-8)
            raise CopyRefused(_one_line(f"reading {path} failed: {exc}")) from None
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            password = urlsplit(url).password
            reason = str(exc).replace(password, "***") if password else str(exc)
            raise CopyRefused(_one_line(f"{where(url)} failed: {type(exc).__name__}: {reason}")) from None
        finally:
            await conn.raw.close(timeout=postgres_engine.CONNECT_TIMEOUT)
    finally:
        await source.close()


async def _copy_all(source: aiosqlite.Connection, target: "asyncpg.Connection", tables: list[Table], url: str,
                    batch: int, documents: Mapping[str, str]) -> Copied:
    started = time.monotonic()
    async with target.transaction():
        await target.execute("SELECT pg_advisory_xact_lock($1)", postgres_engine.SCHEMA_LOCK)
        try:
            await postgres_engine.migrate(target, url)  # (a savepoint in this transaction; the lock is ours)
        except SchemaError as exc:
            raise CopyRefused(str(exc)) from None
        identities = await _plan(target, tables, url)
        rows = {t.name: await _copy_table(source, target, t, batch) for t in tables}
        await _move_sequences(target, identities)
        await _copy_documents(target, documents)
    return Copied(rows, time.monotonic() - started, len(documents))


async def _copy_documents(target: "asyncpg.Connection", documents: Mapping[str, str]) -> None:
    """The home's documents as rows (gateway.storage.documents), the change counter moved on."""
    if not documents:
        return
    now = time.time()
    await target.executemany("INSERT INTO documents (name, body, updated_at) VALUES ($1, $2, $3) ON CONFLICT (name)"
                             " DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at",
                             [(name, text, now) for name, text in sorted(documents.items())])
    await target.execute("INSERT INTO document_changes (id, changes) VALUES (1, 1)"
                         " ON CONFLICT (id) DO UPDATE SET changes = document_changes.changes + 1")
