"""The gateway runner: builds everything, starts it in order and stops it in reverse.

Intake is `gateway.chat.inbound`, chat commands `gateway.chat.commands` (handlers: `gateway.chat.command_handlers`), a turn
`gateway.chat.turns`.

Start order: store → agent → HTTP server → adapters → resume unfinished work → accept. (With only
polling platforms, which nothing reaches over HTTP, the adapters' first calls go out before the HTTP
server starts.) Each adapter connects in a task of its own (`gateway.connections`): start waits for
every first try (up to `FIRST_TRY_WAIT`), and one that failed does not stop the others — it is
tried again while the rest serves. Only when every platform refused for good does start fail
(`NothingToServe`); the same at any later time sets `failed`.
Stop order (SIGTERM, Ctrl-C): stop dispatching → let running turns finish up to
`gateway.drain_seconds` → flush the outbox → stop adapters → HTTP server → store. Messages that
arrive while starting or draining are stored and handled at the next start, never dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

from agent.delegation import SUBAGENT_IDENTITY, Delegation, Limits
from agent.goal_judge import Judge
from agent.llm import LLMClient
from agent.memory import Memory
from agent.safety.sandbox import Sandbox
from agent.skills import SkillLibrary
from agent.tools import Tool, ToolRegistry
from agent.tools.builtin import BUILTIN_TOOLS
from agent.tools.learning import learning_tools
from agent.tools.system import system_tools
from gateway.access.pairing import Pairing
from gateway.access.policy import is_admin
from gateway.access.trust import Trust
from gateway.agents import Agents
from gateway.approvals import PREFIX as APPROVAL_PREFIX
from gateway.approvals import Approvals
from gateway.chat.command_handlers import REGISTRY, Commands, Services
from gateway.chat.control import Control
from gateway.chat.delivery import Delivery
from gateway.chat.files import OUTGOING, prune_files
from gateway.chat.inbound import Inbound
from gateway.chat.sessions import Sessions, WorkItem
from gateway.chat.turns import Turns
from gateway.config import Config
from gateway.connections import Connections, NothingToServe
from gateway.cron.jobs import CronJobs
from gateway.cron.ledger import RunLedger, new_instance_id
from gateway.cron.manage import TOOLSET as CRON_TOOLSET
from gateway.cron.manage import CronManager
from gateway.cron.runs import CronRuns
from gateway.cron.timers import CronTimers
from gateway.goals import Goals
from gateway.learning.consolidate import CONSOLIDATE_IDENTITY, consolidator
from gateway.learning.curator import Curator
from gateway.learning.review import REVIEW_IDENTITY, Learning
from gateway.learning.trajectories import Trajectories
from gateway.ops import systemd
from gateway.ops.metrics import Metrics
from gateway.ops.redact import redact
from gateway.retention import Retention
from gateway.storage import StorageError, Store
from gateway.storage.subagents import SubagentStore
from gateway.tick import Tick
from gateway.usage import UsageLedger
from platforms.base import ButtonPress, PlatformAdapter

if TYPE_CHECKING:
    from gateway.ops.http import HttpServer

log = logging.getLogger(__name__)

ButtonHandler = Callable[[ButtonPress], Awaitable[str]]
FIRST_TRY_WAIT = 10.0  # seconds start waits for the platforms' first tries (a slow one goes on trying meanwhile)


class GatewayRunner:
    """Builds the gateway's parts from its configuration (in `start`, in the order each needs the others),
    starts them, and stops them in reverse. Each part is given only what it uses."""

    def __init__(self, config: Config, adapters: Sequence[PlatformAdapter] | None = None) -> None:
        self.config = config
        chosen = list(adapters) if adapters is not None else config.adapters()
        self.adapters: dict[str, PlatformAdapter] = {a.name: a for a in chosen}
        self.local = frozenset(a.name for a in chosen if a.capabilities.local)  # trusted surfaces (check_access)
        self.metrics = Metrics()
        self.state = "stopped"  # stopped | starting | running | draining
        self.button_handlers: dict[str, ButtonHandler] = {}  # data prefix → handler
        self._tasks: set[asyncio.Task[Any]] = set()
        self.failed = asyncio.Event()  # set when every platform has hit an error it cannot recover from
        self.failure: str | None = None
        self.connections = Connections(chosen, self._connected)
        self.store: Store | None = None
        self.agents: Agents | None = None
        self.http: "HttpServer | None" = None
        self.sessions: Sessions | None = None
        self.delivery: Delivery | None = None
        self.approvals: Approvals | None = None
        self.tick: Tick | None = None
        self.cron_timers: CronTimers | None = None
        self.learning: Learning | None = None
        self.trajectories: Trajectories | None = None
        self.inbound: Inbound | None = None

    @property
    def llm(self) -> LLMClient | None:
        return self.agents.llm if self.agents is not None else None

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self.state != "stopped":
            return
        if not self.adapters:
            raise RuntimeError("no platform is enabled: enable platforms.webchat or configure a chat platform")
        if problem := self.config.workspace_problem():
            raise RuntimeError(problem)
        self.state = "starting"
        cfg = self.config
        self.store = store = await Store.open(cfg.db_path, durability=cfg.gateway.durability,
                                              lock_wait=cfg.gateway.lock_wait_seconds)
        self.pairing = Pairing(store.access)
        trust = Trust(cfg.access, self.pairing, self.local)  # whom every turn, run and review acts for
        self.usage = UsageLedger(store.usage)
        self.agents = agents = Agents(cfg, self.metrics, self.usage)
        admin = lambda platform, user: is_admin(cfg.access, platform, user)  # noqa: E731

        self.jobs = CronJobs(store.cron, default_tz=cfg.gateway.timezone, min_interval=cfg.cron.min_interval_seconds)
        ledger = RunLedger(store.cron, new_instance_id())
        self.cron = CronManager(self.jobs, store.cron, changed=self._jobs_changed, is_admin=admin,
                                max_jobs_per_person=cfg.cron.max_jobs_per_person)
        self.memory = Memory(cfg.home)
        self.skills = SkillLibrary(cfg.home, store.learning)
        def untrusted(platform: str, user: str) -> bool:  # whose writes to shared notes and skills wait
            return cfg.access.untrusted_learning == "quarantine" and platform not in self.local \
                and not admin(platform, user)

        self.sandbox = Sandbox(cfg.agent.sandbox.mode, network=cfg.agent.sandbox.network == "on",
                               hidden=[*cfg.private_paths(), Path.home()])
        self.tools = ToolRegistry([*BUILTIN_TOOLS, *system_tools(cfg.workspace, secrets=cfg.secrets(),
                                                                 timeout=cfg.agent.command_timeout_seconds,
                                                                 sandbox=self.sandbox, protected=cfg.private_paths(),
                                                                 unconfined=cfg.agent.sandbox.unconfined),
                                   self.cron.tool(), *learning_tools(self.memory, self.skills, untrusted),
                                   *await self._delegation(store.subagents, agents)])
        self.delivery = delivery = Delivery(store.outbox, store.inbox, self.adapters, self.metrics)
        self.learning = Learning(store, self.memory, self.skills, self.tools,
                                 review_agent=agents.review(REVIEW_IDENTITY), delivery=delivery, trust=trust,
                                 settings=cfg.review)
        self.approvals = approvals = Approvals(
            store.approvals, delivery, self.adapters, mode=cfg.approvals.mode, timeout=cfg.approvals.timeout_seconds,
            secrets_=cfg.secrets(), is_admin=lambda platform, user: platform in self.local or admin(platform, user),
            may_approve=lambda platform, user: user in cfg.access.allowed_users.get(platform, ())
            or cfg.approvals.paired_may_approve, always_scope=cfg.approvals.always_scope,
            spawn=lambda edit: self.spawn(edit, name="approval-outcome"))
        chat_agent = agents.chat()
        cron_runs = CronRuns(
            store=store, ledger=ledger, agent=chat_agent, delivery=delivery, approvals=approvals,
            tools=self.tools.scope(tools=[n for n in self.tools.names() if self.tools.get(n).toolset != CRON_TOOLSET]),
            consent=cfg.approvals, timezone=cfg.gateway.timezone,
            timeout=cfg.cron.run_timeout_seconds, trust=trust, session_ended=self.session_ended,
            agent_for_model=agents.chat, owner_may=trust.may_still_talk, pause=self._pause_job)
        self.tick = Tick(cfg.gateway.tick_seconds)
        self.cron_timers = CronTimers(self.tick, store.cron, ledger, cron_runs.run,
                                      grace_seconds=cfg.cron.grace_seconds, max_concurrent=cfg.cron.max_concurrent_runs,
                                      on_interrupted=cron_runs.interrupted)
        self.trajectories = Trajectories(store.sessions, cfg.home, cfg.secrets()) if cfg.trajectories.enabled else None
        consolidating = agents.on(agents.auxiliary, CONSOLIDATE_IDENTITY, cfg.review.max_iterations) \
            if cfg.curator.consolidate else None  # (None without a model)
        self.curator = Curator(store.learning, self.skills, cfg.home, settings=cfg.curator, idle_since=self._idle_since,
                               notify=self._tell_admins if cfg.curator.notify_admins else None,
                               consolidate=consolidator(consolidating, self.skills) if consolidating else None)
        await self.curator.first_started()
        self.retention = Retention(cfg, inbox=store.inbox, sessions=store.sessions, approvals=store.approvals,
                                   subagents=store.subagents, usage=self.usage, ledger=ledger, curator=self.curator,
                                   upkeep=store.upkeep, idle_since=self._idle_since)
        self.tick.add_hook("expire approvals", approvals.expire_overdue)
        self.tick.add_hook("expire pairing codes", store.access.expire_codes)
        self.tick.add_hook("prune old rows", self.retention.tick)  # (gateway.retention)
        self.tick.add_hook("prune old files", self._prune_files)
        self.tick.add_hook("send stranded replies", delivery.sweep)  # (a safety net: see gateway.chat.delivery)
        if cfg.curator.enabled:
            self.tick.add_hook("curator", self.curator.tick)
        self.button_handlers[APPROVAL_PREFIX] = approvals.on_button
        secrets = cfg.secrets()
        self.goals = goals = Goals(store.goals, store.inbox, delivery,
                                   Judge(agents.auxiliary) if agents.auxiliary else None, max_turns=cfg.goals.max_turns,
                                   dispatch=self._queue_goal_turn, spawn=self.spawn, trust=trust,
                                   max_resumes_per_day=cfg.goals.max_resumes_per_day)
        self.turns = Turns(store=store, agent=chat_agent, tools=self.tools.scope(), delivery=delivery,
                           metrics=self.metrics, busy_policy=cfg.gateway.busy_policy, timezone=cfg.gateway.timezone,
                           approvals=approvals, learning=self.learning, adapters=self.adapters, trust=trust,
                           files_root=cfg.home / "files", redact=lambda text: redact(text, secrets), goals=goals)
        services = Services(config=cfg, transcripts=store.sessions, goals=goals, approvals=approvals, cron=self.cron,
                            usage=self.usage, llm=agents.llm, session_ended=self.session_ended)
        commands = Commands(REGISTRY, services, inbox=store.inbox, delivery=delivery)
        # a session's worker runs an ordinary message's turn, or a queued command
        self.sessions = sessions = Sessions(self.turns.run, commands.run, cfg.gateway.session_idle_seconds)
        control = Control(delivery=delivery, pairing=self.pairing, llm=agents.llm, adapters=self.adapters)
        self.inbound = inbound = Inbound(
            cfg, local=self.local, inbox=store.inbox, transcripts=store.sessions, pairing=self.pairing,
            sessions=sessions, delivery=delivery, control=control, commands=commands, approvals=approvals,
            metrics=self.metrics, adapters=self.adapters, buttons=self.button_handlers, spawn=self.spawn,
            state=lambda: self.state)
        for adapter in self.adapters.values():
            adapter.set_callback(inbound.on_event, self._adapter_failed, self._adapter_health)
        await self._connect_and_serve()
        await approvals.expire_all("the gateway restarted")  # nobody is waiting for these any more
        await self._resume()
        self.state = "running"
        await delivery.start()
        await self.tick.start()
        await self.cron_timers.start()
        await self.tick.run_hooks()
        self.spawn(self._report_sandbox(), name="sandbox-probe")  # (a trial bwrap run: not on the way to ready)
        log.info("chatgate ready on http://%s:%s/ %s", cfg.http.host, self.http.port, self.summary())

    async def _connect_and_serve(self) -> None:
        """Every platform's first try at connecting, and the HTTP server; `NothingToServe` when every
        platform refused for good."""
        routes = [route for adapter in self.adapters.values() for route in adapter.http_routes()]
        if routes:  # a platform reaches us over HTTP (web chat, webhooks): serve before it connects
            await self._serve_http(routes)
        self.connections.begin()
        if not routes:  # polling platforms only: their first calls go out first (aiohttp.web is imported after)
            await self._serve_http(routes)
        slow = await self.connections.first_tries(FIRST_TRY_WAIT)
        if self.failed.is_set():
            raise NothingToServe(self.failure)
        if slow:
            log.info("still connecting: %s; chatgate serves meanwhile", ", ".join(slow))

    async def _serve_http(self, routes: list[Any]) -> None:
        from gateway.ops.http import HttpServer

        cfg = self.config.http
        self.http = HttpServer(cfg.host, cfg.port, routes=routes, readiness=self.readiness,
                               metrics=self._render_metrics, storage=self.store.check if self.store else None)
        await self.http.start()

    async def _report_sandbox(self) -> None:
        if await self.sandbox.ready() or self.sandbox.mode == "off":  # (a failure is warned about where found)
            log.info("tool sandbox: %s", self.sandbox.describe())
        if self.config.agent.sandbox.unconfined == "classifier":  # the operator's explicit opt-in: say what it costs
            log.warning("agent.sandbox.unconfined: classifier — %s any command the classifier calls safe (and whose "
                        "paths can be checked before it runs) runs WITHOUT asking, with chatgate's own rights (its "
                        "config, tokens, database, network). The classifier only knows dangers by name and misses "
                        "programs that run others (awk system(), sed e, find -fprintf, git -c, tar --to-command, "
                        "ssh -o ProxyCommand, …). The default "
                        "(allowlist) asks for everything but a short list of read-only commands on workspace files.",
                        "there is no sandbox here, so" if not await self.sandbox.ready()
                        else "bubblewrap works now; if it does not,")

    async def _resume(self) -> None:
        """Dispatch what an earlier run accepted but did not finish, then what arrived while starting.

        A turn that had started side-effecting tools is not run again: its person is told (`Turns`).
        """
        assert self.store is not None
        unfinished = await self.store.inbox.unfinished()
        if unfinished:
            log.info("resuming %d unfinished message(s)", len(unfinished))
        for u in unfinished:
            self.inbound.dispatch(self.inbound.item(u.inbox_id, u.session_key, u.msg,
                                                    draft_message_id=u.draft_message_id, effects=tuple(u.effects),
                                                    goal_turn=u.goal_turn, draft_intent=u.draft_intent))
        self.inbound.release_held(skip={u.inbox_id for u in unfinished})
        assert self.goals is not None
        self.spawn(self.goals.resume_pending(), name="goals-resume")  # (a judge request: not on the way to ready)

    def _queue_goal_turn(self, item: WorkItem) -> None:
        """A goal's next turn waits in its session's queue: it never interrupts or steers a person's turn.
        While draining it stays in the inbox for the next start."""
        if self.sessions is not None and self.state in ("starting", "running"):
            self.sessions.worker(item.key).submit(item)

    async def stop(self) -> None:
        if self.state in ("stopped", "draining"):
            return
        self.state = "draining"  # also after a failed start: close whatever was opened
        drain = self.config.gateway.drain_seconds
        if self.approvals is not None:  # waiting turns hear "expired" and finish
            try:
                await self.approvals.expire_all("the gateway shut down")
            except StorageError as exc:  # (the database failing: the next start expires them)
                log.warning("could not record the waiting approvals as expired: %s", exc)
        stopping = [self.sessions.drain(drain)] if self.sessions is not None else []
        if self.cron_timers is not None:  # scheduled runs and reviews get the same bound as chat turns
            stopping.append(self.cron_timers.stop(drain))
        if self.learning is not None:
            stopping.append(self.learning.stop(drain))
        for failed in await asyncio.gather(*stopping, return_exceptions=True):  # the rest still stops
            if isinstance(failed, Exception):  # (a storage error: what it did not record, the next start sees)
                log.error("stopping: %s", failed, exc_info=None if isinstance(failed, StorageError) else failed)
        if self.tick is not None:
            await self.tick.stop(drain)
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=max(drain, 1.0))
        if self.delivery is not None:
            await self.delivery.stop(timeout=max(drain, 1.0))
        await self.connections.stop()  # (tries under way end: what they opened is released)
        for adapter in reversed(list(self.adapters.values())):
            try:
                await adapter.stop()
            except Exception:
                log.exception("stopping %s failed", adapter.name)
        if self.http is not None:
            await self.http.stop()
        if self.agents is not None:
            await self.agents.aclose()
        if self.store is not None:  # (a start refused at the database leaves its one line alone)
            await self.store.close()
            log.info("chatgate stopped")
        self.state = "stopped"

    async def __aenter__(self) -> "GatewayRunner":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def session_ended(self, session_id: int) -> None:
        if self.trajectories is not None:
            self.spawn(self.trajectories.export(session_id), name="trajectory-export")

    async def _tell_admins(self, text: str) -> None:
        """A notice to every admin, in their direct chat (opened by the adapter where needed)."""
        assert self.delivery is not None
        for platform, admins in self.config.access.admins.items():
            adapter = self.adapters.get(platform)
            if adapter is None or platform in self.local:
                continue
            for admin in admins:
                try:
                    chat = await adapter.open_dm(str(admin))
                except Exception as exc:
                    log.warning("could not open a direct chat with %s admin %s: %s", platform, admin, exc)
                    continue
                await self.delivery.reply(chat, text)

    async def _idle_since(self) -> float | None:
        """Since when nothing has happened (no message in, no turn, review or scheduled run); None: busy now."""
        if self.sessions is None or self.sessions.busy_count() or (self.learning and self.learning.busy) \
                or (self.cron_timers and self.cron_timers.busy):
            return None
        return max(self.inbound.last_message_at if self.inbound else 0.0, self.turns.last_finished)

    async def _delegation(self, runs: SubagentStore, agents: Agents) -> list[Tool]:
        """`delegate_task`, when there is a model and `delegation.enabled`."""
        cfg = self.config.delegation
        children = agents.on(agents.llm, SUBAGENT_IDENTITY, cfg.max_iterations, compress=True) if cfg.enabled else None
        if children is None:
            return []
        await runs.interrupted()  # children an earlier process left running were cut off with it
        limits = Limits(cfg.max_concurrent, cfg.max_depth, cfg.max_children_per_turn)
        return [Delegation(children, runs, limits).tool()]

    async def _prune_files(self) -> None:
        for files in (self.config.home / "files", self.config.home / OUTGOING):  # received, and copies to send
            if files.is_dir():  # (no worker thread for nothing to do)
                await asyncio.to_thread(prune_files, files, time.time() - self.config.gateway.retention_days * 86400)

    async def _pause_job(self, job_id: int) -> None:
        await self.jobs.set_enabled(job_id, False)
        self._jobs_changed()

    def _jobs_changed(self) -> None:
        if self.cron_timers is not None:
            self.cron_timers.changed()

    async def _connected(self, adapter: PlatformAdapter) -> None:
        """A platform is up (at start, or later after tries): its command menu."""
        try:
            await adapter.set_commands(REGISTRY.menu())
        except Exception as exc:  # (a menu is a nicety: the platform serves without it)
            log.warning("%s: could not register the chat commands: %s", adapter.name, exc)

    def _adapter_failed(self, adapter: PlatformAdapter, reason: str) -> None:
        """A platform refused for good (the adapter logged what to fix). The rest serves on; when
        nothing is left that can, the gateway has failed."""
        if all(a.health.state == "failed" for a in self.adapters.values()):
            self.failure = "; ".join(f"{a.name}: {a.health.error}" for a in self.adapters.values())
            self.failed.set()

    def _adapter_health(self, adapter: PlatformAdapter) -> None:
        """A platform is ready again: what waited for it goes out now. systemd's status line says who serves."""
        if self.state != "running":
            return
        if adapter.ready and self.delivery is not None:
            self.spawn(self.delivery.flush(adapter.name), name=f"flush:{adapter.name}")
        systemd.notify(f"STATUS=running {self.summary()}")

    def summary(self) -> str:
        """"with webchat, telegram; down: discord" — who serves, and who does not."""
        states = {name: adapter.health.state for name, adapter in self.adapters.items()}
        serving = [name for name, state in states.items() if state == "ready"]
        others = [f"{name} {state}" for name, state in states.items() if state != "ready"]
        return f"with {', '.join(serving) or 'no platform ready'}" + (f"; {', '.join(others)}" if others else "")

    def readiness(self) -> dict[str, dict[str, Any]]:
        return {name: adapter.health.as_dict() for name, adapter in self.adapters.items()}

    async def _render_metrics(self) -> bytes:
        m = self.metrics
        for name, adapter in self.adapters.items():
            m.platform_up.labels(name).set(1 if adapter.ready else 0)
        if self.sessions is not None:
            m.active_sessions.set(len(self.sessions.workers))
            m.busy_sessions.set(self.sessions.busy_count())
            waiting = sum(len(w.queue) for w in self.sessions.workers.values())
            m.waiting.labels(self.config.gateway.busy_policy).set(waiting)
        if self.approvals is not None:
            m.approvals_pending.set(self.approvals.waiting)
        if self.store is not None:
            m.storage_waiting.set(self.store.health()["waiting"])
            counts = await self.store.inbox.trouble_counts()
            m.outbox.labels("pending").set(counts.get("pending_replies", 0))
            m.outbox.labels("failed").set(counts.get("failed_deliveries", 0))
        return m.render()

    def spawn(self, coro: Awaitable[Any], *, name: str | None = None) -> asyncio.Task[Any]:
        """A background task the runner keeps (and waits for at stop); its failure is logged, not lost."""
        task = asyncio.ensure_future(coro)
        if name:
            task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())
