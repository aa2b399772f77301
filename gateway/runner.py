"""The gateway runner: owns the store, adapters, HTTP server and session workers.

Start order: store → agent → HTTP server → adapters → resume unfinished work → accept.
Stop order (SIGTERM, Ctrl-C): stop dispatching → let running turns finish up to
`gateway.drain_seconds` → flush the outbox → stop adapters → HTTP server → store. Messages that
arrive while starting or draining are stored and handled at the next start, never dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any, Awaitable, Callable, Sequence

from agent.builtin_tools import BUILTIN_TOOLS
from agent.learning_tools import learning_tools
from agent.llm import LLMClient, LLMSettings
from agent.loop import Agent
from agent.memory import Memory
from agent.skills import SkillLibrary
from agent.tools import ToolRegistry
from agent.system_tools import system_tools
from gateway.access.policy import TRUSTED_PLATFORMS, check_access, is_admin
from gateway.approvals import NO, YES, Approvals
from gateway.approvals import PREFIX as APPROVAL_PREFIX
from gateway.commands import COMMANDS, Command, help_text, parse_command, unknown_text
from gateway.config import Config
from gateway.cron.jobs import CronJobs
from gateway.cron.ledger import RunLedger, new_instance_id
from gateway.cron.manage import TOOLSET as CRON_TOOLSET
from gateway.cron.manage import CronManager
from gateway.cron.runs import CronRuns
from gateway.cron.timers import CronTimers
from gateway.learning.consolidate import CONSOLIDATE_IDENTITY, consolidator
from gateway.learning.curator import Curator
from gateway.delivery import Delivery
from gateway.ops.http import HttpServer
from gateway.learning.review import REVIEW_IDENTITY, Learning
from gateway.ops.metrics import Metrics
from gateway.access.pairing import Pairing
from gateway.session_key import session_key
from gateway.learning.skill_usage import SkillUsage
from gateway.sessions import Sessions, SessionWorker, WorkItem
from gateway.store import Store
from gateway.learning.trajectories import Trajectories
from gateway.tick import Tick
from gateway.turns import NO_LLM, Turns
from platforms.base import ButtonPress, ChatOpened, ChatRef, InboundEvent, InboundMessage, PlatformAdapter

log = logging.getLogger(__name__)

ButtonHandler = Callable[[ButtonPress], Awaitable[str]]
LLM_PROBE_TTL = 60.0


def build_adapters(config: Config) -> list[PlatformAdapter]:
    """The adapters the configuration asks for; SDKs are imported only for those."""
    adapters: list[PlatformAdapter] = []
    telegram = config.platforms.telegram
    if telegram.enabled:
        from platforms.telegram.adapter import TelegramAdapter

        assert telegram.token is not None
        adapters.append(TelegramAdapter(
            telegram.token.get_secret_value(), base_url=telegram.base_url, mode=telegram.mode,
            webhook_url=telegram.webhook_url,
            webhook_secret=telegram.webhook_secret.get_secret_value() if telegram.webhook_secret else None,
            files_dir=config.home / "files" / "telegram", max_file_bytes=int(telegram.max_file_mb * 1024 * 1024),
            poll_timeout=telegram.poll_timeout))
    webchat = config.platforms.webchat
    if webchat.enabled or (webchat.enabled is None and not adapters):
        from platforms.webchat.adapter import WebChatAdapter

        token = webchat.token.get_secret_value() if webchat.token else None
        adapters.append(WebChatAdapter(token=token))
    return adapters


class GatewayRunner:
    def __init__(self, config: Config, adapters: Sequence[PlatformAdapter] | None = None) -> None:
        self.config = config
        chosen = list(adapters) if adapters is not None else build_adapters(config)
        self.adapters: dict[str, PlatformAdapter] = {a.name: a for a in chosen}
        self.metrics = Metrics()
        self.state = "stopped"  # stopped | starting | running | draining
        self.last_inbound = time.time()
        self.button_handlers: dict[str, ButtonHandler] = {}  # data prefix → handler
        self._held: list[WorkItem] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._llm_problem: tuple[float, str | None] | None = None
        self.failed = asyncio.Event()  # set when an adapter hits an error it cannot recover from
        self.failure: str | None = None
        self.store: Store | None = None
        self.pairing: Pairing | None = None
        self.llm: LLMClient | None = None
        self.http: HttpServer | None = None
        self.sessions: Sessions | None = None
        self.delivery: Delivery | None = None
        self.approvals: Approvals | None = None
        self.tick: Tick | None = None
        self.cron_timers: CronTimers | None = None
        self.learning: Learning | None = None
        self.trajectories: Trajectories | None = None
        self._closing: list[LLMClient] = []  # further LLM clients to close at stop

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self.state != "stopped":
            return
        if not self.adapters:
            raise RuntimeError("no platform is enabled: enable platforms.webchat or configure a chat platform")
        self.state = "starting"
        cfg = self.config
        self.store = await Store.open(cfg.db_path)
        self.pairing = Pairing(self.store)
        if cfg.llm.configured:
            self.llm = LLMClient(LLMSettings(
                model=cfg.llm.model, base_url=cfg.llm.base_url,
                api_key=cfg.llm.api_key.get_secret_value() if cfg.llm.api_key else None,
                timeout=cfg.llm.timeout_seconds, max_retries=cfg.llm.max_retries, temperature=cfg.llm.temperature))
        agent = Agent(self.llm, identity=cfg.agent.identity, max_iterations=cfg.agent.max_iterations) if self.llm else None
        admin = lambda platform, user: is_admin(cfg.access, platform, user)  # noqa: E731
        self.jobs = CronJobs(self.store, default_tz=cfg.gateway.timezone, min_interval=cfg.cron.min_interval_seconds)
        ledger = RunLedger(self.store, new_instance_id())
        self.cron = CronManager(self.jobs, ledger, changed=self._jobs_changed, is_admin=admin)
        self.memory = Memory(cfg.home)
        self.skill_usage = SkillUsage(self.store)
        self.skills = SkillLibrary(cfg.home, self.skill_usage)
        self.tools = ToolRegistry([*BUILTIN_TOOLS, *system_tools(cfg.workspace, secrets=cfg.secrets(),
                                                                 timeout=cfg.agent.command_timeout_seconds),
                                   self.cron.tool(), *learning_tools(self.memory, self.skills)])
        self.delivery = Delivery(self.store, self.adapters)
        self.learning = Learning(self.store, self.memory, self.skills, self.tools, review_agent=self._review_agent(),
                                 delivery=self.delivery, memory_every=cfg.review.memory_every_turns,
                                 skill_every=cfg.review.skill_every_iterations,
                                 max_concurrent=cfg.review.max_concurrent, notify=cfg.review.notify)
        self.approvals = Approvals(self.store, self.delivery, self.adapters, mode=cfg.approvals.mode,
                                   timeout=cfg.approvals.timeout_seconds, secrets_=cfg.secrets(), is_admin=admin)
        cron_runs = CronRuns(
            store=self.store, ledger=ledger, agent=agent, delivery=self.delivery, approvals=self.approvals,
            tools=self.tools.scope(tools=[n for n in self.tools.names() if self.tools.get(n).toolset != CRON_TOOLSET]),
            approvals_mode=cfg.approvals.mode, cron_approvals=cfg.approvals.cron, timezone=cfg.gateway.timezone,
            timeout=cfg.cron.run_timeout_seconds, session_ended=self.session_ended)
        self.tick = Tick(cfg.gateway.tick_seconds)
        self.cron_timers = CronTimers(self.tick, self.jobs, ledger, cron_runs.run, grace_seconds=cfg.cron.grace_seconds,
                                      max_concurrent=cfg.cron.max_concurrent_runs, on_interrupted=cron_runs.interrupted)
        self.tick.add_hook("expire approvals", self.approvals.expire_overdue)
        self.tick.add_hook("expire pairing codes", self.pairing.expire)
        self.tick.add_hook("prune old messages",
                           lambda: self.store.prune(time.time() - cfg.gateway.retention_days * 86400))
        self.trajectories = Trajectories(self.store, cfg.home, cfg.secrets()) if cfg.trajectories.enabled else None
        self.curator = Curator(self.store, self.skills, self.skill_usage, cfg.home,
                               interval_hours=cfg.curator.interval_hours, min_idle_hours=cfg.curator.min_idle_hours,
                               stale_days=cfg.curator.stale_days, archive_days=cfg.curator.archive_days,
                               keep_snapshots=cfg.curator.keep_snapshots, idle_since=self._idle_since,
                               notify=self._tell_admins if cfg.curator.notify_admins else None,
                               consolidate=consolidator(Agent(self.llm, identity=CONSOLIDATE_IDENTITY,
                                                             max_iterations=cfg.review.max_iterations), self.skills)
                               if cfg.curator.consolidate and self.llm is not None else None)
        await self.curator.first_started()
        if cfg.curator.enabled:
            self.tick.add_hook("curator", self.curator.tick)
        self.button_handlers[APPROVAL_PREFIX] = self.approvals.on_button
        self.turns = Turns(store=self.store, agent=agent, tools=self.tools.scope(), delivery=self.delivery,
                                metrics=self.metrics, busy_policy=cfg.gateway.busy_policy, timezone=cfg.gateway.timezone,
                                approvals=self.approvals, learning=self.learning)
        self.sessions = Sessions(self._process, cfg.gateway.session_idle_seconds)
        for adapter in self.adapters.values():
            adapter.set_callback(self.on_event, self._adapter_failed)
        routes = [route for adapter in self.adapters.values() for route in adapter.http_routes()]
        self.http = HttpServer(cfg.http.host, cfg.http.port, routes=routes, readiness=self.readiness,
                               metrics=self._render_metrics)
        await self.http.start()
        for adapter in self.adapters.values():
            await adapter.start()
            await adapter.set_commands(COMMANDS)
        await self.approvals.expire_all("the gateway restarted")  # nobody is waiting for these any more
        await self._resume()
        self.state = "running"
        await self.delivery.start()
        await self.tick.start()
        await self.cron_timers.start()
        await self.tick.run_hooks()
        if self.llm is not None:  # import the LLM client off the loop now, not during the first turn
            self._spawn(asyncio.to_thread(self.llm.warm_up))
        log.info("chatgate ready on http://%s:%s/ with %s", cfg.http.host, self.http.port, ", ".join(self.adapters))

    async def _resume(self) -> None:
        """Dispatch what an earlier run accepted but did not finish, then what arrived while starting."""
        assert self.store is not None
        unfinished = await self.store.inbox_unfinished()
        seen = {inbox_id for inbox_id, _, _ in unfinished}
        if unfinished:
            log.info("resuming %d unfinished message(s)", len(unfinished))
        for inbox_id, key, msg in unfinished:
            self._dispatch(WorkItem(inbox_id, key, msg))
        for item in self._held:
            if item.inbox_id not in seen:
                self._dispatch(item)
        self._held.clear()

    async def stop(self) -> None:
        if self.state in ("stopped", "draining"):
            return
        self.state = "draining"  # also after a failed start: close whatever was opened
        drain = self.config.gateway.drain_seconds
        if self.approvals is not None:  # waiting turns hear "expired" and finish
            await self.approvals.expire_all("the gateway shut down")
        stopping = [self.sessions.drain(drain)] if self.sessions is not None else []
        if self.cron_timers is not None:  # scheduled runs and reviews get the same bound as chat turns
            stopping.append(self.cron_timers.stop(drain))
        if self.learning is not None:
            stopping.append(self.learning.stop(drain))
        await asyncio.gather(*stopping)
        if self.tick is not None:
            await self.tick.stop(drain)
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=max(drain, 1.0))
        if self.delivery is not None:
            await self.delivery.stop(timeout=max(drain, 1.0))
        for adapter in reversed(list(self.adapters.values())):
            try:
                await adapter.stop()
            except Exception:
                log.exception("stopping %s failed", adapter.name)
        if self.http is not None:
            await self.http.stop()
        for llm in [self.llm, *self._closing]:
            if llm is not None:
                await llm.aclose()
        if self.store is not None:
            await self.store.close()
        self.state = "stopped"
        log.info("chatgate stopped")

    async def __aenter__(self) -> "GatewayRunner":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def session_ended(self, session_id: int) -> None:
        if self.trajectories is not None:
            self._spawn(self.trajectories.export(session_id))

    async def _tell_admins(self, text: str) -> None:
        """A notice to every admin, in their direct chat (where a platform's DM id is the user id)."""
        assert self.delivery is not None
        for platform, admins in self.config.access.admins.items():
            if platform in self.adapters and platform != "webchat":
                for admin in admins:
                    await self.delivery.reply(ChatRef(platform, str(admin)), text)

    async def _idle_since(self) -> float | None:
        """Since when nothing has happened (no message in, no turn, review or scheduled run); None: busy now."""
        if self.sessions is None or self.sessions.busy_count() or (self.learning and self.learning.busy) \
                or (self.cron_timers and self.cron_timers.busy):
            return None
        return max(self.last_inbound, self.turns.last_finished)

    def _review_agent(self) -> Agent | None:
        """The agent the review fork runs: the same endpoint, perhaps a cheaper model."""
        review = self.config.review
        if self.llm is None or not review.enabled:
            return None
        llm = self.llm
        if review.model and review.model != self.llm.settings.model:
            llm = LLMClient(replace(self.llm.settings, model=review.model))
            self._closing.append(llm)
        return Agent(llm, identity=REVIEW_IDENTITY, max_iterations=review.max_iterations)

    def _jobs_changed(self) -> None:
        if self.cron_timers is not None:
            self.cron_timers.changed()

    def _adapter_failed(self, adapter: PlatformAdapter, reason: str) -> None:
        self.failure = f"{adapter.name}: {reason}"
        self.failed.set()

    def readiness(self) -> dict[str, str]:
        return {name: adapter.status for name, adapter in self.adapters.items()}

    def _render_metrics(self) -> bytes:
        self.metrics.active_sessions.set(len(self.sessions.workers))
        self.metrics.busy_sessions.set(self.sessions.busy_count())
        return self.metrics.render()

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- inbound --------------------------------------------------------------------------

    async def on_event(self, event: InboundEvent) -> bool | None:
        """The one callback every adapter uses."""
        if isinstance(event, InboundMessage):
            return await self._on_message(event)
        if isinstance(event, ButtonPress):
            await self._on_button(event)
        elif isinstance(event, ChatOpened):
            self._spawn(self._chat_opened(event))
        return None

    async def _on_message(self, msg: InboundMessage) -> bool:
        assert self.store is not None
        self.metrics.inbound.labels(msg.platform).inc()
        self.last_inbound = time.time()
        assert self.pairing is not None
        paired = msg.platform not in TRUSTED_PLATFORMS and await self.pairing.is_paired(msg.platform, msg.user_id)
        decision = check_access(msg, self.config.access, paired=paired,
                                require_mention=self.config.platforms.require_mention(msg.platform, msg.chat_id))
        if decision == "pair":
            await self._offer_pairing(msg)
        if decision != "allow":
            return True
        key = session_key(msg, self.config.gateway.group_sessions)
        inbox_id = await self.store.inbox_add(msg, key)
        if inbox_id is None:
            self.metrics.duplicates.labels(msg.platform).inc()
            log.info("dropped a re-delivered %s message %s", msg.platform, msg.message_id)
            return False
        item = WorkItem(inbox_id, key, msg)
        if self.state == "starting":
            self._held.append(item)
        elif self.state == "running":
            self._dispatch(item)
        return True  # while draining it stays in the inbox for the next start

    async def _offer_pairing(self, msg: InboundMessage) -> None:
        """An unknown person wrote in a DM: send a pairing code (rate-limited) and nothing else."""
        assert self.pairing is not None
        code = await self.pairing.request(msg.platform, msg.user_id, msg.user_name, msg.chat_id)
        if code is None:
            return
        log.info("pairing code issued for %s user %s (%s)", msg.platform, msg.user_id, msg.user_name)
        await self.delivery.reply(msg.chat, (
            f"Hi {msg.user_name or 'there'}! I only talk to people my owner has approved. "
            f"Your pairing code is {code} — ask the owner to run:\n"
            f"chatgate pair approve {msg.platform} {code}\nThe code expires in one hour."))

    def _dispatch(self, item: WorkItem) -> None:
        command = parse_command(item.msg.text)
        if command is not None and command.immediate:
            self._spawn(self._control(command, item))
            return
        answer = item.msg.text.strip().lower().rstrip(".!")
        if (answer in YES or answer in NO) and self.approvals is not None \
                and len(self.approvals.pending_in(item.key)) == 1:  # a bare yes/no answers the one waiting request
            self._spawn(self._control(Command("approve" if answer in YES else "deny", ""), item))
            return
        worker = self.sessions.worker(item.key)
        policy = self.config.gateway.busy_policy
        if worker.busy and command is None:
            if policy == "interrupt":
                worker.cancel_turn("interrupt")
            elif policy == "steer" and not worker.queue:
                worker.steered.append(item)
                return
        worker.submit(item)

    async def _process(self, worker: SessionWorker, item: WorkItem) -> None:
        """A worker's unit of work: a queued command or an agent turn."""
        command = parse_command(item.msg.text)
        if command is not None and command.name in ("new", "reset"):
            assert self.store is not None
            ended = await self.store.end_session(item.key)
            text = ("Started a new session. The previous conversation is saved and still searchable."
                    if ended is not None else "This is already a fresh session.")
            if ended is not None:
                self.session_ended(ended)
            await self.delivery.reply(item.msg.chat, text, done_inbox_id=item.inbox_id)
            return
        await self.turns.run(worker, item)

    async def _control(self, command: Command, item: WorkItem) -> None:
        """Commands that act at once, even while a turn runs."""
        worker = self.sessions.get(item.key)
        if command.name == "stop":
            stopped = worker is not None and worker.cancel_turn("stop")
            text = "Stopped the running request." if stopped else "Nothing is running."
        elif command.name == "status":
            text = await self._status_text(item.key, worker)
        elif command.name in ("approve", "deny"):
            assert self.approvals is not None
            msg = item.msg
            text = await self.approvals.on_command(item.key, msg.platform, msg.user_id, msg.user_name,
                                                   command.name == "approve", command.args)
        elif command.name == "cron":
            text = await self.cron.command(command.args, platform=item.msg.platform, user_id=item.msg.user_id,
                                           chat=item.msg.chat, session_key=item.key)
        elif command.name == "help":
            text = help_text()
        else:
            text = unknown_text(command)
        await self.delivery.reply(item.msg.chat, text, done_inbox_id=item.inbox_id)

    async def _status_text(self, key: str, worker: SessionWorker | None) -> str:
        assert self.store is not None
        summary = await self.store.session_summary(key)
        lines = [f"Session: {summary['id']} ({summary['messages']} messages)" if summary else "Session: not started"]
        state = "running a request" if worker is not None and worker.busy else "idle"
        queued = len(worker.queue) if worker is not None else 0
        lines.append(f"State: {state}" + (f", {queued} message(s) waiting" if queued else ""))
        lines.append(f"Model: {self.config.llm.model}" if self.llm else "Model: not configured")
        lines.append(f"Busy policy: {self.config.gateway.busy_policy}")
        return "\n".join(lines)

    async def _on_button(self, press: ButtonPress) -> None:
        answer = "This button is no longer active."
        try:
            for prefix, handler in self.button_handlers.items():
                if press.data.startswith(prefix):
                    answer = await handler(press)
                    break
        finally:  # always answered, so the client's spinner stops
            if press.answer is not None:
                await press.answer(answer)

    async def _chat_opened(self, event: ChatOpened) -> None:
        """A chat is reachable again: deliver what waits for it, and warn if the LLM is missing."""
        await self.delivery.flush(event.platform, event.chat_id, force=True)
        problem = await self._llm_status()
        adapter = self.adapters.get(event.platform)
        if problem and adapter is not None:
            try:
                await adapter.notice(ChatRef(event.platform, event.chat_id), problem)
            except Exception as exc:
                log.debug("could not show LLM notice: %s", exc)

    async def _llm_status(self) -> str | None:
        if self.llm is None:
            return NO_LLM
        now = time.monotonic()
        if self._llm_problem is None or now - self._llm_problem[0] > LLM_PROBE_TTL:
            reason = await self.llm.probe()
            self._llm_problem = (now, f"The language model is not reachable: {reason}" if reason else None)
        return self._llm_problem[1]
