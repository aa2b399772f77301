"""One asyncio worker per active session: it runs that session's turns strictly in order.

Workers are created on demand and exit after `idle_seconds` without work, so memory stays
bounded however many chats there are. The durable queue is the inbox table; a worker's
in-memory queue only holds ids of rows already stored there.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, Literal

from gateway.storage.outbox import SendIntent
from platforms.base import InboundMessage
from platforms.loops import finish_or_cancel, wait_event

if TYPE_CHECKING:
    from gateway.chat.commands import Command

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkItem:
    inbox_id: int
    key: str
    msg: InboundMessage
    draft_message_id: str | None = None  # a message an earlier, interrupted run of this turn sent
    effects: tuple[str, ...] = ()  # side-effecting tool calls an earlier, interrupted run had started
    goal_turn: tuple[int, int] | None = None  # a goal's turn: (goal id, turn number); None: a person's message
    draft_intent: SendIntent | None = None  # an earlier run started its draft's first send, id never recorded
    command: "Command | None" = None  # the text parsed at intake (`Inbound._parse`); None: an ordinary message

    @property
    def origin(self) -> Literal["person", "goal"]:
        """What the row is: a person's message, or the next turn of a goal."""
        return "person" if self.goal_turn is None else "goal"


Process = Callable[["SessionWorker", WorkItem], Awaitable[None]]


class SessionWorker:
    def __init__(self, key: str, turn: Process, command: Process,
                 idle_seconds: float, on_exit: Callable[["SessionWorker"], None]) -> None:
        self.key = key
        self._turn, self._command = turn, command  # an ordinary message (or a goal's turn); a queued command
        self._idle = idle_seconds
        self._on_exit = on_exit
        self.queue: deque[WorkItem] = deque()
        self.steered: deque[WorkItem] = deque()  # messages waiting to be folded into the running turn
        self._wake = asyncio.Event()
        self.current: WorkItem | None = None
        self.turn_task: asyncio.Task[None] | None = None
        self.cancel_reason: str | None = None
        self.answered = False  # the running turn has committed (or is committing) its reply
        self._closing = False
        self.task = asyncio.create_task(self._run(), name=f"session:{key}")

    @property
    def busy(self) -> bool:
        return self.current is not None

    def submit(self, item: WorkItem, *, front: bool = False) -> None:
        (self.queue.appendleft if front else self.queue.append)(item)
        self._wake.set()

    def cancel_turn(self, reason: str) -> bool:
        """Cancel the running turn; `reason` tells the turn how to record it. A turn whose reply is
        committed (`answered`) is past stopping: `/stop` and a newer message leave it to deliver its
        reply; only a shutdown cancels it (the outbox then sends the reply)."""
        if self.turn_task is None or self.turn_task.done() or (self.answered and reason != "shutdown"):
            return False
        self.cancel_reason = reason
        self.turn_task.cancel()
        return True

    def close(self) -> None:
        """Finish the current turn, take no new ones."""
        self._closing = True
        self._wake.set()

    async def _run(self) -> None:
        try:
            while not self._closing:
                if not self.queue:
                    self._wake.clear()
                    if not await wait_event(self._wake, self._idle) and not self.queue:
                        return
                    continue
                self.current = self.queue.popleft()
                self.cancel_reason, self.answered = None, False
                run = self._turn if self.current.command is None else self._command
                self.turn_task = asyncio.create_task(run(self, self.current))
                try:
                    await self.turn_task
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():  # the worker itself is being stopped
                        raise
                    # otherwise only the turn was cancelled (/stop, interrupt): carry on
                except Exception:
                    log.exception("turn failed in session %s", self.key)
                finally:
                    for left in reversed(self.steered):  # steered messages the turn did not take
                        self.queue.appendleft(left)
                    self.steered.clear()
                    self.current = None
                    self.turn_task = None
        finally:
            self._on_exit(self)


class Sessions:
    """The set of live workers, keyed by session key. Made first (a goal queues its turns here, and a turn
    reports to its goal), then given what runs a worker's items (`serve`), before anything is submitted."""

    def __init__(self, idle_seconds: float, *, accepting: Callable[[], bool] = lambda: True) -> None:
        self._turn: Process | None = None  # `Turns.run`
        self._command: Process | None = None  # `Commands.run`
        self._idle = idle_seconds
        self._accepting = accepting  # False while the gateway drains or is stopped
        self.workers: dict[str, SessionWorker] = {}

    def serve(self, turn: Process, command: Process) -> None:
        self._turn, self._command = turn, command

    def accepting(self) -> bool:
        """Whether turns may start (not while the gateway drains or is stopped)."""
        return self._accepting()

    def queue_goal_turn(self, item: WorkItem) -> None:
        """A goal's next turn waits in its session's queue: it never interrupts or steers a person's turn.
        While draining it stays in the inbox for the next start."""
        if self._accepting():
            self.worker(item.key).submit(item)

    def get(self, key: str) -> SessionWorker | None:
        return self.workers.get(key)

    def worker(self, key: str) -> SessionWorker:
        worker = self.workers.get(key)
        if worker is None:
            assert self._turn is not None and self._command is not None, "Sessions.serve first"
            worker = self.workers[key] = SessionWorker(key, self._turn, self._command, self._idle, self._forget)
        return worker

    def _forget(self, worker: SessionWorker) -> None:
        if self.workers.get(worker.key) is worker:
            del self.workers[worker.key]

    def busy_count(self) -> int:
        return sum(1 for w in self.workers.values() if w.busy)

    def waiting(self, key: str, user_id: str | None = None) -> int:
        """Messages of this session taken but not yet started (with `user_id`: that person's only)."""
        worker = self.workers.get(key)
        if worker is None:
            return 0
        if user_id is None:
            return len(worker.queue) + len(worker.steered)
        return sum(1 for items in (worker.queue, worker.steered) for i in items if i.msg.user_id == user_id)

    async def drain(self, timeout: float) -> None:
        """Let running turns finish (up to `timeout`), then cancel what is left, for a restart."""
        workers = list(self.workers.values())
        for worker in workers:
            worker.close()
        by_task = {worker.task: worker for worker in workers}
        await finish_or_cancel(by_task, timeout, before_cancel=lambda task: by_task[task].cancel_turn("shutdown"))
