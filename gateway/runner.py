"""The gateway runner: builds the parts (`gateway.assembly`), starts them in order and stops them in reverse.

Intake is `gateway.chat.inbound`, chat commands `gateway.chat.commands` (handlers: `gateway.chat.command_handlers`), a turn
`gateway.chat.turns`.

Start order: store → agent → HTTP server → adapters → resume unfinished work → accept. (With only
polling platforms, which nothing reaches over HTTP, the adapters' first calls go out before the HTTP
server starts.) Each adapter connects in a task of its own (`gateway.connections`): start waits for
every first try (up to `FIRST_TRY_WAIT`), and one that failed does not stop the others — it is
tried again while the rest serves. Only when every platform refused for good does start fail
(`NothingToServe`); the same at any later time sets `connections.failed`.
Stop order (SIGTERM, Ctrl-C): stop dispatching → let running turns finish up to
`gateway.drain_seconds` → flush the outbox → stop adapters → HTTP server → store. Messages that
arrive while starting or draining are stored and handled at the next start, never dropped.

Each part's stop is pushed on an `AsyncExitStack` as soon as it has started, so that stopping (or a start
that failed half-way) undoes exactly what was started, in reverse, and a stop that fails is logged while
the rest still stops.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

from agent.llm import sdk as llm_sdk
from gateway.assembly import Parts, build
from gateway.chat.command_handlers import REGISTRY
from gateway.config import Config
from gateway.connections import Connections, NothingToServe
from gateway.cron.ledger import new_instance_id
from gateway.leases import PlatformLeases
from gateway.ops.metrics import Metrics
from gateway.storage import StorageError, Store
from platforms.base import PlatformAdapter
from platforms.loops import Background

if TYPE_CHECKING:
    from gateway.ops.http import HttpServer

log = logging.getLogger(__name__)

FIRST_TRY_WAIT = 10.0  # seconds start waits for the platforms' first tries (a slow one goes on trying meanwhile)


class GatewayRunner:
    """Starts the gateway's parts (built from its configuration at start) and stops them in reverse."""

    def __init__(self, config: Config, adapters: Sequence[PlatformAdapter] | None = None) -> None:
        self.config = config
        chosen = list(adapters) if adapters is not None else config.adapters()
        self.adapters: dict[str, PlatformAdapter] = {a.name: a for a in chosen}
        self.metrics = Metrics()
        self.state = "stopped"  # stopped | starting | running | draining
        self.background = Background()
        self.connections = Connections(chosen, REGISTRY.offer_menu, ready_again=self._ready_again)
        self.instance_id = new_instance_id()  # (in the shared database: its heartbeat, runs and leases)
        self.parts: Parts | None = None  # once started
        self.http: "HttpServer | None" = None
        self._stack = AsyncExitStack()

    async def start(self) -> None:
        if self.state != "stopped":
            return
        if not self.adapters:
            raise RuntimeError("no platform is enabled: enable platforms.webchat or configure a chat platform")
        if problem := self.config.workspace_problem():
            raise RuntimeError(problem)
        self.state = "starting"
        cfg, stack = self.config, self._stack
        drain = cfg.gateway.drain_seconds
        store = await Store.open(cfg.db_path, url=cfg.database_url, durability=cfg.gateway.durability,
                                 lock_wait=cfg.gateway.lock_wait_seconds, instance=self.instance_id)
        stack.push_async_callback(_undo, "closing the database", _close, store)
        self.parts = parts = await build(cfg, store, self.adapters, metrics=self.metrics, background=self.background,
                                         state=lambda: self.state, instance_id=self.instance_id)
        stack.push_async_callback(_undo, "closing the LLM client", parts.agents.aclose)
        for adapter in self.adapters.values():
            adapter.set_callback(parts.inbound.on_event, self.connections.adapter_failed,
                                 self.connections.health_changed)
        await self._connect_and_serve(parts)
        await parts.delivery.start()
        stack.push_async_callback(_undo, "ending the life lease", parts.inbound.owners.life.stop)  # (after last sends)
        stack.push_async_callback(_undo, "sending the outbox", parts.delivery.stop, max(drain, 1.0))
        stack.push_async_callback(self.background.wait, max(drain, 1.0))
        await parts.tick.start()
        stack.push_async_callback(_undo, "stopping the tick", parts.tick.stop, drain)
        stack.push_async_callback(_undo, "giving the conversations up", parts.inbound.owners.stop)  # (once drained)
        stack.push_async_callback(_drain, parts, drain)
        await parts.approvals.expire_all("the gateway restarted")  # nobody is waiting for these any more
        await parts.inbound.resume()
        await parts.approvals.expire_orphaned("the gateway restarted")  # (several instances: a killed one's, gone
        # by the first look of `resume`)
        self.background.spawn(parts.goals.resume_pending(), name="goals-resume")  # (a judge request: not on the way to ready)
        self.state, self.connections.serving = "running", True
        await parts.cron_timers.start()
        await parts.tick.run_hooks()
        self.background.spawn(self._report_sandbox(parts), name="sandbox-probe")  # (a trial bwrap run: not on the way to ready)
        assert self.http is not None
        log.info("chatgate ready on http://%s:%s/ %s", cfg.http.host, self.http.port, self.connections.summary())

    async def warm(self) -> None:
        """What the first message would otherwise wait for, made once the gateway is ready: the `openai`
        import (in a worker thread) and the models' clients. (The metrics wait for their first use: see
        gateway.ops.metrics.)"""
        try:
            await llm_sdk()
            if self.parts is not None:
                await self.parts.agents.warm()
        except Exception as exc:  # (the first turn meets it again, and says so where it belongs)
            log.warning("could not prepare the model's client ahead of the first message (%s)", type(exc).__name__)

    async def _connect_and_serve(self, parts: Parts) -> None:
        """Every platform's first try at connecting, and the HTTP server; `NothingToServe` when every
        platform refused for good."""
        routes = [route for adapter in self.adapters.values() for route in adapter.http_routes()]
        if routes:  # a platform reaches us over HTTP (web chat, webhooks): serve before it connects
            await self._serve_http(routes, parts)
        self.connections.begin(PlatformLeases(parts.store.leases, self.instance_id, shared=parts.store.shared))
        self._stack.push_async_callback(self._stop_platforms)
        if not routes:  # polling platforms only: their first calls go out first (aiohttp.web is imported after)
            await self._serve_http(routes, parts)
        slow = await self.connections.first_tries(FIRST_TRY_WAIT)
        if self.connections.failed.is_set():
            raise NothingToServe(self.connections.failure)
        if slow:
            log.info("still connecting: %s; chatgate serves meanwhile", ", ".join(slow))

    async def _serve_http(self, routes: list[Any], parts: Parts) -> None:
        from gateway.ops.http import HttpServer

        cfg = self.config.http
        self.http = HttpServer(cfg.host, cfg.port, routes=routes, readiness=self.connections.readiness,
                               metrics=parts.gauges.render, storage=parts.store.check)
        await self.http.start()
        self._stack.push_async_callback(_undo, "stopping the HTTP server", self.http.stop)

    async def _stop_platforms(self) -> None:
        await self.connections.stop()  # (tries under way end: what they opened is released)
        for adapter in reversed(list(self.adapters.values())):
            await _undo(f"stopping {adapter.name}", adapter.stop)

    async def _report_sandbox(self, parts: Parts) -> None:
        sandbox = parts.sandbox
        if await sandbox.ready() or sandbox.mode == "off":  # (a failure is warned about where found)
            log.info("tool sandbox: %s", sandbox.describe())
        if self.config.agent.sandbox.unconfined == "classifier":  # the operator's explicit opt-in: say what it costs
            log.warning("agent.sandbox.unconfined: classifier — %s any command the classifier calls safe (and whose "
                        "paths can be checked before it runs) runs WITHOUT asking, with chatgate's own rights (its "
                        "config, tokens, database, network). The classifier only knows dangers by name and misses "
                        "programs that run others (awk system(), sed e, find -fprintf, git -c, tar --to-command, "
                        "ssh -o ProxyCommand, …). The default "
                        "(allowlist) asks for everything but a short list of read-only commands on workspace files.",
                        "there is no sandbox here, so" if not await sandbox.ready()
                        else "bubblewrap works now; if it does not,")

    def _ready_again(self, adapter: PlatformAdapter) -> None:
        """A platform is ready again: what waited for it goes out now."""
        if self.parts is not None:
            self.background.spawn(self.parts.delivery.flush(adapter.name), name=f"flush:{adapter.name}")

    async def stop(self) -> None:
        if self.state in ("stopped", "draining"):
            return
        self.state, self.connections.serving = "draining", False  # also after a failed start: undo what started
        await self._stack.aclose()
        self._stack = AsyncExitStack()
        self.state = "stopped"

    async def __aenter__(self) -> "GatewayRunner":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def _drain(parts: Parts, drain: float) -> None:
    """Waiting approvals hear "expired"; running turns, scheduled runs and reviews get `drain` seconds to
    finish (together), then are cut off (what they did not record, the next start sees)."""
    await _undo("recording the waiting approvals as expired", parts.approvals.expire_all, "the gateway shut down")
    stopping = [parts.sessions.drain(drain), parts.cron_timers.stop(drain), parts.learning.stop(drain)]
    for failed in await asyncio.gather(*stopping, return_exceptions=True):  # the rest still stops
        if isinstance(failed, Exception):
            log.error("stopping: %s", failed, exc_info=None if isinstance(failed, StorageError) else failed)


async def _close(store: Store) -> None:
    await store.close()
    log.info("chatgate stopped")


async def _undo(what: str, stop: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """One part's stop: a failure is logged (a storage error in one line), and the rest still stops."""
    try:
        await stop(*args)
    except Exception as exc:
        log.error("%s failed: %s", what, exc, exc_info=None if isinstance(exc, StorageError) else exc)
