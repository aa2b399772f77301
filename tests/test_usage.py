"""Token usage: every LLM request counted for the loop that made it (main, review), in the store,
in `/usage`, in `chatgate usage` and in `/metrics`, and the sums agree."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import aiohttp

from tests.fakes.llm import FakeLLM
from tests.harness import Tab, eventually, gateway_env, start_gateway


async def test_usage_adds_up_across_loops_in_the_chat_the_cli_and_metrics(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url, review__memory_every_turns=2)
    try:
        async with Tab(runner) as tab:
            for n, text in enumerate(("first question", "second question"), start=1):
                await tab.say(text)
                assert await tab.reply(n) == f"echo: {text}"
            # the second turn made a memory review due: it asks the model in the background
            await eventually(lambda: runner.parts.store.fetch("SELECT 1 FROM llm_usage WHERE loop = 'review'"), 10,
                             "the review's request counted")
            rows = await runner.parts.store.fetch("SELECT loop, session_id, platform, user_id, model, prompt_tokens,"
                                            " completion_tokens FROM llm_usage ORDER BY id")
            main = [r for r in rows if r["loop"] == "main"]
            assert len(main) == 2 and all(r["prompt_tokens"] > 0 and r["completion_tokens"] > 0 for r in main)
            assert {(r["platform"], r["user_id"], r["model"]) for r in rows} == {("webchat", "local", "gpt-4o-mini")}
            assert len({r["session_id"] for r in rows}) == 1
            total = sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows)
            prompt = sum(r["prompt_tokens"] for r in main)

            await tab.say("/usage")
            report = await tab.reply(3)
        assert f"This session: {total:,} tokens" in report and f"in {len(rows)} request(s)" in report
        assert "By loop (you, in all): main" in report and "review" in report

        env = {**os.environ, **gateway_env(tmp_path, llm.base_url)}
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "gateway", "usage", "--json"],
                                       capture_output=True, text=True, env=env, timeout=60)
        loops = json.loads(done.stdout)["loops"]
        assert loops["main"]["requests"] == 2 and loops["main"]["prompt"] == prompt
        assert sum(t["prompt"] + t["completion"] for t in loops.values()) == total

        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{runner.http.port}/metrics") as response:
                metrics = await response.text()
        counted = re.search(r'chatgate_llm_tokens_total\{kind="prompt",loop="main"\} (\S+)', metrics)
        assert counted and float(counted.group(1)) == prompt
    finally:
        await runner.stop()


async def test_the_background_loops_use_the_auxiliary_model_and_count_for_it(tmp_path, llm: FakeLLM):
    async with FakeLLM() as aux:
        runner = await start_gateway(tmp_path, llm.base_url, review__memory_every_turns=1,
                                     llm__auxiliary__base_url=aux.base_url, llm__auxiliary__model="small-model",
                                     llm__auxiliary__api_key="sk-aux")
        try:
            async with Tab(runner) as tab:
                await tab.say("remember that I like tea")
                assert await tab.reply() == "echo: remember that I like tea"
                await aux.wait_for_requests(1)  # the review asked the auxiliary endpoint
            assert len(llm.requests) == 1  # the turn itself, on the main endpoint
            assert aux.requests[0]["model"] == "small-model" and aux.authorizations[0] == "Bearer sk-aux"
            await eventually(lambda: runner.parts.store.fetch("SELECT 1 FROM llm_usage WHERE loop = 'review'"), 10,
                             "the review counted")
            rows = await runner.parts.store.fetch("SELECT loop, model FROM llm_usage ORDER BY id")
            assert [(r["loop"], r["model"]) for r in rows] == [("main", "gpt-4o-mini"), ("review", "small-model")]
        finally:
            await runner.stop()
