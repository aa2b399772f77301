"""The connection a unit of work receives: what every storage group writes its statements against,
whatever the engine underneath (SQLite through aiosqlite today; PostgreSQL is to be one more class
with these methods, so the groups need not know which).

The methods are named as asyncpg's and take the statement's arguments positionally (`*args`), as
asyncpg does: `fetch` (every row), `fetchrow` (the first row, or None), `fetchval` (the first row's
first column, or None), `execute` (how many rows it changed), `executemany` (one statement, many rows
of arguments), and `pipelined` (several statements that do not need each other's results, in the
order given, in as few round trips as the engine can).

The rules the SQL text keeps, so that one text serves every engine:

- Arguments are `?`, or numbered `?1`, `?2`... where one argument is used more than once; one style
  per statement. No `?` appears in the text otherwise (not in a literal, not in a comment): an engine
  that numbers its arguments (`$1`) rewrites each `?` it finds. An argument is never alone where its type
  cannot be told from the statement (`? IS NULL`: PostgreSQL refuses to prepare it): `col = coalesce(?, col)`,
  or a boolean argument computed in Python.
- A row is read by its column's name (`row["id"]`), never by position: `sqlite3.Row`, asyncpg's
  `Record` and psycopg's dict rows all take names, and the last takes nothing else. A single value is
  `fetchval`'s; an expression read from a row gets a name (`AS n`).
- An insert that may meet its row already stored says `ON CONFLICT ... DO NOTHING` (with `RETURNING`:
  no row back when it did nothing), a replace `ON CONFLICT (key) DO UPDATE`; a new row's id comes back
  with `RETURNING id`. A subquery in FROM has an alias.
- What only one engine takes (its JSON functions, full-text search, dates, PRAGMAs) is in that engine's
  dialect module, by name, never written inline in a group: a group reads it from the connection it is
  given (`db.dialect.IN_LIST`), or from its database (`self.db.dialect`).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Awaitable, Callable, Iterable, Protocol, Sequence


class Row(Protocol):
    """A result row: its columns by name (`dict(row)` gives them all)."""

    def __getitem__(self, column: str) -> Any: ...

    def keys(self) -> Iterable[str]: ...


class Connection(Protocol):
    """The database as a unit of work sees it (see the module doc). Inside `Store.write` every statement
    is part of the group commit's transaction; inside `Store.read`, of no write. `dialect`: the engine's
    module of what only it takes (gateway.storage.sqlite_dialect, gateway.storage.postgres_dialect)."""

    dialect: ModuleType

    async def fetch(self, sql: str, *args: Any) -> list[Row]: ...

    async def fetchrow(self, sql: str, *args: Any) -> Row | None: ...

    async def fetchval(self, sql: str, *args: Any) -> Any: ...

    async def execute(self, sql: str, *args: Any) -> int: ...

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    async def pipelined(self, *calls: Awaitable[Any]) -> list[Any]: ...


Work = Callable[[Connection], Awaitable[Any]]  # a unit of work: what `Store.read`, `write` and `later` run

