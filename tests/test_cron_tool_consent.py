"""The agent's `cron` tool acts on an existing job only with a person's yes, seeing the job; denied,
nothing changes. A person's own `/cron` command asks nobody (tests/test_cron_e2e.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Tab, is_prompt, press, start_gateway

FAST = {"gateway__tick_seconds": "0.2", "cron__min_interval_seconds": "1", "review__enabled": "false"}


def tool(action: str, **fields: Any) -> Reply:
    return Reply.tool_calls([("cron", {"action": action, "job": "1", **fields})])


async def state(runner) -> list[tuple[str, str, str, str | None, bool]]:
    return [(j.name, j.prompt, j.schedule, j.model, j.enabled) for j in await runner.parts.jobs.list()]


async def manual_runs(runner) -> list[Any]:
    return await runner.parts.store.fetch("SELECT * FROM cron_runs WHERE manual = 1")


@pytest.mark.parametrize(("action", "fields", "words"), [
    ("pause", {}, "pause job #1"),
    ("resume", {}, "resume job #1"),
    ("remove", {}, "remove job #1"),
    ("run", {}, "run job #1"),
    ("update", {"name": "renamed", "model": "other-model"}, "change job #1"),
])
async def test_acting_on_a_job_asks_shows_it_and_denied_changes_nothing(tmp_path: Path, llm: FakeLLM, action: str,
                                                                       fields: dict[str, Any], words: str):
    llm.script(tool(action, **fields), Reply.text("left alone"))
    runner = await start_gateway(tmp_path, llm.base_url, **FAST)
    try:
        async with Tab(runner) as tab:
            await runner.parts.jobs.create(name="digest", prompt="Summarise the open pull requests", schedule="every 1h",
                                     target=f"webchat:{tab.chat_id}", owner_platform="webchat", owner_id="local")
            if action == "resume":
                await runner.parts.jobs.set_enabled(1, False)
            runner.parts.cron_timers.changed()
            before = await state(runner)
            await tab.say(f"{action} the digest job")
            prompt = await tab.wait_for(is_prompt)
            assert words in prompt["text"] and "digest" in prompt["text"]
            assert "Summarise the open pull requests" in prompt["text"] or action == "update"  # the job it acts on
            await press(tab, prompt, "Deny")
            assert await tab.reply(2) == "left alone"
            result = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"][-1]
            assert "denied" in result and "The job was NOT" in result
            assert await state(runner) == before
            assert await manual_runs(runner) == []
    finally:
        await runner.stop()


async def test_allowed_the_pause_happens(tmp_path: Path, llm: FakeLLM):
    llm.script(tool("pause"), Reply.text("paused it"))
    runner = await start_gateway(tmp_path, llm.base_url, **FAST)
    try:
        async with Tab(runner) as tab:
            await runner.parts.jobs.create(name="digest", prompt="digest", schedule="every 1h", target="none",
                                     owner_platform="webchat", owner_id="local")
            runner.parts.cron_timers.changed()
            [(name, prompt, schedule, model, enabled)] = await state(runner)
            await tab.say("pause the digest")
            await press(tab, await tab.wait_for(is_prompt), "Allow once")
            assert await tab.reply(2) == "paused it"
        assert enabled and await state(runner) == [(name, prompt, schedule, model, False)]
        result = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"][-1]
        assert "Paused: #1 digest" in result
    finally:
        await runner.stop()
