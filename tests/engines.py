"""The storage groups' tests on both engines: `open_store`, parametrized over SQLite and PostgreSQL.

A test that takes `open_store` runs twice, `[sqlite]` and `[postgres]`; `await open_store()` opens a Store
on that test's database (SQLite: `tmp_path/state.db`; PostgreSQL: a database of its own, tests.pg), and
again for a reopen or a second instance on the same database; every Store it opened is closed after the
test (closing one the test closed already is nothing). `engine` names which one runs, for the few lines
that differ (an error's class). Imported by tests/conftest.py, so any test module may take them.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Protocol

import pytest

from gateway.storage import Store
from tests.pg import fresh_database

ENGINES = ["sqlite", "postgres"]


class OpenStore(Protocol):
    def __call__(self, **options: Any) -> Awaitable[Store]: ...


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Which engine the test runs on ("sqlite" or "postgres"); its id shows in the test's name."""
    return request.param


@pytest.fixture
async def open_store(engine: str, tmp_path: Path) -> AsyncIterator[OpenStore]:
    """A factory of Stores on this test's database (see the module doc); `options` go to `Store.open`."""
    opened: list[Store] = []

    async def close_all() -> None:
        for store in opened:
            await store.close()

    async def open_one(**options: Any) -> Store:
        store = await Store.open(tmp_path / "state.db", url=url, **options)
        opened.append(store)
        return store

    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(fresh_database()) if engine == "postgres" else None
        stack.push_async_callback(close_all)  # (before the database is dropped)
        yield open_one


def integrity_error(engine: str) -> type[Exception]:
    """The error a statement that breaks a key or constraint raises on `engine` (the driver's own: a
    unit's error is its caller's, not the storage's)."""
    if engine == "postgres":
        import asyncpg

        return asyncpg.IntegrityConstraintViolationError
    return sqlite3.IntegrityError
