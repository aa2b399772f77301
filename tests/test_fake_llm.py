"""The fake LLM server, exercised with the real ``openai.AsyncOpenAI`` client."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
import pytest

from tests.fakes.llm import FakeLLM, Reply

USER = [{"role": "user", "content": "ping"}]


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as server:
        yield server


Connect = Callable[..., openai.AsyncOpenAI]


@pytest.fixture
async def connect() -> AsyncIterator[Connect]:
    """Make real OpenAI clients for a fake (``connect(llm, max_retries=0)``); close them after."""
    opened: list[openai.AsyncOpenAI] = []

    def make(llm: FakeLLM, max_retries: int = 0) -> openai.AsyncOpenAI:
        c = openai.AsyncOpenAI(
            base_url=llm.base_url, api_key="x", max_retries=max_retries, timeout=10
        )
        opened.append(c)
        return c

    yield make
    for c in opened:
        await c.close()


async def stream_text(
    c: openai.AsyncOpenAI, content: str = "ping", **kw: Any
) -> tuple[str, list[Any]]:
    """Stream one completion; return the joined text and the raw chunks."""
    stream = await c.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": content}], stream=True, **kw
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    return text, chunks


async def stream_tool_calls(
    c: openai.AsyncOpenAI,
) -> tuple[dict[int, dict[str, str]], str | None, int]:
    """Accumulate streamed tool calls the robust way: set id/name, append arguments.

    Returns the calls by index, the finish reason and how many deltas carried a name.
    """
    stream = await c.chat.completions.create(model="fake-model", messages=USER, stream=True)
    calls: dict[int, dict[str, str]] = {}
    finish = None
    named = 0
    async for chunk in stream:
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for tc in choice.delta.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            if tc.id:
                call["id"] = tc.id
            if tc.function and tc.function.name:
                call["name"] = tc.function.name
                named += 1
            if tc.function and tc.function.arguments:
                call["arguments"] += tc.function.arguments
    return calls, finish, named


async def test_default_reply_echoes_last_user_message(llm: FakeLLM, connect: Connect) -> None:
    text, chunks = await stream_text(connect(llm), "hello there, fake model")
    assert text == "echo: hello there, fake model"
    assert len(chunks) > 3  # really streamed in pieces
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[0].object == "chat.completion.chunk" and chunks[0].model == "fake-model"


async def test_scripted_text_streams_in_chunks_and_usage(llm: FakeLLM, connect: Connect) -> None:
    llm.script(Reply.text("abcdefghij", chunk_size=3, chunk_delay=0.01))
    text, chunks = await stream_text(connect(llm), stream_options={"include_usage": True})
    assert text == "abcdefghij"
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    assert [d.content for d in deltas if d.content] == ["abc", "def", "ghi", "j"]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    # without the next reply scripted, the default echo comes back
    assert (await stream_text(connect(llm), "again"))[0] == "echo: again"


@pytest.mark.parametrize("repeat", [False, True])
async def test_tool_call_deltas_accumulate(repeat: bool, connect: Connect) -> None:
    async with FakeLLM(repeat_tool_name=repeat) as llm:
        calls_spec = [("current_time", {"tz": "UTC"}), ("session_search", '{"query": "x"}')]
        llm.script(Reply.tool_calls(calls_spec))
        calls, finish, named = await stream_tool_calls(connect(llm))
    assert finish == "tool_calls"
    assert named == (8 if repeat else 2)  # first delta + 3 argument fragments per call
    assert [c["name"] for c in calls.values()] == ["current_time", "session_search"]
    assert json.loads(calls[0]["arguments"]) == {"tz": "UTC"}
    assert calls[1]["arguments"] == '{"query": "x"}'
    assert calls[0]["id"].startswith("call_") and calls[0]["id"] != calls[1]["id"]


async def test_tool_call_arguments_arrive_in_fragments(llm: FakeLLM, connect: Connect) -> None:
    llm.script(Reply.tool_calls([("broken", '{"query": ')]))
    stream = await connect(llm).chat.completions.create(model="m", messages=USER, stream=True)
    deltas = [tc async for ch in stream for tc in (ch.choices[0].delta.tool_calls or [])]
    assert deltas[0].function.name == "broken" and deltas[0].function.arguments == ""
    fragments = [d.function.arguments for d in deltas[1:]]
    assert len(fragments) > 1 and all(d.function.name is None for d in deltas[1:])
    assert "".join(fragments) == '{"query": '  # malformed JSON is passed through verbatim


async def test_429_with_retry_after_is_retried_by_the_client(
    llm: FakeLLM, connect: Connect
) -> None:
    llm.script(Reply.error(429, retry_after=1), Reply.text("after the wait"))
    started = time.monotonic()
    text, _ = await stream_text(connect(llm, max_retries=2))
    assert text == "after the wait"
    assert len(llm.requests) == 2
    # the client's own backoff is at most 0.5 s here, so this proves retry-after was honoured
    assert time.monotonic() - started >= 0.9


async def test_503_without_retries_raises_status_error(llm: FakeLLM, connect: Connect) -> None:
    llm.script(Reply.error(503, message="overloaded"))
    with pytest.raises(openai.APIStatusError) as info:
        await stream_text(connect(llm, max_retries=0))
    assert info.value.status_code == 503
    expected = {"message": "overloaded", "type": "server_error", "param": None, "code": "503"}
    assert info.value.body == expected
    assert len(llm.requests) == 1  # errored requests are recorded too


async def test_disconnect_mid_stream_raises_in_client(llm: FakeLLM, connect: Connect) -> None:
    llm.script(Reply.disconnect(after_chunks=1, content="partial answer"))
    stream = await connect(llm).chat.completions.create(model="m", messages=USER, stream=True)
    received: list[str] = []
    with pytest.raises(openai.APIConnectionError) as info:
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")
    assert "".join(received) == "partial "  # role chunk + one content chunk, then the cut
    assert "incomplete chunked read" in str(info.value.__cause__)  # a cut, not a clean end


async def test_non_stream_completion(llm: FakeLLM, connect: Connect) -> None:
    llm.script(Reply.text("whole answer"), Reply.tool_calls([("current_time", {"tz": "UTC"})]))
    c = connect(llm)
    first = await c.chat.completions.create(model="fake-model", messages=USER)
    assert first.choices[0].message.content == "whole answer"
    assert first.choices[0].finish_reason == "stop" and first.usage is not None
    second = await c.chat.completions.create(model="fake-model", messages=USER)
    call = second.choices[0].message.tool_calls[0]
    assert call.function.name == "current_time"
    assert json.loads(call.function.arguments) == {"tz": "UTC"}
    assert second.choices[0].finish_reason == "tool_calls"


async def test_requests_are_recorded_and_responder_used(llm: FakeLLM, connect: Connect) -> None:
    llm.responder = lambda body: Reply.text("big one") if body["model"] == "big" else None
    c = connect(llm)
    first = await c.chat.completions.create(model="big", messages=USER)
    second = await c.chat.completions.create(model="small", messages=USER)
    assert first.choices[0].message.content == "big one"
    assert second.choices[0].message.content == "echo: ping"
    await llm.wait_for_requests(2, timeout=1)
    assert [r["model"] for r in llm.requests] == ["big", "small"]
    assert llm.requests[0]["messages"] == USER


async def test_wait_for_requests_wakes_up_and_times_out(llm: FakeLLM, connect: Connect) -> None:
    waiter = asyncio.create_task(llm.wait_for_requests(1, timeout=5))
    await asyncio.sleep(0)
    assert not waiter.done()
    await connect(llm).chat.completions.create(model="m", messages=USER)
    assert len(await waiter) == 1
    with pytest.raises(TimeoutError, match="expected 3 chat request"):
        await llm.wait_for_requests(3, timeout=0.1)


async def test_hang_is_cancellable_and_stop_does_not_block(connect: Connect) -> None:
    llm = FakeLLM()
    await llm.start()
    llm.script(Reply.hang(), Reply.hang())
    c = connect(llm)
    first = asyncio.create_task(c.chat.completions.create(model="m", messages=USER, stream=True))
    second = asyncio.create_task(c.chat.completions.create(model="m", messages=USER))
    await llm.wait_for_requests(2, timeout=2)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(llm.stop(), 1.0)  # stopping does not wait for the open stream
    with pytest.raises(openai.APIConnectionError):
        await second


async def test_latency_applies_to_default_replies_concurrently(connect: Connect) -> None:
    async with FakeLLM(latency=0.3) as llm:
        c = connect(llm)
        started = time.monotonic()
        # the sleeps overlap: 20 one after another would take 6 s
        texts = await asyncio.wait_for(asyncio.gather(*(stream_text(c, f"m{i}") for i in range(20))), 3.0)
        elapsed = time.monotonic() - started
    assert sorted(t for t, _ in texts) == sorted(f"echo: m{i}" for i in range(20))
    assert elapsed >= 0.3


async def test_models_list(llm: FakeLLM, connect: Connect) -> None:
    async with FakeLLM(models=["qwen3-8b"]) as other:
        ids = [m.id async for m in connect(other).models.list()]
    assert ids == ["fake-model", "qwen3-8b"]
    assert [m.id async for m in connect(llm).models.list()] == ["fake-model"]


async def test_an_endpoint_that_refuses_stream_options_is_asked_without_it(llm: FakeLLM) -> None:
    from agent.llm import LLMClient, LLMSettings

    llm.script(Reply.error(400, message="Unrecognized request argument supplied: stream_options"),
               Reply.text("hello"), Reply.text("again"))
    client = LLMClient(LLMSettings(model="m", base_url=llm.base_url, api_key="k", max_retries=0))
    try:
        first = await client.complete([{"role": "user", "content": "hi"}])
        second = await client.complete([{"role": "user", "content": "hi"}])
    finally:
        await client.aclose()
    assert (first.content, second.content) == ("hello", "again")
    assert "stream_options" in llm.requests[0] and "stream_options" not in llm.requests[1]
    assert "stream_options" not in llm.requests[2]  # remembered
