"""Building the message road: one worker per conversation (`Sessions`), which instance runs it (`Owners`), goals,
turns, chat commands and intake (`Inbound`, what every adapter calls)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from agent.goal_judge import Judge
from gateway.approvals import PREFIX as APPROVAL_PREFIX
from gateway.chat.command_handlers import REGISTRY, Commands, Services
from gateway.chat.control import Control
from gateway.chat.inbound import Inbound
from gateway.chat.owners import Owners
from gateway.chat.sessions import Sessions
from gateway.chat.turns import Turns
from gateway.goals import Goals
from gateway.ops.redact import redact

if TYPE_CHECKING:
    from agent.loop import Agent
    from agent.tools import ToolRegistry
    from gateway.access.pairing import Pairing
    from gateway.access.trust import Trust
    from gateway.agents import Agents
    from gateway.approvals import Approvals
    from gateway.assembly.parts import Ground
    from gateway.chat.delivery import Delivery
    from gateway.board.tasks import Board
    from gateway.cron.manage import CronManager
    from gateway.leases import LifeLease
    from gateway.learning.review import Learning
    from gateway.usage import UsageLedger


def chat_road(g: "Ground", life: "LifeLease", *, agents: "Agents", chat_agent: "Agent | None", tools: "ToolRegistry", trust: "Trust", pairing: "Pairing",
              learning: "Learning", approvals: "Approvals", delivery: "Delivery", cron: "CronManager",
              board: "Board", usage: "UsageLedger", session_ended: Callable[[int], None]) -> tuple[Sessions, Goals, Turns, Inbound]:
    cfg, store = g.config, g.store
    sessions = Sessions(cfg.gateway.session_idle_seconds, accepting=lambda: g.state() in ("starting", "running"))
    owners = Owners(store.owners, store.inbox, sessions, life, adapters=g.adapters, spawn=g.background.spawn,
                    adopt=delivery.adopt)
    life.when_renewed(lambda: g.background.spawn(delivery.start(), name="outbox-renewed"))  # (replies a let-go cut off)
    goals = Goals(store.goals, store.inbox, delivery, Judge(agents.auxiliary) if agents.auxiliary else None,
                  max_turns=cfg.goals.max_turns, dispatch=owners.goal_turn, spawn=g.background.spawn,
                  trust=trust, max_resumes_per_day=cfg.goals.max_resumes_per_day)
    secrets = cfg.secrets()
    turns = Turns(inbox=store.inbox, transcripts=store.sessions, until_stored=store.until_stored, agent=chat_agent,
                  tools=tools.scope(), delivery=delivery, metrics=g.metrics, busy_policy=cfg.gateway.busy_policy, timezone=cfg.gateway.timezone, approvals=approvals,
                  learning=learning, adapters=g.adapters, trust=trust, files_root=cfg.home / "files",
                  redact=lambda text: redact(text, secrets), goals=goals, holder=life.holder if life.shared else None)
    services = Services(config=cfg, transcripts=store.sessions, goals=goals, approvals=approvals, cron=cron,
                        board=board, usage=usage, llm=agents.llm, session_ended=session_ended)
    commands = Commands(REGISTRY, services, inbox=store.inbox, delivery=delivery)
    sessions.serve(turns.run, commands.run)  # a worker runs an ordinary message's turn, or a queued command
    inbound = Inbound(
        cfg, local=g.local, inbox=store.inbox, transcripts=store.sessions, pairing=pairing, sessions=sessions,
        delivery=delivery, control=Control(delivery=delivery, pairing=pairing, llm=agents.llm, adapters=g.adapters),
        commands=commands, approvals=approvals, metrics=g.metrics, adapters=g.adapters,
        buttons={APPROVAL_PREFIX: approvals.on_button}, owners=owners, spawn=g.background.spawn, state=g.state)
    owners.serve(inbound.dispatch, inbound.resumed_item)
    return sessions, goals, turns, inbound
