"""How a platform that cannot connect is tried again (`gateway.connections`), with plain adapters in
place of a platform: the pauses, the log lines at growing intervals, a refusal tried once."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.connections import Connections, pause_before
from platforms.base import ChatRef, PlatformAdapter, PlatformRefused, Reply


class Flaky(PlatformAdapter):
    """Fails its first `failures` tries (refused for good when `refused`), then connects."""

    name = "flaky"

    def __init__(self, failures: int, *, refused: bool = False) -> None:
        super().__init__()
        self.failures, self.refused, self.tries, self.stops = failures, refused, 0, 0

    async def _start(self) -> None:
        self.tries += 1
        if self.refused:
            raise PlatformRefused("the token was revoked: set platforms.flaky.token")
        if self.tries <= self.failures:
            raise OSError(111, "Connection refused")

    async def _stop(self) -> None:
        self.stops += 1

    async def send(self, chat: ChatRef, reply: Reply) -> str:
        return "1"

    async def edit(self, chat: ChatRef, message_id: str, reply: Reply) -> None:
        return None


def test_the_pause_doubles_to_five_minutes_with_capped_jitter():
    for tries, base in ((1, 1.0), (2, 2.0), (5, 16.0), (9, 256.0), (10, 300.0), (1000, 300.0)):
        for _ in range(50):
            assert base <= pause_before(tries) <= base + min(base / 4, 10.0)


async def test_a_platform_is_tried_again_and_told_of_at_growing_intervals(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG, logger="gateway.connections")
    flaky = Flaky(failures=9)
    up = asyncio.Event()

    async def connected(adapter: PlatformAdapter) -> None:
        up.set()

    connections = Connections([flaky], connected, first_pause=0.001, max_pause=0.004)
    connections.begin()
    assert await connections.first_tries(5) == []
    assert flaky.health.state == "down"
    assert flaky.health.error == ("ConnectionRefusedError: [Errno 111] Connection refused — check platforms.flaky "
                                  "or the network")
    await asyncio.wait_for(up.wait(), 10)
    assert flaky.tries == 10 and flaky.ready and flaky.stops == 9  # each failed try released what it opened
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w.split(":")[0] for w in warnings] == [
        "flaky cannot connect", "flaky still cannot connect after 2 tries in 0s",
        "flaky still cannot connect after 4 tries in 0s", "flaky still cannot connect after 8 tries in 0s"]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos == ["flaky is up, after 10 tries in 0s"]
    await connections.stop()


async def test_a_refusal_is_tried_once_and_said_once(caplog: pytest.LogCaptureFixture):
    refused = Flaky(failures=0, refused=True)
    failed: list[str] = []
    refused.set_callback(lambda event: None,  # type: ignore[arg-type,return-value]
                         lambda adapter, reason: failed.append(reason))
    connections = Connections([refused], lambda adapter: asyncio.sleep(0), first_pause=0.001, max_pause=0.001)
    connections.begin()
    assert await connections.first_tries(5) == []
    await asyncio.sleep(0.05)  # (many pauses long: no second try comes)
    assert refused.tries == 1 and refused.health.state == "failed"
    assert failed == ["the token was revoked: set platforms.flaky.token"]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "flaky: the token was revoked: set platforms.flaky.token"]
    await connections.stop()


async def test_stopping_cuts_a_try_short_and_releases_it():
    class Hanging(Flaky):
        async def _start(self) -> None:
            self.tries += 1
            await asyncio.Event().wait()  # (a connection that never answers)

    hanging = Hanging(failures=0)
    connections = Connections([hanging], lambda adapter: asyncio.sleep(0))
    connections.begin()
    assert await connections.first_tries(0.05) == ["flaky"]
    await connections.stop()
    assert hanging.tries == 1 and hanging.stops == 1 and hanging.health.state == "stopped" and not hanging.running
