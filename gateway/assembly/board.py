"""Building the task board: its rules (`Board`, before the tools: the agent's `board` tool uses them), its view
for the web chat's page (`show_board`) and, once the agents, approvals and delivery exist, what runs its tasks
(`serve_board`: the runs and the dispatcher, on the tick)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.goal_judge import Judge
from gateway.board.dispatcher import WATCH_SECONDS, Dispatcher
from gateway.board.runs import TaskRuns
from gateway.cron.manage import TOOLSET as CRON_TOOLSET
from gateway.ops.board_view import BoardView

if TYPE_CHECKING:
    from agent.loop import Agent
    from agent.tools import ToolRegistry
    from gateway.access.trust import Trust
    from gateway.agents import Agents
    from gateway.approvals import Approvals
    from gateway.assembly.parts import Ground
    from gateway.board.tasks import Board
    from gateway.chat.delivery import Delivery
    from gateway.tick import Tick


def show_board(g: "Ground") -> None:
    """The board, read-only, to the surfaces that have a page for it and only to local ones (the web chat: whoever
    is on it holds its token and is an admin, who sees every task)."""
    view = BoardView(g.store.board)
    for adapter in g.adapters.values():
        if adapter.capabilities.local:
            adapter.show_board(view)


def serve_board(g: "Ground", tick: "Tick", board: "Board", *, agents: "Agents", chat_agent: "Agent | None",
                tools: "ToolRegistry", approvals: "Approvals", delivery: "Delivery", trust: "Trust") -> Dispatcher:
    """The runs (a task's turns get every tool but the scheduled jobs', its owner's rights) and the dispatcher:
    a hook of the tick, stopped with it; `board.changed` reaches it."""
    cfg = g.config
    settings = cfg.board

    async def tell_admins(text: str) -> None:
        await delivery.to_admins(cfg.access.admins, text)
    runs = TaskRuns(
        store=g.store.board, transcripts=g.store.sessions, agent=chat_agent,
        judge=Judge(agents.auxiliary) if agents.auxiliary else None,
        tools=tools.scope(tools=[n for n in tools.names() if tools.get(n).toolset != CRON_TOOLSET]),
        approvals=approvals, consent_off=cfg.approvals.mode == "off", trust=trust, delivery=delivery,
        tell_admins=tell_admins, instance_id=g.instance_id, settings=settings,
        max_turns=settings.max_turns or cfg.goals.max_turns, timezone=cfg.gateway.timezone)
    dispatcher = Dispatcher(g.store.board, runs, tick, instance_id=g.instance_id, max_running=settings.max_running,
                            stale_seconds=settings.stale_seconds)
    board.changed = dispatcher.changed
    tick.add_hook("task board", dispatcher.on_tick)
    tick.every(WATCH_SECONDS, dispatcher.watch, "board-watch")
    tick.stops_with(dispatcher.stop)
    return dispatcher
