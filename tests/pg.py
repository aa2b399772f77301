"""A database of its own on the machine's PostgreSQL, for each test that needs one (`pg_url`).

PostgreSQL 15 answers on 127.0.0.1:5432 (user postgres, trust auth: ../shared/TESTING.md). Each test gets a
new database `t_<random hex>`, dropped after it `WITH (FORCE)` (connections a failed test left open do not
keep it), so runs never see each other's rows. A server that does not answer fails the test with the
command that starts it: a PostgreSQL test skipped would pass for one that ran.

Use: `from tests.pg import pg_url` in the test module, then a test that takes `pg_url` (an URL such as
`postgresql://postgres@127.0.0.1:5432/t_3f9c...`).
"""

from __future__ import annotations

import secrets
from contextlib import asynccontextmanager
from typing import AsyncIterator

import asyncpg
import pytest

SERVER = "postgresql://postgres@127.0.0.1:5432"
START = "pg_ctlcluster --skip-systemctl-redirect 15 main start"
CONNECT_TIMEOUT = 10  # seconds to wait for an answer before failing with START (not a measure of anything)


async def _admin() -> asyncpg.Connection:
    """A connection to the server's `postgres` database, or the test failed with how to start the server."""
    try:
        return await asyncpg.connect(f"{SERVER}/postgres", timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError, asyncpg.PostgresError) as error:
        failure = f"{type(error).__name__}: {error}"
    pytest.fail(f"PostgreSQL is not answering at {SERVER} ({failure}); start it with: {START}", pytrace=False)


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """The URL of a new, empty database, dropped after the test."""
    async with fresh_database() as url:
        yield url


@asynccontextmanager
async def fresh_database() -> AsyncIterator[str]:
    """A new, empty database's URL, dropped when the block ends."""
    name = f"t_{secrets.token_hex(8)}"
    admin = await _admin()
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield f"{SERVER}/{name}"
    finally:
        admin = await _admin()
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
