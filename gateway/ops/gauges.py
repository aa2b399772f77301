"""The gauges of the moment, read when /metrics is scraped: which platforms are up, live and busy
sessions, messages waiting behind a turn, approvals waiting for a person, turns waiting for the
database, the outbox's pending and failed replies, and the task board's tasks by status (one GROUP BY:
`BoardStore.counts`). They live in `Metrics`' registry, made at the first scrape."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sized

if TYPE_CHECKING:
    from gateway.ops.metrics import Metrics
    from gateway.storage import Store
    from platforms.base import PlatformAdapter


class _Worker(Protocol):
    queue: Sized


class _Sessions(Protocol):  # (what is read of `gateway.chat.sessions.Sessions`)
    workers: Mapping[str, _Worker]

    def busy_count(self) -> int: ...


class _Approvals(Protocol):  # (of `gateway.approvals.Approvals`)
    @property
    def waiting(self) -> int: ...


class Gauges:
    def __init__(self, metrics: "Metrics", *, adapters: Mapping[str, "PlatformAdapter"], sessions: _Sessions,
                 approvals: _Approvals, store: "Store", busy_policy: str) -> None:
        self.metrics = metrics
        self.adapters, self.sessions, self.approvals, self.store = adapters, sessions, approvals, store
        self.busy_policy = busy_policy
        self._gauges: dict[str, Any] = {}

    def _made(self) -> dict[str, Any]:
        if not self._gauges:
            from prometheus_client import Gauge

            r = self.metrics.registry
            self._gauges = {
                "platform_up": Gauge("chatgate_platform_up", "1 while the platform is connected and ready, else 0 "
                                     "(starting, down and tried again, failed)", ["platform"], registry=r),
                "active_sessions": Gauge("chatgate_active_sessions", "Live session workers", registry=r),
                "busy_sessions": Gauge("chatgate_busy_sessions", "Sessions running a turn", registry=r),
                "waiting": Gauge("chatgate_waiting_messages", "Messages queued behind a running turn",
                                 ["busy_policy"], registry=r),
                "outbox": Gauge("chatgate_outbox_replies", "Replies in the outbox by state (pending, failed)",
                                ["state"], registry=r),
                "storage_waiting": Gauge("chatgate_storage_waiting", "Turns whose record and reply wait in memory"
                                         " for the database to take writes again", registry=r),
                "approvals_pending": Gauge("chatgate_approvals_pending", "Approval prompts waiting for a person",
                                           registry=r),
                "board": Gauge("chatgate_board_tasks", "Tasks on the task board by status (todo, ready, running,"
                               " blocked, done, archived)", ["status"], registry=r),
            }
        return self._gauges

    async def render(self) -> bytes:
        """Every metric, with the gauges read now."""
        g = self._made()
        for name, adapter in self.adapters.items():
            g["platform_up"].labels(name).set(1 if adapter.ready else 0)
        workers = self.sessions.workers.values()
        g["active_sessions"].set(len(workers))
        g["busy_sessions"].set(self.sessions.busy_count())
        g["waiting"].labels(self.busy_policy).set(sum(len(w.queue) for w in workers))
        g["approvals_pending"].set(self.approvals.waiting)
        g["storage_waiting"].set(self.store.health()["waiting"])
        counts = await self.store.inbox.trouble_counts()
        g["outbox"].labels("pending").set(counts.get("pending_replies", 0))
        g["outbox"].labels("failed").set(counts.get("failed_deliveries", 0))
        for status, tasks in (await self.store.board.counts()).items():  # (every status, zeros included)
            g["board"].labels(status).set(tasks)
        return self.metrics.render()
