"""End to end over the web chat's real websocket, with the real openai client against the fake LLM."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone

import aiohttp

from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Tab, start_gateway


def texts_sent(request: dict) -> list[str]:
    return [m.get("content") or "" for m in request["messages"]]


async def test_conversation_with_a_tool_call(tmp_path, llm: FakeLLM):
    llm.script(Reply.tool_calls([("current_time", {"tz": "UTC"})]), Reply.text("It is **late**."))
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            await tab.say("what time is it?")
            assert await tab.reply() == "It is **late**."
        second = llm.requests[1]
        tool_msgs = [m for m in second["messages"] if m["role"] == "tool"]
        assert len(tool_msgs) == 1
        assert str(datetime.now(timezone.utc).year) in tool_msgs[0]["content"]
        assert {t["function"]["name"] for t in llm.requests[0]["tools"]} == \
            {"current_time", "session_search", "terminal", "read_file", "write_file", "patch_file", "send_file", "cron",
             "board", "memory", "skills_list", "skill_view", "skill_manage", "delegate_task"}
    finally:
        await runner.stop()


async def test_restart_mid_conversation_continues_the_session(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url)
    async with Tab(runner, chat_id="persistent-tab") as tab:
        await tab.say("my name is Ann")
        assert await tab.reply() == "echo: my name is Ann"
    await runner.stop()

    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner, chat_id="persistent-tab") as tab:
            await tab.say("what is my name?")
            assert await tab.reply() == "echo: what is my name?"
        sent = texts_sent(llm.requests[-1])
        assert "my name is Ann" in sent and "echo: my name is Ann" in sent
    finally:
        await runner.stop()


async def test_the_same_event_twice_gets_one_reply(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            first = await tab.say("hello", msg_id="same-id")
            second = await tab.say("hello", msg_id="same-id")
            assert first["duplicate"] is False and second["duplicate"] is True
            assert await tab.reply() == "echo: hello"
            await asyncio.sleep(0.3)  # nothing more may arrive
            assert tab.replies() == ["echo: hello"]
        assert len(llm.requests) == 1
    finally:
        await runner.stop()


async def test_stop_cancels_a_long_turn_and_it_is_not_replayed(tmp_path, llm: FakeLLM):
    llm.script(Reply.hang())
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            await tab.say("write a very long essay")
            await llm.wait_for_requests(1)
            await tab.say("/stop")
            assert await tab.reply() == "Stopped the running request."
            await tab.say("something else")
            assert await tab.reply(2) == "echo: something else"
        sent = texts_sent(llm.requests[-1])
        assert "write a very long essay" not in sent
        assert sent[-1] == "something else"
    finally:
        await runner.stop()


async def test_three_quick_messages_are_answered_in_order(tmp_path):
    async with FakeLLM(latency=0.2) as llm:
        runner = await start_gateway(tmp_path, llm.base_url)
        try:
            async with Tab(runner) as tab:
                for word in ("one", "two", "three"):
                    await tab.say(word)
                await tab.reply(3)
                assert tab.replies() == ["echo: one", "echo: two", "echo: three"]
            # strictly in order: each turn saw the previous turns' answers
            assert texts_sent(llm.requests[2])[1:] == ["one", "echo: one", "two", "echo: two", "three"]
        finally:
            await runner.stop()


async def test_llm_429_then_success(tmp_path, llm: FakeLLM):
    llm.script(Reply.error(429, retry_after=0))
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            await tab.say("hi")
            assert await tab.reply() == "echo: hi"
        assert len(llm.requests) == 2
    finally:
        await runner.stop()


async def test_llm_that_keeps_failing_gets_an_honest_message(tmp_path, llm: FakeLLM):
    llm.script(*[Reply.error(503) for _ in range(3)])
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            await tab.say("hi")
            text = await tab.reply()
            assert "HTTP 503" in text and "try again" in text
            await tab.say("and now?")
            assert await tab.reply(2) == "echo: and now?"
    finally:
        await runner.stop()


async def test_stream_that_breaks_midway_is_retried(tmp_path, llm: FakeLLM):
    llm.script(Reply.disconnect(after_chunks=1))
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            await tab.say("tell me")
            assert await tab.reply() == "echo: tell me"
    finally:
        await runner.stop()


async def test_malformed_tool_arguments_are_reported_to_the_model(tmp_path, llm: FakeLLM):
    llm.script(Reply.tool_calls([("session_search", '{"query": ')]), Reply.text("sorry, fixed"))
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            await tab.say("search please")
            assert await tab.reply() == "sorry, fixed"
        tool_result = [m for m in llm.requests[1]["messages"] if m["role"] == "tool"][0]["content"]
        assert "not valid JSON" in tool_result
    finally:
        await runner.stop()


async def test_shutdown_during_a_turn_delivers_the_reply_after_restart_exactly_once(tmp_path, llm: FakeLLM):
    llm.script(Reply.hang())
    runner = await start_gateway(tmp_path, llm.base_url, gateway__drain_seconds=0.3)
    async with Tab(runner, chat_id="tab-survives") as tab:
        await tab.say("important question")
        await llm.wait_for_requests(1)
        await runner.stop()
        await asyncio.sleep(0.1)
        assert tab.replies() == []

    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        await llm.wait_for_requests(2)  # the turn runs again after the restart, before any tab is open
        async with Tab(runner, chat_id="tab-survives") as tab:
            assert await tab.reply() == "echo: important question"
            await asyncio.sleep(0.3)
            assert tab.replies() == ["echo: important question"]
        assert len(llm.requests) == 2
    finally:
        await runner.stop()


async def test_reply_for_a_closed_tab_waits_in_the_outbox(tmp_path):
    async with FakeLLM(latency=0.5) as llm:
        runner = await start_gateway(tmp_path, llm.base_url)
        try:
            tab = Tab(runner, chat_id="closed-tab")
            await tab.__aenter__()
            await tab.say("answer me later")
            await tab.close()
            await llm.wait_for_requests(1)
            await asyncio.sleep(0.8)
            async with Tab(runner, chat_id="closed-tab") as again:
                assert await again.reply() == "echo: answer me later"
        finally:
            await runner.stop()


async def test_new_session_keeps_old_transcript_searchable(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            await tab.say("the secret word is pineapple")
            await tab.reply()
            await tab.say("/new")
            assert "new session" in (await tab.reply(2)).lower()
            llm.script(Reply.tool_calls([("session_search", {"query": "pineapple"})]), Reply.text("found it"))
            await tab.say("what was the word?")
            assert await tab.reply(3) == "found it"
        history = texts_sent(llm.requests[-2])
        assert "the secret word is pineapple" not in history  # a fresh session starts empty
        tool_result = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"][0]["content"]
        assert "pineapple" in tool_result
    finally:
        await runner.stop()


async def test_commands_status_help_and_unknown(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            await tab.say("/status")
            assert "State: idle" in await tab.reply()
            await tab.say("/help")
            assert "/stop" in await tab.reply(2)
            await tab.say("/frobnicate now")
            text = await tab.reply(3)
            assert text.startswith("Unknown command /frobnicate") and "/new" in text
        assert llm.requests == []
    finally:
        await runner.stop()


async def test_interrupt_policy_cancels_the_running_turn(tmp_path, llm: FakeLLM):
    llm.script(Reply.hang())
    runner = await start_gateway(tmp_path, llm.base_url, gateway__busy_policy="interrupt")
    try:
        async with Tab(runner) as tab:
            await tab.say("first, slow")
            await llm.wait_for_requests(1)
            await tab.say("second")
            assert await tab.reply() == "echo: second"
        assert "first, slow" not in texts_sent(llm.requests[1])
    finally:
        await runner.stop()


async def test_steer_policy_folds_new_messages_into_the_running_turn(tmp_path, llm: FakeLLM):
    llm.script(Reply.tool_calls([("current_time", {})], delay=0.5), Reply.text("done, with both"))
    runner = await start_gateway(tmp_path, llm.base_url, gateway__busy_policy="steer")
    try:
        async with Tab(runner) as tab:
            await tab.say("start a task")
            await llm.wait_for_requests(1)
            await tab.say("also do this")
            assert await tab.reply() == "done, with both"
            await asyncio.sleep(0.3)
            assert tab.replies() == ["done, with both"]
        assert texts_sent(llm.requests[1])[-1] == "also do this"
        assert len(llm.requests) == 2
    finally:
        await runner.stop()


async def test_idle_workers_exit_and_come_back(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url, gateway__session_idle_seconds=0.2)
    try:
        async with Tab(runner) as tab:
            await tab.say("one")
            await tab.reply()
            assert len(runner.parts.sessions.workers) == 1
            await asyncio.sleep(0.5)
            assert runner.parts.sessions.workers == {}
            await tab.say("two")
            assert await tab.reply(2) == "echo: two"
    finally:
        await runner.stop()


async def test_no_llm_configured_is_said_in_the_page_and_in_replies(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    runner = await start_gateway(tmp_path, None)
    try:
        async with Tab(runner) as tab:
            notice = await tab.wait_for(lambda f: f["type"] == "notice")
            assert "No language model is configured" in notice["text"]
            await tab.say("hello?")
            assert "llm.base_url" in await tab.reply()
    finally:
        await runner.stop()


async def test_unreachable_llm_is_said_in_the_page(tmp_path):
    runner = await start_gateway(tmp_path, "http://127.0.0.1:9/v1")  # nothing listens on port 9
    try:
        async with Tab(runner) as tab:
            notice = await tab.wait_for(lambda f: f["type"] == "notice")
            assert "not reachable" in notice["text"]
    finally:
        await runner.stop()


async def test_bad_frames_get_clear_errors_and_nothing_breaks(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            await tab.send_raw({"type": "dance"})
            assert "unknown frame type" in (await tab.wait_for(lambda f: f["type"] == "error"))["text"]
            await tab._ws.send_str("not json")  # type: ignore[union-attr]
            await tab.wait_for(lambda f: f["type"] == "error", count=2)
            ack = await tab.say("x" * 40_000)
            assert ack.get("rejected") is True
            assert "too long" in (await tab.wait_for(lambda f: f["type"] == "error", count=3))["text"]
            await tab.say("still here")
            assert await tab.reply() == "echo: still here"
        assert len(llm.requests) == 1
    finally:
        await runner.stop()


async def test_http_endpoints_and_websocket_guards(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url, platforms__webchat__token="s3cret-token")
    base = f"http://127.0.0.1:{runner.http.port}"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/healthz") as r:
                assert r.status == 200
            async with http.get(f"{base}/readyz") as r:
                assert r.status == 200 and (await r.json())["platforms"]["webchat"]["state"] == "ready"
            async with http.get(f"{base}/metrics") as r:
                assert "chatgate_inbound_messages" in await r.text()
            async with http.get(f"{base}/") as r:
                assert r.status == 401
            async with http.get(f"{base}/?token=s3cret-token") as r:
                assert r.status == 200 and "<html" in (await r.text()).lower()
            async with http.get(f"{base}/ws?chat=abcdefgh12&token=wrong") as r:
                assert r.status == 401
            async with http.get(f"{base}/ws?chat=abcdefgh12&token=s3cret-token",
                                headers={"Origin": "https://evil.example"}) as r:
                assert r.status == 403
            async with http.ws_connect(f"{base}/ws?chat=abcdefgh12&token=s3cret-token") as ws:
                assert json.loads((await ws.receive()).data)["type"] == "hello"
    finally:
        await runner.stop()


async def test_the_page_hears_what_the_agent_is_doing(tmp_path, llm: FakeLLM):
    llm.script(Reply.tool_calls([("terminal", {"command": "echo  hello   there"})]), Reply.text("done"))
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            await tab.say("run it")
            assert await tab.reply() == "done"
            frame = await tab.wait_for(lambda f: f.get("type") == "activity")
            assert frame["text"] == "running terminal: echo hello there"
    finally:
        await runner.stop()
