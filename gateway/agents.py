"""The agents the gateway runs, on their language models (`llm.*`): the chat agent, a cron job's
model, the background review, the curator's consolidation, subagents, context compression.

One `LLMClient` per endpoint and model; the SDK clients behind them are one per endpoint, shared,
and closed at stop (`aclose`). Every request's time and tokens go to `/metrics` and the usage
ledger, by the loop that made it (`agent.usage`); its failures and retries, by kind, to `/metrics`.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agent import usage as usage_scope
from agent.compression import Compressor
from agent.llm import Endpoints, LLMClient, LLMSettings
from agent.loop import Agent

if TYPE_CHECKING:
    from gateway.config import Config
    from gateway.ops.metrics import Metrics
    from gateway.usage import UsageLedger


class Agents:
    def __init__(self, config: "Config", metrics: "Metrics", usage: "UsageLedger") -> None:
        self.config = config
        self._metrics = metrics
        self._usage = usage
        self._clients: dict[LLMSettings, LLMClient] = {}  # one per endpoint and model
        self._endpoints = Endpoints()  # the SDK's clients, one per endpoint, shared by those
        self._window: asyncio.Future[int | None] | None = None  # the endpoint's context window, once asked
        llm = config.llm
        self.llm: LLMClient | None = self._client(LLMSettings(
            model=llm.model, base_url=llm.base_url, api_key=llm.api_key.get_secret_value() if llm.api_key else None,
            timeout=llm.timeout_seconds, max_retries=llm.max_retries, temperature=llm.temperature,
            turn_timeout=llm.turn_timeout_seconds)) if llm.configured else None
        # reviews, the curator, compression: `llm.auxiliary`, else the main endpoint and model
        self.auxiliary: LLMClient | None = self._auxiliary(self.llm) if self.llm is not None else None

    def chat(self, model: str | None = None) -> Agent | None:
        """The agent of chat turns (None: no model configured); `model`: the same on another model (a cron
        job's)."""
        if self.llm is None:
            return None
        llm = self._client(replace(self.llm.settings, model=model)) if model else self.llm
        return Agent(llm, identity=self.config.agent.identity, max_iterations=self.config.agent.max_iterations,
                     compressor=self.compressor())

    def on(self, llm: LLMClient | None, identity: str, max_iterations: int, *, compress: bool = False) -> Agent | None:
        """An agent of another identity (a review, the curator's consolidation, a subagent) on `llm`."""
        if llm is None:
            return None
        return Agent(llm, identity=identity, max_iterations=max_iterations,
                     compressor=self.compressor() if compress else None)

    def review(self, identity: str) -> Agent | None:
        """The agent the review fork runs: on the auxiliary model (or `review.model`, if set)."""
        review = self.config.review
        if self.auxiliary is None or not review.enabled:
            return None
        llm = self._client(replace(self.auxiliary.settings, model=review.model)) if review.model else self.auxiliary
        return self.on(llm, identity, review.max_iterations)

    def compressor(self) -> Compressor | None:
        """Context compression on the auxiliary model (`compression.*`, `llm.context_window`)."""
        cfg = self.config.compression
        if not cfg.enabled or self.auxiliary is None:
            return None
        return Compressor(self.auxiliary, self.config.llm.context_window, threshold=cfg.threshold,
                          protect_last_n=cfg.protect_last_n, window_source=self._context_window)

    async def warm(self) -> None:
        """The SDK's clients of the models' endpoints, made now (about 40 ms of CPU each, most of it an SSL
        context) rather than in the first turn."""
        for llm in (self.llm, self.auxiliary):
            if llm is not None:
                await self._endpoints.client(llm.settings)

    async def aclose(self) -> None:
        await self._endpoints.aclose()

    async def _context_window(self) -> int | None:
        """The main model's window as its endpoint states it: asked once, the answer shared."""
        if self._window is None:
            assert self.llm is not None
            self._window = asyncio.ensure_future(self.llm.context_window())
        return await asyncio.shield(self._window)

    def _client(self, settings: LLMSettings) -> LLMClient:
        """The client for these settings (one per endpoint and model, sharing its connections)."""
        llm = self._clients.get(settings)
        if llm is None:
            llm = self._clients[settings] = LLMClient(settings, self._endpoints)
            llm.observer = self._observe
            llm.trouble = self._metrics.count_llm
        return llm

    def _auxiliary(self, main: LLMClient) -> LLMClient:
        aux = self.config.llm.auxiliary
        changes: dict[str, Any] = {}
        if aux.base_url:
            changes["base_url"] = aux.base_url
        if aux.api_key is not None:
            changes["api_key"] = aux.api_key.get_secret_value()
        if aux.model:
            changes["model"] = aux.model
        return self._client(replace(main.settings, **changes))

    def _observe(self, seconds: float, usage: dict[str, int] | None, model: str) -> None:
        """Each LLM request: its time and tokens in /metrics, its tokens in the store, by loop."""
        scope = usage_scope.CURRENT.get()
        self._metrics.observe_llm(seconds, usage, scope.loop)
        self._usage.record(scope, model, usage)
