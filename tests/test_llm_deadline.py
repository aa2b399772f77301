"""A turn does not wait on the model for ever: a model that stalls (no answer, or a stream that stops) is
given up after `llm.turn_timeout_seconds` and the person is told so; an answer that keeps streaming is
not cut off; a `Retry-After` is honoured up to a bound, never retried earlier, and one longer than the
turn would wait is said at once. Through the real gateway, the web chat and the fake LLM."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Tab, start_gateway


def _address(llm: FakeLLM) -> str:
    return f"127.0.0.1:{llm.port}"


@pytest.mark.parametrize("stall", [Reply.hang(), Reply.text("never finished", chunk_size=4, chunk_delay=3600)],
                         ids=["no-answer", "stream-stops"])
async def test_a_model_that_stalls_is_given_up_at_the_deadline_and_the_next_message_is_answered(
        tmp_path, llm: FakeLLM, stall: Reply):
    llm.script(stall)  # the per-read timeout (llm.timeout_seconds) stays at its 120 s
    runner = await start_gateway(tmp_path, llm.base_url, llm__turn_timeout_seconds=2)
    try:
        async with Tab(runner) as tab:
            await tab.say("are you there?")
            told = await tab.reply(timeout=30)
            assert "The language model did not answer in time" in told and "2 s" in told, told
            assert _address(llm) not in told and "127.0.0.1" not in told
            assert len(llm.requests) == 1  # given up, not asked again after the deadline
            await tab.say("and now?")
            assert await tab.reply(2) == "echo: and now?"
        [row] = await runner.parts.store.fetch("SELECT state FROM inbox WHERE payload LIKE '%are you there%'")
        assert row["state"] == "done"
    finally:
        await runner.stop()


async def test_an_answer_that_keeps_streaming_is_not_cut_off(tmp_path, llm: FakeLLM):
    answer = "slow, but it keeps coming, piece by piece"
    llm.script(Reply.text(answer, chunk_size=4, chunk_delay=0.25))  # 11 pieces: far longer than 1 s in all
    runner = await start_gateway(tmp_path, llm.base_url, llm__turn_timeout_seconds=1)
    try:
        async with Tab(runner) as tab:
            await tab.say("take your time")
            assert await tab.reply(timeout=30) == answer
    finally:
        await runner.stop()


@pytest.mark.parametrize("settings", [{}, {"llm__turn_timeout_seconds": 3}], ids=["default-deadline", "3s-deadline"])
async def test_a_retry_after_of_two_minutes_is_said_at_once_not_retried_early(tmp_path, llm: FakeLLM,
                                                                              settings: dict[str, Any]):
    llm.script(Reply.error(429, retry_after=120))
    runner = await start_gateway(tmp_path, llm.base_url, **settings)
    try:
        async with Tab(runner) as tab:
            await tab.say("hello?")
            told = await tab.reply(timeout=30)
            assert told.startswith("The language model is rate-limiting requests (HTTP 429) and asks to wait "
                                   "2 minutes before the next request"), told
            assert "Please try again in 2 minutes." in told and "127.0.0.1" not in told
            assert len(llm.requests) == 1  # no retry before the two minutes, and none after the answer
            await tab.say("later")
            assert await tab.reply(2) == "echo: later"
    finally:
        await runner.stop()


async def test_a_retry_after_beyond_the_turn_deadline_is_said_at_once(tmp_path, llm: FakeLLM):
    llm.script(Reply.error(503, retry_after=10))  # within the bound of a minute, beyond this turn's 2 s
    runner = await start_gateway(tmp_path, llm.base_url, llm__turn_timeout_seconds=2)
    try:
        async with Tab(runner) as tab:
            await tab.say("hello?")
            told = await tab.reply(timeout=30)
            assert told.startswith("The language model is unavailable (HTTP 503) and asks to wait 10 s"), told
            assert len(llm.requests) == 1
    finally:
        await runner.stop()


async def test_a_short_retry_after_is_waited_out_in_full(tmp_path, llm: FakeLLM):
    loop = asyncio.get_running_loop()
    seen: list[float] = []

    def respond(body: dict[str, Any]) -> Reply | None:
        seen.append(loop.time())
        return Reply.error(429, retry_after=1) if len(seen) == 1 else None

    llm.responder = respond
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            await tab.say("hi")
            assert await tab.reply(timeout=30) == "echo: hi"
        assert len(seen) == 2 and seen[1] - seen[0] >= 1.0  # asked again, and not before the second it asked for
    finally:
        await runner.stop()


def test_the_retry_pause_policy():
    from agent.llm import MAX_RETRY_AFTER, retry_pause  # (here: the end-to-end tests run on older code too)

    assert retry_pause(1, 5.0, None) == 5.0  # what the endpoint asks
    assert retry_pause(3, 0.0, None) == 0.0
    assert retry_pause(1, MAX_RETRY_AFTER + 1, None) is None  # longer than we wait: say so, no early retry
    assert retry_pause(1, 120.0, 1000.0) is None
    assert retry_pause(1, 5.0, 4.0) is None  # past the deadline: no point waiting
    assert retry_pause(1, 5.0, 6.0) == 5.0
    for attempt in range(1, 8):  # no retry-after (or a nonsensical one): backoff, 0.5 s doubling to 8 s, jittered
        for asked in (None, -3.0):
            pause = retry_pause(attempt, asked, None)
            assert pause is not None and 0.75 * min(0.5 * 2 ** (attempt - 1), 8.0) <= pause <= 8.0
    assert retry_pause(5, None, 1.0) is None  # a backoff that would outlast the deadline
