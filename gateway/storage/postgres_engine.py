"""PostgreSQL's engine: asyncpg (the `postgres` extra; imported only when `storage.url` names PostgreSQL).

The SQL text is the groups' own (gateway.storage.connection): its `?` and `?N` arguments become asyncpg's
`$N` (once per text: `numbered` is cached). The group commit (gateway.storage.database) drives one
connection per process, as on SQLite; several instances each have their own, and PostgreSQL keeps their
transactions apart. A conflict between them that passes — a deadlock PostgreSQL broke, a serialization
failure, a lock not available — is `busy`: the batch is tried again after a pause. A lost connection (the
server restarted, the network cut) is the storage's fault: the callers of that batch hear a
`StorageError`, nothing is acknowledged, and the next write connects again.

The schema is created, or upgraded, at open by one instance at a time: under an advisory lock held for
the while (the others wait for it), the version in `chatgate_schema` is read, and
`migrations/postgres/NNN_*.sql` after it applied, each in one transaction. The numbers are SQLite's:
`001_schema.sql` is SQLite's version 20 in one script.
"""

from __future__ import annotations

import asyncio
import functools
import re
from importlib import resources
from typing import TYPE_CHECKING, Any, Awaitable, Iterable, Sequence
from urllib.parse import urlsplit

from gateway.storage import postgres_dialect
from gateway.storage.database import LOCK_WAIT, Database, SchemaError, StorageError

if TYPE_CHECKING:
    import asyncpg

CONNECT_TIMEOUT = 10.0  # seconds to reach the server
SCHEMA_LOCK = 0x63686174676174  # the advisory lock of schema changes ("chatgat")
_ARGUMENT = re.compile(r"\?(\d*)")
_BUSY_STATES = frozenset({"40P01", "40001", "55P03"})  # deadlock, serialization failure, lock not available
_FAULT_CLASSES = ("08", "53", "57", "58", "XX")  # connection, resources, operator intervention, system, internal


@functools.lru_cache(maxsize=4096)
def numbered(sql: str) -> str:
    """The text with its `?` arguments numbered as asyncpg takes them (`?N` keeps its number)."""
    count = 0

    def number(match: re.Match[str]) -> str:
        nonlocal count
        if match.group(1):
            return "$" + match.group(1)
        count += 1
        return f"${count}"
    return _ARGUMENT.sub(number, sql)


def _rows_changed(status: str) -> int:
    """asyncpg's status ("UPDATE 3", "INSERT 0 1", "SELECT 2") as a count (-1 when it has none)."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else -1


class PgConnection:
    __slots__ = ("raw",)
    dialect = postgres_dialect

    def __init__(self, raw: "asyncpg.Connection") -> None:
        self.raw = raw

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        return await self.raw.fetch(numbered(sql), *args)

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        return await self.raw.fetchrow(numbered(sql), *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self.raw.fetchval(numbered(sql), *args)

    async def execute(self, sql: str, *args: Any) -> int:
        return _rows_changed(await self.raw.execute(numbered(sql), *args))

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        await self.raw.executemany(numbered(sql), list(rows))

    async def pipelined(self, *calls: Awaitable[Any]) -> list[Any]:
        """One statement at a time (asyncpg runs one per connection), in the order given. The first error
        ends it: the transaction is aborted then, so the statements after it are dropped unstarted."""
        results = []
        for index, call in enumerate(calls):
            try:
                results.append(await call)
            except BaseException:
                for unstarted in calls[index + 1:]:
                    if asyncio.iscoroutine(unstarted):
                        unstarted.close()  # (a coroutine never awaited would warn)
                raise
        return results

    async def begin(self) -> None:
        await self.raw.execute("BEGIN")

    async def commit(self) -> None:
        await self.raw.execute("COMMIT")

    async def rollback(self) -> None:
        """Roll back what is open. A closed connection (lost, or closed under a unit) is an error, as SQLite's
        is: it leaves the group commit, which opens another, instead of the batch being tried again unit
        by unit on a connection that can run nothing."""
        if self.raw.is_closed():
            raise StorageError("the connection to PostgreSQL is closed")
        if self.raw.is_in_transaction():
            await self.raw.execute("ROLLBACK")

    async def close(self) -> None:
        await self.raw.close(timeout=CONNECT_TIMEOUT)

    def changes(self) -> None:
        return None


def where(url: str) -> str:
    """The address without its password, to name it in a message."""
    parts = urlsplit(url)
    host = parts.hostname or "the local socket"
    try:
        port = parts.port
    except ValueError:  # (not a number: the rest of a password written with a raw `/`, `?` or `#`)
        port = -1
    if port == -1 or "@" in parts.netloc.partition("@")[2] or "@" in url.partition(parts.netloc)[2]:
        return "the PostgreSQL database of that address"  # (a password's raw `@ / ? #`: its parts would show)
    return f"PostgreSQL at {host}{f':{port}' if port else ''}{parts.path}"


class PostgresEngine:
    dialect = postgres_dialect
    shared = True

    def __init__(self, url: str, instance: str | None = None) -> None:
        self.url = url
        self.instance = instance  # the gateway instance the connection serves (the dialect's INSTANCE), or None

    async def connect(self) -> PgConnection:
        import asyncpg

        try:
            settings = {"chatgate.instance": self.instance} if self.instance else None
            raw = await asyncpg.connect(self.url, timeout=CONNECT_TIMEOUT, server_settings=settings)
        except ValueError as exc:  # the address as asyncpg reads it: its words may quote a part of the password
            raise StorageError(f"cannot reach {where(self.url)}: storage.url cannot be read as a PostgreSQL address "
                               f"({type(exc).__name__}; write a password's @ / ? # as %40 %2F %3F %23)") from None
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            reason = str(exc).replace(urlsplit(self.url).password or "\0", "***")
            failed = StorageError(f"cannot reach {where(self.url)}: {type(exc).__name__}: {reason}")
            raise failed from None
        return PgConnection(raw)

    def busy(self, exc: BaseException) -> bool:
        return getattr(exc, "sqlstate", None) in _BUSY_STATES

    def fault(self, exc: BaseException) -> bool:
        import asyncpg

        state = getattr(exc, "sqlstate", None)
        if isinstance(state, str):
            return state in _BUSY_STATES or state.startswith(_FAULT_CLASSES)
        return isinstance(exc, (OSError, TimeoutError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError))

    def describe_busy(self) -> str:
        return "the database refused the write for a conflict with another writer (a lock or a deadlock)"


def migrations() -> list[tuple[int, str]]:
    """PostgreSQL's numbered migrations: (number, SQL), in order."""
    folder = resources.files("gateway.storage") / "migrations" / "postgres"
    return sorted((int(f.name.split("_", 1)[0]), f.read_text(encoding="utf-8"))
                  for f in folder.iterdir() if f.name.endswith(".sql"))


def _version_of(number: int) -> int:
    """The schema version a PostgreSQL migration brings (001 is SQLite's 20 in one script)."""
    return 20 if number == 1 else number


def schema_version() -> int:
    """The schema version this chatgate's PostgreSQL migrations end at (SQLite's latest too)."""
    return _version_of(migrations()[-1][0])


async def migrate(raw: "asyncpg.Connection", url: str, *, upgrade: bool = True) -> None:
    """Create or upgrade the schema, one instance at a time (see the module doc)."""
    found = migrations()
    latest = schema_version()
    await raw.execute("SELECT pg_advisory_lock($1)", SCHEMA_LOCK)
    try:
        version = 0
        if await raw.fetchval("SELECT to_regclass('chatgate_schema')") is not None:
            version = int(await raw.fetchval("SELECT version FROM chatgate_schema") or 0)
        if version > latest:
            raise SchemaError(f"{where(url)} was made by a newer chatgate (schema version {version}; this one knows "
                              f"up to {latest}): run that version")
        todo = [(number, sql) for number, sql in found if _version_of(number) > version]
        if todo and not upgrade:
            raise SchemaError(f"{where(url)} is at schema version {version} and this chatgate needs {latest}: "
                              "start the daemon of this version (it upgrades the database)")
        if version == 0 and await raw.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"):
            raise SchemaError(f"{where(url)} holds tables that are not chatgate's: name an empty database")
        for number, sql in todo:
            async with raw.transaction():
                await raw.execute(sql)
                await raw.execute("UPDATE chatgate_schema SET version = $1", _version_of(number))
    finally:
        await raw.execute("SELECT pg_advisory_unlock($1)", SCHEMA_LOCK)


async def open_postgres(url: str, *, lock_wait: float = LOCK_WAIT, upgrade: bool = True,
                        instance: str | None = None) -> Database:
    """Connect, create or upgrade the schema, and run the group commit over that connection (`instance`: the
    gateway instance it serves)."""
    engine = PostgresEngine(url, instance)
    conn = await engine.connect()
    try:
        await migrate(conn.raw, url, upgrade=upgrade)
    except BaseException:
        await conn.close()
        raise
    return Database(engine, conn, lock_wait)
