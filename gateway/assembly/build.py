"""`build`: the gateway's parts, in the order each needs the others (see the package's doc)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping

from gateway.access.pairing import Pairing
from gateway.access.trust import Trust
from gateway.agents import Agents
from gateway.approvals import Approvals
from gateway.board.tasks import Board
from gateway.board.tool import board_tool
from gateway.assembly.board import serve_board, show_board
from gateway.assembly.parts import Ground, Parts
from gateway.assembly.road import chat_road
from gateway.assembly.scheduled import cron_parts, idle_clock, serve_cron, tick_hooks, upkeep
from gateway.assembly.tools import agent_side
from gateway.chat.delivery import Delivery
from gateway.leases import LifeLease
from gateway.learning.review import REVIEW_IDENTITY, Learning
from gateway.learning.trajectories import Trajectories
from gateway.ops.gauges import Gauges
from gateway.tick import Tick
from gateway.usage import UsageLedger

if TYPE_CHECKING:
    from gateway.config import Config
    from gateway.ops.metrics import Metrics
    from gateway.storage import Store
    from platforms.base import PlatformAdapter
    from platforms.loops import Background


async def build(config: "Config", store: "Store", adapters: Mapping[str, "PlatformAdapter"], *,
                metrics: "Metrics", background: "Background", state: Callable[[], str], instance_id: str) -> Parts:
    """The parts over an open `store`; `state` says whether the gateway starts, runs, drains or is stopped;
    `instance_id` is this gateway's in the database."""
    g = Ground(config, store, adapters, metrics, background, state, instance_id)
    cfg = config
    pairing = Pairing(store.access)
    trust = Trust(cfg.access, pairing, g.local)  # whom every turn, run and review acts for
    usage = UsageLedger(store.usage)
    agents = Agents(cfg, metrics, usage)
    tick = Tick(cfg.gateway.tick_seconds)
    jobs, ledger, cron_timers, cron = cron_parts(g, tick)
    board = Board(store.board, trust, changed=lambda: None)  # (its dispatcher, once built: `serve_board`)
    sandbox, memory, skills, tools = await agent_side(g, agents, more=[cron.tool(), board_tool(board)])
    life = LifeLease(store.owners, g.instance_id, shared=store.shared)
    delivery = Delivery(store.outbox, store.inbox, adapters, metrics, fence=life.fence if store.shared else None)
    learning = Learning(store.learning, store.sessions, memory, skills, tools, review_agent=agents.review(REVIEW_IDENTITY), delivery=delivery,
                        trust=trust, settings=cfg.review)
    approvals = _approvals(g, delivery, g.instance_id if store.shared else None)
    session_ended = _trajectory_export(g)
    chat_agent = agents.chat()  # (None without a model)
    serve_cron(g, cron_timers, ledger, cron, agents=agents, chat_agent=chat_agent, tools=tools, delivery=delivery, approvals=approvals,
               trust=trust, session_ended=session_ended)
    serve_board(g, tick, board, agents=agents, chat_agent=chat_agent, tools=tools, approvals=approvals,
                delivery=delivery, trust=trust)
    show_board(g)
    sessions, goals, turns, inbound = chat_road(
        g, life, agents=agents, chat_agent=chat_agent, tools=tools, trust=trust, pairing=pairing, learning=learning, approvals=approvals,
        delivery=delivery, cron=cron, board=board, usage=usage, session_ended=session_ended)
    idle_since = idle_clock(sessions, learning, cron_timers, inbound, turns)
    curator, retention = await upkeep(g, agents, skills, delivery, usage, ledger, idle_since)
    tick_hooks(g, tick, approvals, delivery, curator, retention)
    gauges = Gauges(metrics, adapters=adapters, sessions=sessions, approvals=approvals, store=store,
                    busy_policy=cfg.gateway.busy_policy)
    return Parts(store=store, agents=agents, sandbox=sandbox, tools=tools, pairing=pairing, delivery=delivery,
                 approvals=approvals, jobs=jobs, cron_timers=cron_timers, learning=learning, goals=goals, turns=turns,
                 sessions=sessions, inbound=inbound, tick=tick, curator=curator, retention=retention, gauges=gauges)


def _approvals(g: Ground, delivery: Delivery, instance: str | None) -> Approvals:
    cfg, local = g.config, g.local
    return Approvals(
        g.store.approvals, delivery, g.adapters, mode=cfg.approvals.mode, timeout=cfg.approvals.timeout_seconds,
        secrets_=cfg.secrets(), is_admin=lambda platform, user: platform in local or g.is_admin(platform, user),
        may_approve=lambda platform, user: user in cfg.access.allowed_users.get(platform, ())
        or cfg.approvals.paired_may_approve, always_scope=cfg.approvals.always_scope,
        spawn=lambda edit: g.background.spawn(edit, name="approval-outcome"), instance=instance)


def _trajectory_export(g: Ground) -> Callable[[int], None]:
    """What a session's end does: with `trajectories.enabled`, its export (in the background)."""
    if not g.config.trajectories.enabled:
        return lambda session_id: None
    trajectories = Trajectories(g.store.sessions, g.config.home, g.config.secrets())

    def export(session_id: int) -> None:
        g.background.spawn(trajectories.export(session_id), name="trajectory-export")
    return export
