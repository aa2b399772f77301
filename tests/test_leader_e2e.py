"""Two `chatgate run` processes on one PostgreSQL database, polling one fake Telegram: one polls at a time
(the platform's lease), each message is answered once, and when the poller dies (kill -9) or freezes (a
process that stops answering, as on a network cut) the other takes over within 10 s; the fake, which ends
the earlier of two concurrent getUpdates with 409 as Telegram does, sees two pollers at once only for a
handover's moment."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import AsyncIterator

import pytest

from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram
from tests.harness import ANN, sent_texts, wait_for_text
from tests.instances import Instance, poller_and_standby
from tests.pg import pg_url  # noqa: F401  (the fixture)

TAKE_OVER = 10.0  # seconds the issue allows between a poller's death and the other's first poll


@pytest.fixture
async def pair(tmp_path: Path, pg_url: str, tg: FakeTelegram) -> AsyncIterator[tuple[Instance, Instance, FakeLLM]]:
    """Two instances, the first one up (polling) before the second starts (standing by)."""
    async with FakeLLM() as llm, poller_and_standby(tmp_path, llm, tg, pg_url) as (first, second):
        yield first, second, llm


def conflicts(tg: FakeTelegram, since: int = 0) -> int:
    """getUpdates ended with 409 Conflict: each one a moment two pollers overlapped."""
    return sum(1 for c in tg.calls[since:] if c.method == "getUpdates" and c.status == 409)


async def polls(tg: FakeTelegram, count: int, since: int) -> None:
    """Wait until `count` more long polls have been answered (time passing on the fake's clock, not a sleep)."""
    await tg.wait_for("getUpdates", lambda c: c.status == 200, count=count, since=since, timeout=30)


async def test_one_polls_each_message_is_answered_once_and_a_killed_poller_is_replaced(pair, tg: FakeTelegram):
    first, second, _ = pair
    tg.user_message("one")
    await wait_for_text(tg, "echo: one", timeout=20)
    await polls(tg, 4, since=len(tg.calls))  # both running: four polls go by, none ended by another poller
    assert conflicts(tg) == 0
    assert await second.telegram_state() == "standby"

    status = json.loads(second.cli("status", "--json").stdout)
    holds = {i["pid"]: i["holds"] for i in status["instances"]}
    assert holds == {first.process.pid: ["telegram"], second.process.pid: []}  # type: ignore[union-attr]

    mark, killed_at = len(tg.calls), asyncio.get_running_loop().time()
    first.kill()
    [taken_over, *_] = await tg.wait_for("getUpdates", since=mark, timeout=TAKE_OVER + 20)
    assert taken_over.time - killed_at < TAKE_OVER  # (the fake's clock: when that poll arrived)
    await second.until("ready")
    tg.user_message("two")
    await wait_for_text(tg, "echo: two", timeout=20)
    await polls(tg, 2, since=len(tg.calls))
    assert sent_texts(tg, ANN) == ["echo: one", "echo: two"]  # each answered once
    assert conflicts(tg) == 0


async def test_a_frozen_poller_is_replaced_when_its_lease_ends_and_stops_polling_when_it_wakes(pair, tg: FakeTelegram):
    """SIGSTOP: the process lives on (its pid is there) but renews nothing, as on a network cut. The other
    takes over when the lease ends; the frozen one, woken, finds its lease gone and stops at once."""
    first, second, _ = pair
    assert first.process is not None
    mark, frozen_at = len(tg.calls), asyncio.get_running_loop().time()
    first.process.send_signal(signal.SIGSTOP)
    [taken_over, *_] = await tg.wait_for("getUpdates", since=mark, timeout=TAKE_OVER + 20)
    assert taken_over.time - frozen_at < TAKE_OVER
    await second.until("ready")
    handover = conflicts(tg)  # the frozen one's open poll, ended by the new poller's
    assert handover <= 1

    woken = len(tg.calls)
    first.process.send_signal(signal.SIGCONT)
    await first.until("standby")
    await polls(tg, 4, since=len(tg.calls))
    assert conflicts(tg, since=woken) == 0  # the woken one polled no more
    assert await second.telegram_state() == "ready"
    tg.user_message("after the handover")
    await wait_for_text(tg, "echo: after the handover", timeout=20)
    assert sent_texts(tg, ANN) == ["echo: after the handover"]
