from __future__ import annotations

import logging
import os
from typing import AsyncIterator, Iterator

import pytest

from tests.engines import engine, open_store  # noqa: F401  (fixtures: storage tests on both engines)
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as fake:
        yield fake


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """`chatgate` run in-process (cli.main) installs its log handler on the root logger, bound to the
    stderr of that moment (pytest's capture, closed after the test): put the root logger back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(autouse=True)
async def _storage_engine() -> AsyncIterator[None]:
    """`CHATGATE_TEST_STORAGE=postgres`: every gateway a test starts (in-process or as `chatgate run`) keeps
    its state in a PostgreSQL database of the test's own (tests.harness.gateway_env sets `storage.url`), so
    the end-to-end tests run on the second engine too (`make test-postgres`)."""
    if os.environ.get("CHATGATE_TEST_STORAGE") != "postgres":
        yield
        return
    from tests import harness
    from tests.pg import fresh_database

    async with fresh_database() as url:
        harness.STORAGE_URL = url
        try:
            yield
        finally:
            harness.STORAGE_URL = None
