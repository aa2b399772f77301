"""The gateway's side of subagents (`agent.delegation`): each child's run linked to the parent's
session and turn, and its transcript kept in a session of its own (ended when the child ends). A run
that ended more than `gateway.retention_days` ago is forgotten with that transcript (`prune`)."""

from __future__ import annotations

from typing import Any

from agent.tools import ToolContext
from gateway.storage import Store
from gateway.storage.goals import end_run

TRANSCRIPT_STATUS = {"done": "ok", "stopped": "ok", "cancelled": "cancelled"}  # else: failed


class SubagentRuns:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def started(self, ctx: ToolContext, task: str, depth: int) -> int:
        return await self.store.goals.start_run(ctx.session_id, ctx.place.inbox_id, depth, task,
                                                ctx.platform, ctx.chat_id, ctx.place.thread_id)

    async def finished(self, run_id: int, state: str, messages: list[dict[str, Any]], summary: str) -> None:
        """The run's transcript is committed, and with it the run and its session end."""
        session_id = await self.store.goals.run_session(run_id)
        assert session_id is not None
        await self.store.sessions.commit_turn(session_id, [], None, None, messages, None,
                                              status=TRANSCRIPT_STATUS.get(state, "failed"),
                                              also=end_run(run_id, session_id, state, summary))

    async def interrupted(self) -> None:
        """At start: children an earlier run left running were cut off with it (their sessions end)."""
        await self.store.goals.interrupt_runs()

    async def prune(self, before: float) -> int:
        """Forget runs that ended before `before` (a running one never), each with its transcript; return
        how many."""
        return await self.store.goals.prune_runs(before)
