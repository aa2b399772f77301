"""One run of a task: a goal in a session of its own, with its owner's rights.

The run's turns go on in the session `task:<id>` (a run after a lost or failed one reads what the earlier ones
did there): each turn is the agent's (the tools but the scheduled jobs'), then the judge's verdict
(`agent.goal_judge`) on it, up to `board.max_turns`. A turn reads the comments added since the last one (an
answer to its question among them). The agent's `board` tool may end a turn with a question for a person
(`TurnShare.ended`): the task is then `blocked` and the question goes to its chat. A dangerous command asks the
task's owner in the task's chat, as a scheduled job's run does with `approvals.cron: ask-owner`; a task without
a chat can ask nobody, so what needs consent is refused (unless approvals are off).

A task whose owner is no longer an allowed user (nor an admin) is not run in their name: it is blocked with the
reason and the admins are told, as a revoked person's scheduled jobs are paused.

The run keeps its heartbeat while it works; when the task is no longer its own (cancelled, or reclaimed as lost
by another instance — even if this instance claimed it again: a run is its instance and its attempt) the run is
stopped and writes nothing of the task's. A run that fails (the model, after its retries; a turn's error) frees
the task for another try after a backoff; after `board.max_attempts` runs the task is blocked and the admins are
told, once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Awaitable, Callable

from agent import usage as usage_scope
from agent.goal_judge import Judge
from agent.llm import LLMError
from agent.loop import Agent
from agent.tools import ApprovalPort, AskingFor, NobodyToAsk, Place, ToolContext, ToolScope, TurnShare
from gateway.access.trust import ALLOWED, Trust
from gateway.board.tasks import notice
from gateway.chat.delivery import Delivery
from gateway.storage.board import BoardStore, Task
from gateway.storage.outbox import OutboxItem
from gateway.storage.sessions import SessionStore
from platforms.base import ChatRef

log = logging.getLogger(__name__)

SESSION = "task:"  # a task's session key: task:<id>
ERROR_LIMIT = 300


def session_key(task_id: int) -> str:
    return f"{SESSION}{task_id}"


def task_of(key: str | None) -> int | None:
    """The task whose run a session key is (None: not a task's)."""
    rest = key[len(SESSION):] if key and key.startswith(SESSION) else ""
    return int(rest) if rest.isdigit() else None


def run_context(task: Task) -> str:
    return (f"You are working on task {task.id} of the task board: \"{task.title}\". Nobody is watching while you "
            "work: do the task yourself, turn by turn, and say what you did and what is left. When you need a "
            "decision or information only a person can give, call the board tool with action \"block\" and your "
            "question; the task waits for the answer. Split work into subtasks with the board tool's \"create\" "
            "when that helps (\"after\" orders them).")


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: str  # done | blocked | failed | refused (its owner may not have it run) | gone (not this run's any more)
    text: str = ""


class TaskRuns:
    def __init__(self, *, store: BoardStore, transcripts: SessionStore, agent: Agent | None, judge: Judge | None,
                 tools: ToolScope, approvals: ApprovalPort | None, consent_off: bool, trust: Trust,
                 delivery: Delivery, tell_admins: Callable[[str], Awaitable[None]], instance_id: str,
                 settings: Any, max_turns: int, timezone: str | None) -> None:
        self.store, self.transcripts, self.agent, self.judge = store, transcripts, agent, judge
        self.tools, self.approvals, self.consent_off, self.trust = tools, approvals, consent_off, trust
        self.delivery, self.tell_admins, self.me = delivery, tell_admins, instance_id
        self.settings, self.max_turns, self.timezone = settings, max_turns, timezone

    async def run(self, task: Task) -> None:
        """Run the claimed task to one of its ends (a shutdown frees it for the next start)."""
        work = asyncio.current_task()
        assert work is not None
        beat = asyncio.create_task(self._beat(task, work), name=f"task-beat:{task.id}")
        try:
            outcome = await self._started(task)
        except asyncio.CancelledError:
            if beat.done() and beat.result() is False:  # the task is not ours any more: nothing to write
                log.info("task %s is no longer this run's; its run stopped", task.id)
                return
            await asyncio.shield(self.store.release(task.id, self.me, kind="interrupted",
                                                    text="the gateway stopped during the run"))
            raise
        except Exception as exc:  # (a turn's error that is not the model's: a bug, a storage failure)
            log.exception("task %s: its run failed", task.id)
            outcome = Outcome("failed", (str(exc) or type(exc).__name__)[:ERROR_LIMIT])
        finally:
            beat.cancel()
        await self._end(task, outcome)

    async def _started(self, task: Task) -> Outcome:
        """The run, once its owner may still have it (a revoked person's task does not run in their name, as
        their scheduled jobs do not) and its chat was told (inside the run: a notice that cannot be queued
        fails the run, which frees the task, rather than leaving it `running` with no run)."""
        if task.owner is not None and self.trust.known_rank(*task.owner) < ALLOWED:
            return Outcome("refused", "the person who added it may no longer use the task board")
        await self._send(notice(task, "started") if task.attempts == 1 else None, queue=True)
        limit = self.settings.run_timeout_seconds
        try:
            async with asyncio.timeout(limit):  # (an approval nobody answers, turn after turn, holds no slot forever)
                return await self._goal(task)
        except TimeoutError:
            return Outcome("failed", f"it did not finish within {limit:g} s (board.run_timeout_seconds)")

    async def _beat(self, task: Task, work: asyncio.Task[Any]) -> bool:
        """The heartbeat, until the run ends; when the task is not the run's any more, the run is stopped."""
        every = max(self.settings.stale_seconds / 4, 0.2)
        while True:
            await asyncio.sleep(every)
            try:
                ours = await self.store.beat(task.id, self.me, task.attempts)
            except Exception as exc:  # (a storage hiccup: the next beat tries again, the stale limit is 4 beats)
                log.warning("task %s: heartbeat failed: %s", task.id, exc)
                continue
            if not ours:
                work.cancel()
                return False

    async def _end(self, task: Task, outcome: Outcome) -> None:
        if outcome.kind == "done":
            told = notice(replace(task, result=outcome.text, status="done"), "done")
            if await self.store.finish(task.id, self.me, outcome.text, told) is not None:
                await self._send(told)
        elif outcome.kind == "blocked":
            told = notice(replace(task, question=outcome.text), "blocked")
            if await self.store.block(task.id, self.me, outcome.text, None, told) is not None:
                await self._send(told)
        elif outcome.kind == "failed":
            await self._failed(task, outcome.text)
        elif outcome.kind == "refused":  # (its chat may be the revoked person's: the admins are told)
            if await self.store.block(task.id, self.me, None, outcome.text, None) is not None:
                log.warning("task %s was not run: %s", task.id, outcome.text)
                await self.tell_admins(f"⚠️ Task {task.id} ({task.title}) was not run: {outcome.text}. An admin "
                                       f"can cancel it (/task cancel {task.id} or chatgate board cancel {task.id}).")

    async def _failed(self, task: Task, reason: str) -> None:
        if task.attempts < self.settings.max_attempts:
            pause = self.settings.retry_seconds * 2 ** (task.attempts - 1)
            log.warning("task %s: run %d failed (%s); trying again in %.0fs", task.id, task.attempts, reason, pause)
            await self.store.release(task.id, self.me, kind="failed", text=reason,
                                     not_before=time.time() + pause)
            return
        why = f"its runs failed {task.attempts} times; the last: {reason}"
        told = notice(replace(task, reason=why), "blocked")
        if await self.store.block(task.id, self.me, None, why, told) is None:
            return
        await self._send(told)
        await self.tell_admins(f"⚠️ Task {task.id} ({task.title}) is blocked: {why}. Answer it (/task answer "
                               f"{task.id} … or chatgate board answer {task.id} …) to let it run again.")

    async def _send(self, item: OutboxItem | None, *, queue: bool = False) -> None:
        """Send a notice the store queued (`queue`: queue it first: a start's notice is its own)."""
        if item is None:
            return
        if queue:
            await self.delivery.reply(item.chat, item.text)
        elif item.id is not None:
            await self.delivery.deliver(item)

    # -- the goal --------------------------------------------------------------------------------

    async def _goal(self, task: Task) -> Outcome:
        if self.agent is None:
            return Outcome("failed", "no language model is configured")
        key = session_key(task.id)
        home = task.origin or ChatRef("", key)
        owner = task.owner
        session_id = await self.transcripts.active(key, home, "dm")
        usage_scope.serving("task", session_id, owner[0] if owner else home.platform, owner[1] if owner else "")
        ctx = ToolContext(platform=owner[0] if owner else home.platform, chat_id=home.chat_id,
                          user_id=owner[1] if owner else "", session_id=session_id, transcripts=self.transcripts,
                          approvals=self._consent(task), timezone=self.timezone,
                          place=Place(thread_id=home.thread_id, session_key=key))
        ctx, _ = await self.trust.settle(ctx, self.transcripts, [owner] if owner else [], private=task.origin is None)
        history = await self.transcripts.history(session_id)
        verdict_note = ""
        for turn in range(1, self.max_turns + 1):
            text = await self._turn_text(task, turn, verdict_note)
            share = TurnShare()
            record: list[dict[str, Any]] = []
            status = "cancelled"
            try:
                result = await self.agent.run_turn(history, text, self.tools, replace(ctx, turn=share), record=record,
                                                   context=run_context(task))
                status = "ok"
            except LLMError as exc:
                return Outcome("failed", exc.user_message[:ERROR_LIMIT])
            finally:
                await self.transcripts.commit_turn(session_id, [], home, ctx.user_id or None, record, None,
                                                   status=status)
            history += record
            if share.ended is not None:
                return Outcome("blocked", share.ended)
            if self.judge is None:
                return Outcome("done", result.text)
            try:
                verdict = await self.judge.decide(f"{task.title}\n{task.body}".strip(), [], record)
            except LLMError as exc:
                return Outcome("failed", f"the judge could not be reached: {exc.user_message}"[:ERROR_LIMIT])
            if verdict.done:
                return Outcome("done", result.text)
            verdict_note = verdict.reason
        return Outcome("blocked", f"it was not done after {self.max_turns} turns ({verdict_note}); say how to go on")

    async def _turn_text(self, task: Task, turn: int, note: str) -> str:
        mark = await self.store.last_turn(task.id)
        comments = await self.store.comments_since(task.id, mark)
        await self.store.note_turn(task.id, self.me, turn)
        heard = "".join(f"\n- {c.author or 'someone'}: {c.text}" for c in comments)
        heard = f"\n\nSaid since your last turn:{heard}" if heard else ""
        if turn == 1:
            body = f"\n\n{task.body}" if task.body else ""
            return (f"[Task {task.id}, turn 1 of at most {self.max_turns}] {task.title}{body}{heard}\n\nWork on it; "
                    "a judge checks after each turn whether it is done.")
        judged = f"\nThe judge's note on your last turn: {note}" if note else ""
        return f"[Task {task.id}, turn {turn} of at most {self.max_turns}] Keep working on: {task.title}{judged}{heard}"

    def _consent(self, task: Task) -> ApprovalPort:
        if self.approvals is not None and self.consent_off:
            return self.approvals  # (the operator turned consent off everywhere)
        if self.approvals is not None and task.origin is not None:
            return AskingFor(self.approvals, f"asked by task {task.id} \"{task.title}\"")
        return NobodyToAsk("This task has no chat to ask in, so nobody can approve it. Do without it, or ask for a "
                           "decision with the board tool's \"block\".")

