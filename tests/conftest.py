from __future__ import annotations

from typing import AsyncIterator

import pytest

from tests.fakes.llm import FakeLLM


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as fake:
        yield fake
