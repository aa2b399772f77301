"""Subagent limits hold per turn and per person, not per `delegate_task` call (fake LLM, the real gateway):
five calls in one step never have more than `delegation.max_concurrent` children working at once, nor do
two turns of one person; a turn starts at most `delegation.max_children_per_turn` children, and a task
beyond that gets a clear refusal in the tool's result; a subagent waiting for its own children gives its
place back (no deadlock at `max_concurrent: 1`)."""

from __future__ import annotations

import asyncio
from typing import Any

from agent.delegation import SUBAGENT_IDENTITY
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import DEFAULT_GROUP_ID, FakeTelegram
from tests.harness import ANN, Tab, eventually, start_gateway, telegram_settings

QUIET = {"review__enabled": "false"}


def is_child(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]).startswith(SUBAGENT_IDENTITY)


def task_of(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def delegate_calls(calls: int, tasks: int, name: str = "job") -> Reply:
    """`calls` delegate_task calls in one step, each with `tasks` tasks."""
    return Reply.tool_calls([("delegate_task", {"tasks": [{"task": f"{name} {c}.{t}"} for t in range(tasks)]})
                             for c in range(calls)])


class Held:
    """A responder for children: each is held until `release`; it records how many were in flight at most."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.started = 0
        self.release = asyncio.Event()

    async def child(self, body: dict[str, Any]) -> Reply:
        self.in_flight += 1
        self.started += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await self.release.wait()
            return Reply.text(f"report on {task_of(body)}")
        finally:
            self.in_flight -= 1

    async def at_most(self, limit: int) -> None:
        """Once `limit` children are in flight, no more start (a short wait: this is about what does not
        happen), then all go on."""
        await eventually(lambda: self.in_flight >= limit, what=f"{limit} children in flight")
        await asyncio.sleep(0.5)
        assert self.peak == limit, f"{self.peak} children were working at once; the limit is {limit}"
        self.release.set()


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


async def test_five_calls_in_one_step_never_have_more_than_max_concurrent_children_working(tmp_path, llm: FakeLLM):
    held = Held()
    parent = [delegate_calls(5, 2), Reply.text("all reported")]

    async def respond(body: dict[str, Any]) -> Reply | None:
        return await held.child(body) if is_child(body) else parent.pop(0)

    llm.responder = respond
    runner = await start_gateway(tmp_path, llm.base_url, delegation__max_concurrent=2, **QUIET)
    try:
        async with Tab(runner) as tab:
            await tab.say("ten pieces of research")
            await held.at_most(2)
            assert await tab.reply(1) == "all reported"
        assert held.started == 10 and held.peak == 2
        results = tool_results(llm.requests[-1])
        assert len(results) == 5 and all(r.count("status: done") == 2 for r in results)
    finally:
        await runner.stop()


async def test_a_turn_starts_at_most_max_children_per_turn_and_the_rest_are_refused(tmp_path, llm: FakeLLM):
    parent = [delegate_calls(5, 10), Reply.text("some refused"), delegate_calls(1, 1, "later"), Reply.text("ok")]

    def respond(body: dict[str, Any]) -> Reply | None:
        return Reply.text(f"report on {task_of(body)}") if is_child(body) else parent.pop(0)

    llm.responder = respond
    runner = await start_gateway(tmp_path, llm.base_url, **QUIET)  # (20 a turn by default)
    try:
        async with Tab(runner) as tab:
            await tab.say("fifty pieces of research")
            assert await tab.reply(1) == "some refused"
            results = "\n".join(tool_results(llm.requests[-1]))
            assert results.count("status: done") == 20
            assert results.count("status: refused\nnot started: this turn has started 20 subagents already, as many "
                                 "as delegation.max_children_per_turn allows; do this part yourself") == 30
            assert len([b for b in llm.requests if is_child(b)]) == 20
            await tab.say("one more, in a new turn")  # each turn has its own total
            assert await tab.reply(2) == "ok"
            assert "status: done\nreport on later 0.0" in tool_results(llm.requests[-1])[-1]
        runs = await runner.parts.store.fetch("SELECT state FROM subagent_runs")
        assert [r["state"] for r in runs] == ["done"] * 21
    finally:
        await runner.stop()


async def test_two_turns_of_one_person_share_the_limit(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    held = Held()

    async def respond(body: dict[str, Any]) -> Reply | None:
        if is_child(body):
            return await held.child(body)
        if body["messages"][-1]["role"] == "tool":
            return Reply.text("reported")
        return delegate_calls(1, 3, "look into")

    llm.responder = respond
    runner = await start_gateway(tmp_path, llm.base_url, **telegram_settings(tg, delegation__max_concurrent=2,
                                                                            **QUIET))
    try:
        tg.user_message("research in private")  # Ann's direct chat ...
        tg.user_message("@chatgate_bot research in the group", chat_type="group")  # ... and her session in a group
        await held.at_most(2)
        await tg.wait_until(lambda: [m.text for m in tg.sent_messages(ANN)] == ["reported"] and
                            [m.text for m in tg.sent_messages(DEFAULT_GROUP_ID)] == ["reported"], 10)
        assert held.started == 6 and held.peak == 2
    finally:
        await runner.stop()


async def test_a_subagent_waiting_for_its_own_subagents_gives_its_place_back(tmp_path, llm: FakeLLM):
    def respond(body: dict[str, Any]) -> Reply | None:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return Reply.text(f"done: {last['content'][-40:]}")
        if not is_child(body):
            return Reply.tool_calls([("delegate_task", {"tasks": [{"task": "outer"}]})])
        if task_of(body) == "outer":
            return Reply.tool_calls([("delegate_task", {"tasks": [{"task": "inner"}]})])
        return Reply.text("inner finished")

    llm.responder = respond
    runner = await start_gateway(tmp_path, llm.base_url, delegation__max_concurrent=1, **QUIET)
    try:
        async with Tab(runner) as tab:
            await tab.say("nest it")
            assert (await tab.reply(1)).startswith("done:")
        runs = await runner.parts.store.fetch("SELECT task, depth, state FROM subagent_runs ORDER BY depth")
        assert [(r["task"], r["depth"], r["state"]) for r in runs] == [("outer", 1, "done"), ("inner", 2, "done")]
    finally:
        await runner.stop()
