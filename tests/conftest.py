from __future__ import annotations

import logging
from typing import AsyncIterator, Iterator

import pytest

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
