"""Building what runs on the clock: scheduled jobs (their rules, ledger, timers and manager), the curator
(skills kept tidy when idle), retention (old rows and files pruned) and the tick's hooks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Awaitable, Callable

from gateway.cron.jobs import CronJobs
from gateway.cron.ledger import RunLedger
from gateway.cron.manage import TOOLSET as CRON_TOOLSET
from gateway.cron.manage import CronManager
from gateway.cron.runs import CronRuns
from gateway.cron.timers import CronTimers
from gateway.learning.consolidate import CONSOLIDATE_IDENTITY, consolidator
from gateway.learning.curator import Curator
from gateway.retention import Retention

if TYPE_CHECKING:
    from agent.loop import Agent
    from agent.skills import SkillLibrary
    from agent.tools import ToolRegistry
    from gateway.access.trust import Trust
    from gateway.agents import Agents
    from gateway.approvals import Approvals
    from gateway.assembly.parts import Ground
    from gateway.chat.delivery import Delivery
    from gateway.chat.inbound import Inbound
    from gateway.chat.sessions import Sessions
    from gateway.chat.turns import Turns
    from gateway.learning.review import Learning
    from gateway.tick import Tick
    from gateway.usage import UsageLedger

IdleSince = Callable[[], Awaitable["float | None"]]


def cron_parts(g: "Ground", tick: "Tick") -> tuple[CronJobs, RunLedger, CronTimers, CronManager]:
    """The jobs' rules, this instance's ledger, the timers (served their runs later: `serve_cron`) and the
    manager."""
    cfg, store = g.config, g.store
    jobs = CronJobs(store.cron, default_tz=cfg.gateway.timezone, min_interval=cfg.cron.min_interval_seconds)
    ledger = RunLedger(store.cron, g.instance_id)
    timers = CronTimers(tick, store.cron, ledger, grace_seconds=cfg.cron.grace_seconds,
                        max_concurrent=cfg.cron.max_concurrent_runs)
    manager = CronManager(jobs, store.cron, changed=timers.changed, is_admin=g.is_admin,
                          max_jobs_per_person=cfg.cron.max_jobs_per_person)
    return jobs, ledger, timers, manager


def serve_cron(g: "Ground", timers: CronTimers, ledger: RunLedger, manager: CronManager, *, agents: "Agents",
               chat_agent: "Agent | None", tools: "ToolRegistry", delivery: "Delivery", approvals: "Approvals",
               trust: "Trust", session_ended: Callable[[int], None]) -> None:
    """What runs a due job (its own session, the agent's tools but managing jobs, its owner's rights)."""
    cfg = g.config
    runs = CronRuns(
        transcripts=g.store.sessions, ledger=ledger, agent=chat_agent, delivery=delivery, approvals=approvals,
        tools=tools.scope(tools=[n for n in tools.names() if tools.get(n).toolset != CRON_TOOLSET]),
        consent=cfg.approvals, timezone=cfg.gateway.timezone, timeout=cfg.cron.run_timeout_seconds, trust=trust,
        session_ended=session_ended, agent_for_model=agents.chat, owner_may=trust.may_still_talk,
        pause=manager.pause)
    timers.serve(runs.run, runs.interrupted)


def idle_clock(sessions: "Sessions", learning: "Learning", timers: CronTimers, inbound: "Inbound",
               turns: "Turns") -> IdleSince:
    async def idle_since() -> float | None:
        """Since when nothing has happened (no message in, no turn, review or scheduled run); None: busy now."""
        if sessions.busy_count() or learning.busy or timers.busy:
            return None
        return max(inbound.last_message_at, turns.last_finished)
    return idle_since


async def upkeep(g: "Ground", agents: "Agents", skills: "SkillLibrary", delivery: "Delivery", usage: "UsageLedger",
                 ledger: RunLedger, idle_since: IdleSince) -> tuple[Curator, Retention]:
    """The curator (skills kept tidy when idle) and retention (old rows and files pruned)."""
    cfg, store = g.config, g.store
    consolidating = agents.on(agents.auxiliary, CONSOLIDATE_IDENTITY, cfg.review.max_iterations) \
        if cfg.curator.consolidate else None  # (None without a model)

    async def tell_admins(text: str) -> None:
        await delivery.to_admins(cfg.access.admins, text)
    curator = Curator(store.learning, skills, cfg.home, settings=cfg.curator, idle_since=idle_since,
                      notify=tell_admins if cfg.curator.notify_admins else None,
                      consolidate=consolidator(consolidating, skills) if consolidating else None)
    await curator.first_started()
    retention = Retention(cfg, inbox=store.inbox, sessions=store.sessions, approvals=store.approvals,
                          subagents=store.subagents, usage=usage, ledger=ledger, curator=curator,
                          upkeep=store.upkeep, idle_since=idle_since)
    return curator, retention


def tick_hooks(g: "Ground", tick: "Tick", approvals: "Approvals", delivery: "Delivery", curator: Curator,
               retention: Retention) -> None:
    cfg, store = g.config, g.store
    tick.add_hook("expire approvals", approvals.expire_overdue)
    tick.add_hook("expire pairing codes", store.access.expire_codes)
    tick.add_hook("prune old rows and files", retention.tick)  # (gateway.retention)
    tick.add_hook("send stranded replies", delivery.sweep)  # (a safety net: see gateway.chat.delivery)
    if cfg.curator.enabled:
        tick.add_hook("curator", curator.tick)
