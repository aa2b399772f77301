"""Subagents end to end (web chat, fake LLM): `delegate_task` runs children side by side (the fake
sees them in flight together, never more than `delegation.max_concurrent`), hands the parent one
report per task, keeps each child's transcript linked to the parent's turn, asks a child's
dangerous command in the parent's chat, and `/stop` stops the children with the parent."""

from __future__ import annotations

import asyncio
from typing import Any

from agent.delegation import SUBAGENT_IDENTITY
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Tab, is_prompt, press, start_gateway

QUIET = {"review__enabled": "false"}


def is_child(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]).startswith(SUBAGENT_IDENTITY)


def task_of(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def tool_names(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or ()}


def delegate(*tasks: str, **extra: Any) -> Reply:
    return Reply.tool_calls([("delegate_task", {"tasks": [{"task": t, **extra} for t in tasks]})])


class Children:
    """A responder: children's requests are held until `together` of them are in flight at once, then
    each reports on its task; the parent gets `parent` replies in order."""

    def __init__(self, together: int, *parent: Reply) -> None:
        self.together = together
        self.parent = list(parent)
        self.in_flight = 0
        self.most = 0
        self.met = asyncio.Event()

    async def __call__(self, body: dict[str, Any]) -> Reply | None:
        if not is_child(body):
            return self.parent.pop(0) if self.parent else None
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            if self.in_flight >= self.together:
                self.met.set()
            await self.met.wait()
            return Reply.text(f"report on {task_of(body)}")
        finally:
            self.in_flight -= 1


async def test_three_tasks_run_side_by_side_and_the_parent_gets_three_reports(tmp_path, llm: FakeLLM):
    children = Children(3, delegate("look up alpha", "look up beta", "look up gamma"), Reply.text("all three done"))
    llm.responder = children
    runner = await start_gateway(tmp_path, llm.base_url, **QUIET)
    try:
        async with Tab(runner) as tab:
            await tab.say("research alpha, beta and gamma")
            assert await tab.reply(1) == "all three done"
        assert children.most == 3  # the three children were in flight at the same time
        parent = [b for b in llm.requests if not is_child(b)]
        [result] = [m["content"] for m in parent[-1]["messages"] if m["role"] == "tool"]
        for n, name in enumerate(("alpha", "beta", "gamma"), 1):
            assert f"## Task {n}: look up {name}\nstatus: done\nreport on look up {name}" in result
        kids = [b for b in llm.requests if is_child(b)]
        assert all(len(b["messages"]) == 2 for b in kids)  # a fresh context: its identity and its task
        assert all(tool_names(b) <= tool_names(parent[0]) for b in kids)
        runs = await runner.parts.store.fetch(
            "SELECT r.*, (SELECT count(*) FROM messages m WHERE m.session_id = r.session_id) AS messages,"
            " s.key FROM subagent_runs r JOIN sessions s ON s.id = r.session_id ORDER BY r.id")
        [turn] = await runner.parts.store.fetch("SELECT id FROM inbox")
        [session] = await runner.parts.store.fetch("SELECT id FROM sessions WHERE chat_type != 'subagent'")
        assert [(r["state"], r["depth"], r["parent_inbox_id"], r["parent_session_id"], r["messages"])
                for r in runs] == [("done", 1, turn["id"], session["id"], 2)] * 3
        assert {r["summary"] for r in runs} == {f"report on look up {n}" for n in ("alpha", "beta", "gamma")}
        loops = {r["loop"]: r["n"] for r in await runner.parts.store.fetch(
            "SELECT loop, count(*) AS n FROM llm_usage GROUP BY loop")}
        assert loops == {"main": 2, "subagent": 3}
    finally:
        await runner.stop()


async def test_no_more_than_max_concurrent_children_run_at_once(tmp_path, llm: FakeLLM):
    children = Children(2, delegate("one", "two", "three", "four", "five"), Reply.text("done"))
    llm.responder = children
    runner = await start_gateway(tmp_path, llm.base_url, delegation__max_concurrent=2, **QUIET)
    try:
        async with Tab(runner) as tab:
            await tab.say("five things")
            assert await tab.reply(1) == "done"
        assert children.most == 2 and len([b for b in llm.requests if is_child(b)]) == 5
    finally:
        await runner.stop()


async def test_a_leaf_cannot_delegate_and_a_child_gets_only_the_toolsets_named(tmp_path, llm: FakeLLM):
    children = Children(1, delegate("check the time", toolsets=["core"]), Reply.text("ok"))
    llm.responder = children
    runner = await start_gateway(tmp_path, llm.base_url, delegation__max_depth=1, **QUIET)
    try:
        async with Tab(runner) as tab:
            await tab.say("what time is it, via a helper")
            assert await tab.reply(1) == "ok"
        parent, child = llm.requests[0], next(b for b in llm.requests if is_child(b))
        core = {n for n in runner.parts.tools.names() if runner.parts.tools.get(n).toolset == "core"}
        assert "delegate_task" in tool_names(parent)
        assert tool_names(child) == core - {"delegate_task"} and "terminal" not in tool_names(child)
    finally:
        await runner.stop()


async def test_a_childs_dangerous_command_asks_in_the_parents_chat(tmp_path, llm: FakeLLM):
    ws = tmp_path / "ws"
    (ws / "victim").mkdir(parents=True)

    def respond(body: dict[str, Any]) -> Reply | None:
        last = body["messages"][-1]
        if is_child(body):
            if last["role"] == "tool":
                return Reply.text(f"the command was refused: {last['content'][:40]}")
            return Reply.tool_calls([("terminal", {"command": "rm -rf victim"})])
        return delegate("clean up the victim folder") if last["role"] == "user" else Reply.text("cleanup reported")

    llm.responder = respond
    runner = await start_gateway(tmp_path, llm.base_url, agent__workspace=ws, **QUIET)
    try:
        async with Tab(runner) as tab:
            await tab.say("tidy the workspace")
            prompt = await tab.wait_for(is_prompt)
            assert "rm -rf victim" in prompt["text"]
            assert "asked by a subagent working on: clean up the victim folder" in prompt["text"]
            await press(tab, prompt, "Deny")
            assert await tab.reply(2) == "cleanup reported"
        assert (ws / "victim").exists()
        [run] = await runner.parts.store.fetch("SELECT state, summary FROM subagent_runs")
        assert run["state"] == "done" and run["summary"].startswith("the command was refused")
    finally:
        await runner.stop()


async def test_stop_stops_the_children_too(tmp_path, llm: FakeLLM):
    in_flight = asyncio.Event()
    asked: list[str] = []

    def respond(body: dict[str, Any]) -> Reply | None:
        if is_child(body):
            asked.append(task_of(body))
            if len(asked) == 2:
                in_flight.set()
            return Reply.hang()
        return delegate("slow one", "slow two") if task_of(body) == "start the slow work" else None

    llm.responder = respond
    runner = await start_gateway(tmp_path, llm.base_url, **QUIET)
    try:
        async with Tab(runner) as tab:
            await tab.say("start the slow work")
            await in_flight.wait()
            await tab.say("/stop")
            assert await tab.reply(1) == "Stopped the running request."
            await tab.say("are you there?")
            assert await tab.reply(2) == "echo: are you there?"  # the stopped turn, children and all, is over
        runs = await runner.parts.store.fetch("SELECT state FROM subagent_runs")
        assert [r["state"] for r in runs] == ["cancelled", "cancelled"]
        assert len(asked) == 2
    finally:
        await runner.stop()


def test_the_tool_refuses_malformed_tasks():
    from agent.delegation import Delegation
    from agent.tools import ToolContext

    tool = Delegation(agent=None, log_=None).tool()  # type: ignore[arg-type]
    ctx = ToolContext()
    bad = asyncio.run(tool.handler(ctx, tasks=[{"context": "no task"}]))
    assert bad.startswith("error: tasks must be a list")
    many = asyncio.run(tool.handler(ctx, tasks=[{"task": str(n)} for n in range(11)]))
    assert many == "error: at most 10 tasks at once; you sent 11"
    assert tool.schema()["function"]["name"] == "delegate_task"
