"""Subagents: the `delegate_task` tool hands pieces of work to child agents that run side by side.

Each child starts with a fresh context (its task, and what the parent chose to tell it), a
toolset no wider than the parent's (narrowed further to the toolsets the parent names), and the
parent's ports: its approvals are asked in the parent's chat, its side-effecting calls are
journalled with the parent's turn, files it hands over go out with the parent's reply. Each
child takes at most `max_iterations` steps; a child at `max_depth` is a leaf and cannot delegate.
At most `max_concurrent` subagents of one person work at once, over all the calls of all their
turns (the rest wait for a place; a subagent that waits for its own children gives its place back
meanwhile), and one turn starts at most `max_per_turn` in all, at every depth: a task beyond that
is refused in the tool's result. Cancelling the parent's turn (`/stop`) cancels its children. Each
child's transcript goes to the `SubagentLog` the gateway lends, linked to the parent's turn;
the parent gets one summary per task back.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any, Protocol

from agent import usage as usage_scope
from agent.llm import LLMError
from agent.loop import Agent
from agent.tools import AskingFor, Tool, ToolContext, ToolScope

log = logging.getLogger(__name__)

NAME = "delegate_task"
MAX_TASKS = 10
SUMMARY_CHARS = 4000
SUBAGENT_IDENTITY = (
    "You are a subagent. Another AI agent handed you one task; you are not talking to a person. Work on it "
    "with your tools, on your own: nobody will answer questions (actions that need consent are still put to "
    "the person, who may refuse them). When you are done, or cannot go further, answer with a concise report: "
    "what you did, what you found (facts, paths, numbers) and what is left. That report is all the other "
    "agent will see of your work.")


class SubagentLog(Protocol):
    """Where children's runs and transcripts are kept (the gateway's store), linked to the parent's session and
    turn (its inbox row)."""

    async def started(self, parent_session_id: int | None, parent_inbox_id: int | None, depth: int, task: str,
                      platform: str, chat_id: str, thread_id: str | None) -> int: ...

    async def finished(self, run_id: int, state: str, messages: list[dict[str, Any]], summary: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Limits:
    max_concurrent: int = 3  # subagents of one person working at once
    max_depth: int = 2
    max_per_turn: int = 20  # subagents one turn starts in all


class _Places:
    """One person's places for working subagents, shared by all their turns while any of them delegates."""

    def __init__(self, size: int) -> None:
        self.free = asyncio.Semaphore(size)
        self.users = 0  # delegate_task calls using these places now


class _Seat:
    """A subagent's place: held while it works, given back while it waits for subagents of its own."""

    def __init__(self, places: _Places) -> None:
        self.places = places
        self.held = False

    async def take(self) -> None:
        await self.places.free.acquire()
        self.held = True

    def give_back(self) -> None:
        if self.held:
            self.held = False
            self.places.free.release()

    async def __aenter__(self) -> "_Seat":
        await self.take()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.give_back()


class Delegation:
    def __init__(self, agent: Agent, log_: SubagentLog, limits: Limits = Limits()) -> None:
        self.agent = agent  # the children's agent: SUBAGENT_IDENTITY, delegation.max_iterations
        self.log = log_
        self.limits = limits
        self._places: dict[tuple[str, str], _Places] = {}  # per (platform, user id), while in use

    def tool(self) -> Tool:
        return Tool(
            NAME,
            "Hand independent pieces of work to subagents that run in parallel, each with a fresh context and "
            f"your tools (or only the toolsets you name). Up to {MAX_TASKS} tasks; {self.limits.max_concurrent} "
            f"run at a time, at most {self.limits.max_per_turn} per turn in all. Each gets only its task and the "
            "context you write, so say everything it needs. You "
            "get back one report per task. Use it for parallel research or independent subtasks, not for one "
            "quick step.",
            {"type": "object", "properties": {
                "tasks": {"type": "array", "minItems": 1, "maxItems": MAX_TASKS, "items": {
                    "type": "object", "properties": {
                        "task": {"type": "string", "description": "what the subagent must do"},
                        "context": {"type": "string", "description": "facts, paths and constraints it needs"},
                        "toolsets": {"type": "array", "items": {"type": "string"},
                                     "description": "limit it to these toolsets (default: all of yours)"}},
                    "required": ["task"]}}},
             "required": ["tasks"]},
            self._delegate, toolset="delegation")

    async def _delegate(self, ctx: ToolContext, tasks: Any) -> str:
        if not isinstance(tasks, list) or not tasks or not all(isinstance(t, dict) and isinstance(t.get("task"), str)
                                                              and t["task"].strip() for t in tasks):
            return "error: tasks must be a list of objects, each with a non-empty task"
        if len(tasks) > MAX_TASKS:
            return f"error: at most {MAX_TASKS} tasks at once; you sent {len(tasks)}"
        depth = ctx.depth + 1
        if depth > self.limits.max_depth or ctx.tools is None:
            return "error: a subagent at the deepest level cannot delegate further; do the work yourself"
        turn = ctx.turn  # (shared by the turn's calls and its subagents')
        if turn.person is None:
            turn.person = (ctx.platform, ctx.user_id)
        granted = max(0, min(len(tasks), self.limits.max_per_turn - turn.subagents_started))
        turn.subagents_started += granted
        key = turn.person
        places = self._places.get(key) or self._places.setdefault(key, _Places(self.limits.max_concurrent))
        places.users += 1
        seat = ctx.seat  # a subagent delegating: its place is free while its children work
        if seat is not None:
            seat.give_back()
        try:
            reports = await asyncio.gather(*(self._child(ctx, t, depth, places) for t in tasks[:granted]))
        finally:
            places.users -= 1
            if places.users == 0 and self._places.get(key) is places:
                del self._places[key]
        if seat is not None:
            await seat.take()
        refused = (f"status: refused\nnot started: this turn has started {self.limits.max_per_turn} subagents "
                   "already, as many as delegation.max_children_per_turn allows; do this part yourself")
        reports = [*reports, *[refused] * (len(tasks) - granted)]
        return "\n\n".join(f"## Task {n}: {t['task'][:200]}\n{report}"
                           for n, (t, report) in enumerate(zip(tasks, reports), 1))

    def _scope(self, parent: ToolScope, toolsets: Any, depth: int) -> ToolScope:
        """The parent's tools, only the named toolsets if any, without delegation at a leaf."""
        allowed = set(parent.allowed)
        if isinstance(toolsets, list) and toolsets:
            allowed = {n for n in allowed if parent.registry.get(n).toolset in toolsets}  # type: ignore[union-attr]
        if depth >= self.limits.max_depth:
            allowed.discard(NAME)
        return ToolScope(parent.registry, frozenset(allowed))

    async def _child(self, ctx: ToolContext, spec: dict[str, Any], depth: int, places: _Places) -> str:
        task = spec["task"].strip()
        context = str(spec.get("context") or "").strip()
        async with _Seat(places) as seat:
            run_id = await self.log.started(ctx.session_id, ctx.place.inbox_id, depth, task, ctx.platform,
                                            ctx.chat_id, ctx.place.thread_id)
            assert ctx.tools is not None
            scope = self._scope(ctx.tools, spec.get("toolsets"), depth)
            shown = task if len(task) <= 120 else task[:119] + "…"
            asking = AskingFor(ctx.approvals, f"asked by a subagent working on: {shown}") if ctx.approvals else None
            child = replace(ctx, approvals=asking, depth=depth, seat=seat, tools=None)
            record: list[dict[str, Any]] = []
            state, report = "failed", ""
            try:
                with usage_scope.counted_as("subagent"):
                    result = await self.agent.run_turn([], task, scope, child, record=record,
                                                       context=f"Context from the agent that asked:\n{context}"
                                                       if context else "")
                state = "stopped" if result.exhausted else "done"
                report = result.text
            except LLMError as exc:
                report = f"failed: the model could not be reached ({exc.user_message})"
            except asyncio.CancelledError:
                state, report = "cancelled", "cancelled"
                await self._finish(run_id, state, record, report)
                raise
            except Exception as exc:
                log.exception("subagent %s failed", run_id)
                report = f"failed: {type(exc).__name__}"
            await self._finish(run_id, state, record, report)
        shown = report if len(report) <= SUMMARY_CHARS else report[:SUMMARY_CHARS] + " …(cut)"
        return f"status: {state}\n{shown}"

    async def _finish(self, run_id: int, state: str, record: list[dict[str, Any]], report: str) -> None:
        try:
            await self.log.finished(run_id, state, record, report)
        except Exception:
            log.exception("could not store the transcript of subagent %s", run_id)
