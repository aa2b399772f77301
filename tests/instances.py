"""Instances for the tests where several `chatgate run` processes share one PostgreSQL database."""

from __future__ import annotations

import signal
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import aiohttp
import pytest

from tests import harness
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram
from tests.harness import Daemon, eventually, free_port, start_gateway, telegram_settings
from tests.pg import pg_url  # noqa: F401  (a fixture)


class Instance(Daemon):
    """A daemon of its own home and HTTP port, on the shared database."""

    def __init__(self, home: Path, llm: FakeLLM, tg: FakeTelegram, url: str, **more: Any) -> None:
        self.port = free_port()
        home.mkdir(mode=0o700)
        super().__init__(home, llm, telegram_settings(tg, storage__url=url, http__port=self.port, **more))

    async def telegram_state(self) -> str | None:
        """Its Telegram's state by its /readyz (None: it does not answer)."""
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as http, \
                    http.get(f"http://127.0.0.1:{self.port}/readyz") as response:
                body = await response.json()
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return None
        state = body["platforms"]["telegram"]["state"]
        if state in ("ready", "standby"):
            assert response.status == 200, body  # ready, the standby too: its part is to wait
        return state

    async def until(self, state: str, timeout: float = 30.0) -> None:
        async def there() -> bool:
            return await self.telegram_state() == state
        await eventually(there, timeout, f"telegram {state} on the instance on port {self.port}")


def instance_settings(tmp_path: Path, tg: FakeTelegram, **more: Any) -> dict[str, Any]:
    """An in-process instance's settings: Telegram by webhook (a test posts each update to the instance a load
    balancer would pick), the workspace one folder both instances name (the operator's shared volume)."""
    workspace = tmp_path / "ws"
    (workspace / "victim").mkdir(parents=True, exist_ok=True)
    return telegram_settings(tg, platforms__telegram__mode="webhook", agent__workspace=workspace,
                             platforms__telegram__webhook_url="http://placeholder/telegram/webhook", **more)


async def post_update(tg: FakeTelegram, runner: Any, update: dict[str, Any]) -> None:
    tg.webhook_url = f"http://127.0.0.1:{runner.http.port}/telegram/webhook"
    assert await tg.push_webhook(update) == 200


@pytest.fixture
def shared_database(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: F811
    """Every gateway of the test on the test's PostgreSQL database."""
    monkeypatch.setattr(harness, "STORAGE_URL", pg_url)  # every gateway of the test on it
    return pg_url


@asynccontextmanager
async def poller_and_standby(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, url: str,
                             **more: Any) -> AsyncIterator[tuple[Instance, Instance]]:
    """Two `chatgate run` instances on the database `url`: the first up (polling Telegram) before the second
    starts (standing by). Both end with the block, a frozen one (SIGSTOP) too."""
    first, second = (Instance(tmp_path / name, llm, tg, url, **more) for name in ("a", "b"))
    try:
        first.start()
        await first.until("ready")
        second.start()
        await second.until("standby")
        yield first, second
    finally:
        for instance in (first, second):
            if instance.process is not None and instance.process.poll() is None:
                instance.process.send_signal(signal.SIGCONT)  # (one a test froze)
            instance.close()


@asynccontextmanager
async def two_instances(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram,
                        **more: Any) -> AsyncIterator[tuple[Any, Any]]:
    """Instances A and B in this process (`instance_settings` and `more`), on the test's database; stopped with
    the block, B first."""
    settings = instance_settings(tmp_path, tg, **more)
    first = await start_gateway(tmp_path / "a", llm.base_url, **settings)
    try:
        second = await start_gateway(tmp_path / "b", llm.base_url, **settings)
        try:
            yield first, second
        finally:
            await second.stop()
    finally:
        await first.stop()
