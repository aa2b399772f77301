"""Prometheus metrics, in a registry of the runner's own (several runners can share a process): the
counters and histograms of what happens (`Metrics`); the gauges read at each scrape are `gateway.ops.gauges`.

prometheus_client (with the http.server it imports) is 14 ms of the time to ready and 1.3 MB of
an idle gateway, so it is imported, and the metrics made, when one is first touched: the first
message, or the first scrape of /metrics. The registry also has prometheus_client's own process,
platform and garbage-collector collectors (`process_*`, `python_*`), as its default registry would.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any


def version() -> str:
    """chatgate's installed version ("unknown" when run from a tree that was not installed)."""
    try:
        return metadata.version("chatgate")
    except metadata.PackageNotFoundError:
        return "unknown"


class Metrics:
    def __getattr__(self, name: str) -> Any:  # (only for attributes not made yet)
        if name.startswith("_") or "registry" in self.__dict__:
            raise AttributeError(name)
        self._make()
        return getattr(self, name)

    def _make(self) -> None:
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            GCCollector,
            Histogram,
            Info,
            PlatformCollector,
            ProcessCollector,
        )

        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        Info("chatgate_build", "The chatgate that runs", registry=r).info({"version": version()})
        self.llm_errors = Counter("chatgate_llm_errors", "LLM requests that failed for good, by kind (rate_limit, "
                                  "server, timeout, connection, auth, …)", ["kind"], registry=r)
        self.llm_retries = Counter("chatgate_llm_retries", "LLM requests made again, by the kind of failure before",
                                   ["kind"], registry=r)
        self.inbound = Counter("chatgate_inbound_messages", "Messages received", ["platform"], registry=r)
        self.duplicates = Counter("chatgate_duplicate_messages", "Re-delivered messages dropped", ["platform"],
                                  registry=r)
        self.turns = Counter("chatgate_turns", "Agent turns by outcome", ["outcome"], registry=r)
        self.turn_seconds = Histogram("chatgate_turn_seconds", "Time from turn start to reply queued",
                                      registry=r, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
        self.delivery_failures = Counter("chatgate_delivery_failures", "Replies given up on (blocked, rejected, "
                                         "too many failed attempts)", ["platform"], registry=r)
        self.dead_letters = Counter("chatgate_dead_letters", "Inbound input set aside after repeated failures",
                                    ["platform"], registry=r)
        self.refused = Counter("chatgate_refused_messages", "Messages not taken (too long, too many waiting)",
                               ["platform", "reason"], registry=r)
        self.outbound = Counter("chatgate_outbound_messages", "Message parts and files sent", ["platform"], registry=r)
        self.llm_seconds = Histogram("chatgate_llm_request_seconds", "One streamed LLM request, first byte to last",
                                     registry=r, buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 80, 160))
        self.llm_tokens = Counter("chatgate_llm_tokens", "Tokens the LLM endpoint reported, by loop (main, review,"
                                  " curator, cron)", ["kind", "loop"], registry=r)
        self.cron_lateness = Histogram("chatgate_cron_lateness_seconds", "Scheduled job runs: start minus due time",
                                       registry=r, buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900))

    def observe_llm(self, seconds: float, usage: dict[str, int] | None, loop: str) -> None:
        self.llm_seconds.observe(seconds)
        for kind in ("prompt", "completion"):
            if usage and usage.get(f"{kind}_tokens"):
                self.llm_tokens.labels(kind, loop).inc(usage[f"{kind}_tokens"])

    def count_llm(self, what: str, kind: str) -> None:
        """An LLM request that failed for good (`error`) or is made again (`retry`), by kind."""
        (self.llm_errors if what == "error" else self.llm_retries).labels(kind).inc()

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)
