from __future__ import annotations

from typing import AsyncIterator

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
