"""Counting the statements and transactions a store runs (the per-turn path's cost: bench/turn_cost.py, and the
test that pins it, tests/test_turn_statements.py)."""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from gateway.storage import Store
from gateway.storage.postgres_engine import PgConnection
from gateway.storage.sqlite_connection import SqliteConnection

STATEMENTS = ("fetch", "fetchrow", "fetchval", "execute", "executemany")


class Census:
    """What a store ran while counted: statements (reads and writes), and transactions (group commits: each
    batch of writes is one)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.statements = 0
        self.sql: list[str] = []
        self._batches = store.db.batches

    @property
    def transactions(self) -> int:
        return self.store.db.batches - self._batches

    def _counted(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        async def counted(conn: Any, sql: str, *args: Any) -> Any:
            self.statements += 1
            self.sql.append(" ".join(sql.split())[:120])
            return await method(conn, sql, *args)
        return counted


@contextmanager
def census(store: Store) -> Iterator[Census]:
    """Count what `store` runs inside the block (every engine's connection class, patched meanwhile)."""
    counting = Census(store)
    saved = [(cls, name, getattr(cls, name)) for cls in (SqliteConnection, PgConnection) for name in STATEMENTS]
    try:
        for cls, name, method in saved:
            setattr(cls, name, counting._counted(method))
        yield counting
    finally:
        for cls, name, method in saved:
            setattr(cls, name, method)
