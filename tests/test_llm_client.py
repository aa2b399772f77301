"""The LLM client against the fake endpoint: retries, honest errors, and streams of any shape."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from agent.llm import Endpoints, LLMClient, LLMError, LLMSettings
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import free_port

USER = [{"role": "user", "content": "hi"}]


async def ask(settings: LLMSettings, **kw) -> tuple[LLMClient, object]:
    client = LLMClient(settings)
    try:
        return client, await client.complete(USER, **kw)
    finally:
        await client.aclose()


async def test_the_key_goes_in_the_header_and_the_text_streams_to_the_sink(llm: FakeLLM):
    llm.script(Reply.text("one two three", chunk_size=4))
    seen: list[str] = []
    _, done = await ask(LLMSettings(model="m", base_url=llm.base_url, api_key="sk-test"), on_text=seen.append)
    assert done.content == "one two three" and "".join(seen) == "one two three" and len(seen) > 1
    assert llm.authorizations == ["Bearer sk-test"]
    assert llm.requests[0]["model"] == "m" and llm.requests[0]["stream"] is True


async def test_a_rate_limit_is_waited_out_and_a_refused_key_is_not_retried(llm: FakeLLM):
    llm.script(Reply.error(429, retry_after=0), Reply.text("fine"))
    _, done = await ask(LLMSettings(model="m", base_url=llm.base_url, max_retries=2))
    assert done.content == "fine" and len(llm.requests) == 2
    llm.script(Reply.error(401, message="bad key"))
    with pytest.raises(LLMError) as info:
        await ask(LLMSettings(model="m", base_url=llm.base_url, max_retries=3))
    assert "refused the API key (HTTP 401)" in info.value.user_message and len(llm.requests) == 3


async def test_an_endpoint_nobody_listens_on_is_an_honest_error_not_a_hang():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(LLMError) as info:
        await ask(LLMSettings(model="m", base_url=url, max_retries=1))
    assert info.value.user_message == "I could not reach the model endpoint. Is it running? Check llm.base_url."
    assert "127.0.0.1" not in info.value.user_message  # the address is not for a chat (it may hold credentials)


async def test_an_endpoint_that_never_answers_times_out(llm: FakeLLM):
    llm.script(Reply.hang())
    with pytest.raises(LLMError) as info:
        await ask(LLMSettings(model="m", base_url=llm.base_url, max_retries=0, timeout=0.3))
    assert "did not answer within" in info.value.user_message


async def test_a_tool_call_far_longer_than_a_line_buffer_arrives_whole(llm: FakeLLM):
    content = "x" * 300_000  # one SSE line of ~300 KB
    llm.script(Reply.tool_calls([("write_file", {"path": "big.txt", "content": content})]))
    _, done = await ask(LLMSettings(model="m", base_url=llm.base_url))
    [call] = done.tool_calls
    assert call.name == "write_file" and json.loads(call.arguments)["content"] == content


async def test_a_stream_cut_before_it_finished_is_asked_again(llm: FakeLLM):
    llm.script(Reply.disconnect(after_chunks=2), Reply.text("whole answer"))
    restarts: list[bool] = []
    _, done = await ask(LLMSettings(model="m", base_url=llm.base_url), on_restart=lambda: restarts.append(True))
    assert done.content == "whole answer" and restarts == [True] and len(llm.requests) == 2


async def test_the_model_listing(llm: FakeLLM):
    async with FakeLLM(models=["qwen3-8b"]) as other:
        client = LLMClient(LLMSettings(model="m", base_url=other.base_url))
        try:
            assert await client.models() == ["fake-model", "qwen3-8b"]
            assert await client.probe() is None
        finally:
            await client.aclose()
    client = LLMClient(LLMSettings(model="m", base_url=f"http://127.0.0.1:{free_port()}/v1"))
    try:
        assert "could not reach" in (await client.probe() or "")
    finally:
        await client.aclose()


async def test_cancelling_a_turn_closes_its_stream(llm: FakeLLM):
    llm.script(Reply.hang())
    client = LLMClient(LLMSettings(model="m", base_url=llm.base_url))
    try:
        turn = asyncio.create_task(client.complete(USER))
        await llm.wait_for_requests(1)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
    finally:
        await client.aclose()


async def test_the_context_window_is_read_from_the_model_listing(llm: FakeLLM):
    llm.models.append("big")
    llm.context_lengths["big"] = 200_000
    for model, expected in (("big", 200_000), ("fake-model", None)):  # (a model the listing says nothing of)
        client = LLMClient(LLMSettings(model=model, base_url=llm.base_url))
        try:
            assert await client.context_window() == expected
        finally:
            await client.aclose()
    down = LLMClient(LLMSettings(model="big", base_url=f"http://127.0.0.1:{free_port()}/v1"))
    try:
        assert await down.context_window() is None  # an endpoint that cannot be asked: the default applies
    finally:
        await down.aclose()


async def test_one_sdk_client_per_endpoint_shared_by_its_models_and_closed_together(llm: FakeLLM):
    endpoints = Endpoints()
    main = LLMClient(LLMSettings(model="main", base_url=llm.base_url, api_key="k"), endpoints)
    aux = LLMClient(LLMSettings(model="small", base_url=llm.base_url, api_key="k", temperature=0.2), endpoints)
    other = LLMClient(LLMSettings(model="main", base_url=llm.base_url, api_key="other key"), endpoints)
    try:
        for client in (main, aux, other):
            assert (await client.complete(USER)).content == "echo: hi"
        shared = await endpoints.client(main.settings)
        assert shared is await endpoints.client(aux.settings)
        assert shared is not await endpoints.client(other.settings)
        assert [r["model"] for r in llm.requests] == ["main", "small", "main"]
        assert "temperature" not in llm.requests[0] and llm.requests[1]["temperature"] == 0.2
        assert llm.authorizations == ["Bearer k", "Bearer k", "Bearer other key"]
        await main.aclose()  # (the owner of shared endpoints closes them, not each client)
        assert not shared.is_closed()
    finally:
        await endpoints.aclose()
    assert shared.is_closed()


def test_the_sdk_is_not_imported_on_the_way_to_ready():
    code = "import sys, gateway.runner, gateway.cli.launch, agent.llm; print('openai' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


async def test_the_warm_up_after_ready_makes_the_models_client_so_the_first_turn_does_not(tmp_path, llm: FakeLLM,
                                                                                         monkeypatch):
    """`chatgate run` calls `warm` once it is ready (gateway/cli/daemon.py): the SDK's import and its client for
    the model's endpoint (an SSL context: about 40 ms of CPU) are then not in the first message's way."""
    from agent.llm import sdk
    from tests.harness import Tab, start_gateway

    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        await runner.warm()
        openai = await sdk()
        made: list[dict] = []
        real = openai.AsyncOpenAI
        monkeypatch.setattr(openai, "AsyncOpenAI", lambda **kw: made.append(kw) or real(**kw))
        async with Tab(runner) as tab:
            await tab.say("hello")
            assert "echo: hello" in await tab.reply(1)
        assert made == [] and len(llm.requests) == 1
    finally:
        await runner.stop()


async def test_the_request_carries_each_list_of_tools_as_it_is(llm: FakeLLM):
    """The tools' JSON is made once per list (agent.llm `_body`): another list, or the same tools in a new list,
    is sent as it is, and the rest of the request is the JSON of what was asked."""
    def tool(name: str) -> dict:
        return {"type": "function", "function": {"name": name, "description": "é ✓ \"quoted\"",
                                                  "parameters": {"type": "object", "properties": {}}}}

    first, second = [tool("one"), tool("two")], [tool("three")]
    client = LLMClient(LLMSettings(model="m", base_url=llm.base_url, temperature=0.5))
    try:
        for tools in (first, second, first, [tool("one")], None):
            await client.complete(USER, tools)
    finally:
        await client.aclose()
    assert [r.get("tools") for r in llm.requests] == [first, second, first, [tool("one")], None]
    assert all(r["messages"] == USER and r["temperature"] == 0.5 and r["stream"] is True for r in llm.requests)
