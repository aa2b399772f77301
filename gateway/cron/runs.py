"""One run of a scheduled job: a fresh session, a limited toolset, the result to the target chat.

No person is present during a run, so an action that needs consent is refused — unless
`approvals.cron: ask-owner`, which asks the job's owner in the chat the job was created from.
A run acts for its owner; its `session_search` reads the owner's conversations only when nobody else
reads its result (`gateway.access.trust`), else only the run itself.
The result is queued in the outbox in the same transaction that ends the run in the ledger,
under a short header naming the job. A reply of `[SILENT]` delivers nothing; a failure sends a
short notice instead of vanishing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from agent import usage as usage_scope
from agent.llm import LLMError
from agent.loop import Agent
from agent.tools import ApprovalPort, AskingFor, NobodyToAsk, Place, ToolContext, ToolScope
from gateway.access.trust import Trust
from gateway.chat.delivery import Delivery
from gateway.cron.jobs import Job, utc
from gateway.cron.ledger import Claim, RunLedger
from gateway.storage.sessions import SessionStore
from gateway.storage.cron import run_session_key
from gateway.storage.outbox import OutboxItem
from platforms.base import ChatRef

if TYPE_CHECKING:
    from gateway.config import ApprovalsConfig

log = logging.getLogger(__name__)

SILENT = "[SILENT]"
ERROR_LIMIT = 300


def run_context(job: Job) -> str:
    """What the model is told about a scheduled run (stays the same for every run of the job)."""
    return (f"This is a scheduled run of the job #{job.id} \"{job.name}\" ({job.schedule}, {job.timezone}). "
            "Nobody is watching while you work: do the task and answer with the result, which will be "
            "sent to the chat on its own. If there is nothing worth reporting, answer exactly "
            f"{SILENT} and nothing will be sent.")


def header(job: Job, claim: Claim) -> str:
    line = f"⏰ {job.name}"
    if claim.manual:
        line += " (run now)"
    elif claim.late_by > 60:
        line += f" (late: due {utc(claim.scheduled_at).astimezone(job.parsed().zone):%Y-%m-%d %H:%M %Z})"
    return line


class CronRuns:
    def __init__(self, *, transcripts: SessionStore, ledger: RunLedger, agent: Agent | None, tools: ToolScope, delivery: Delivery,
                 approvals: ApprovalPort | None, consent: ApprovalsConfig, timezone: str | None,
                 timeout: float, trust: Trust, session_ended: Callable[[int], None] | None = None,
                 agent_for_model: Callable[[str], Agent] | None = None,
                 owner_may: Callable[[str, str, str], Awaitable[bool]] | None = None,
                 pause: Callable[[int], Awaitable[Any]] | None = None) -> None:
        self.trust = trust
        self.owner_may = owner_may  # (platform, user, chat): may a job's owner still talk to the agent there
        self.pause = pause
        self.session_ended = session_ended
        self.agent_for_model = agent_for_model  # a job that names a model runs on it
        self.transcripts = transcripts
        self.ledger = ledger
        self.agent = agent
        self.tools = tools
        self.delivery = delivery
        self.approvals = approvals
        self.consent = consent  # approvals.mode everywhere, approvals.cron for scheduled runs
        self.timezone = timezone
        self.timeout = timeout

    def _consent(self, job: Job) -> ApprovalPort:
        if self.approvals is not None and self.consent.mode == "off":
            return self.approvals  # the operator turned consent off everywhere (hardline is still refused)
        if self.approvals is not None and self.consent.mode == "ask" and self.consent.cron == "ask-owner" \
                and job.owner_chat_ref is not None:
            return AskingFor(self.approvals, f"asked by the scheduled job #{job.id} \"{job.name}\"")
        return NobodyToAsk("This is a scheduled run and nobody is present to approve it (approvals.cron is deny). "
                           "Report what you would have done instead.")

    async def run(self, claim: Claim) -> None:
        """Run the claimed slot to its end; the ledger always ends in a final state."""
        job = claim.job
        target = job.target_chat
        started = time.monotonic()
        if not claim.manual:
            self.delivery.metrics.cron_lateness.observe(max(time.time() - claim.scheduled_at, 0.0))
        if not await self._owner_admitted(job):  # revoked since: the job does not run in their name
            if self.pause is not None:
                await self.pause(job.id)
            item = self._notice(job, claim, "was not run, and is paused: the person who made it no longer has "
                                "access here. An admin can remove it (chatgate cron remove) or resume it.")
            await self.ledger.finish(claim, "skipped", error="its owner no longer has access", message=item)
            await self._send(item)
            return
        try:
            async with asyncio.timeout(self.timeout):  # (not wait_for: it can swallow a shutdown's cancel)
                text, record = await self._turn(claim)
        except asyncio.CancelledError:
            await self.ledger.finish(claim, "interrupted", error="the gateway shut down during the run",
                                     message=self._notice(job, claim, "was interrupted: the gateway shut down "
                                                          "during the run. It will not be re-run."))
            raise
        except Exception as exc:
            reason = _reason(exc, self.timeout)
            log.warning("job %s run %s failed: %s", job.id, claim.run_id, reason)
            item = self._notice(job, claim, f"failed: {reason}")
            await self.ledger.finish(claim, "error", error=reason, message=item)
            await self._send(item)
            return
        if text.strip().startswith(SILENT):
            await self.ledger.finish(claim, "silent", output=text)
        else:
            item = OutboxItem(chat=target, text=f"{header(job, claim)}\n\n{text}") if target else None
            await self.ledger.finish(claim, "ok", output=text, message=item)
            await self._send(item)
        log.info("job %s run %s finished in %.1fs", job.id, claim.run_id, time.monotonic() - started)

    async def _turn(self, claim: Claim) -> tuple[str, list[dict[str, Any]]]:
        job = claim.job
        if self.agent is None:
            raise RuntimeError("no language model is configured")
        home = job.owner_chat_ref or job.target_chat or ChatRef("", str(job.id))  # (no person, no platform)
        key = run_session_key(job.id, claim.run_id)  # a fresh session for every run
        session_id = await self.transcripts.active(key, home, "dm")
        usage_scope.serving("cron", session_id, home.platform, job.owner_id or "")
        ctx = ToolContext(platform=home.platform, chat_id=home.chat_id, user_id=job.owner_id, session_id=session_id,
                          transcripts=self.transcripts, approvals=self._consent(job),
                          timezone=job.timezone or self.timezone,
                          place=Place(thread_id=home.thread_id, session_key=job.owner_key or key))
        ctx, _ = await self.trust.settle(ctx, self.transcripts, [] if job.by_operator else [(job.owner_platform, job.owner_id)],
                                         private=await self._read_by_owner_alone(job))
        record: list[dict[str, Any]] = []
        status = "cancelled"
        try:
            agent = self.agent_for_model(job.model) if job.model and self.agent_for_model else self.agent
            result = await agent.run_turn([], job.prompt, self.tools, ctx, record=record, context=run_context(job))
            status = "ok"
            return result.text or "(The model returned an empty answer.)", record
        finally:
            await self.transcripts.commit_turn(session_id, [], home, job.owner_id, record, None, status=status)
            ended = await self.transcripts.end(key)
            if ended is not None and self.session_ended is not None:
                self.session_ended(ended)

    async def _read_by_owner_alone(self, job: Job) -> bool:
        """Whether only the job's owner reads what its runs answer: the result goes nowhere (the ledger), or
        to the direct chat the job was made in. Anywhere else others read it, so a run searches no other
        conversation (`gateway.access.trust`)."""
        target = job.target_chat
        if target is None:
            return True
        return target == job.owner_chat_ref and job.owner_key is not None \
            and await self.transcripts.chat_type(job.owner_key) == "dm"

    async def _owner_admitted(self, job: Job) -> bool:
        chat = job.owner_chat_ref
        if self.owner_may is None or job.by_operator or chat is None:
            return True  # (an operator's job, made with `chatgate cron`)
        return await self.owner_may(job.owner_platform, job.owner_id, chat.chat_id)

    def _notice(self, job: Job, claim: Claim, what: str) -> OutboxItem | None:
        target = job.target_chat
        return OutboxItem(chat=target, text=f"⚠️ Scheduled job #{job.id} \"{job.name}\" {what}") if target else None

    async def _send(self, item: OutboxItem | None) -> None:
        if item is not None and item.id is not None:
            await self.delivery.deliver(item)

    async def interrupted(self, found: list[tuple[Job | None, int]]) -> None:
        """Tell the target chats about runs a dead process left behind (they are not re-run)."""
        for job, run_id in found:
            log.warning("cron run %s of job %s was interrupted by a stopped gateway; not re-running it",
                        run_id, job.id if job else "?")
            if job is None or job.target_chat is None:
                continue
            await self.delivery.reply(job.target_chat, f"⚠️ Scheduled job #{job.id} \"{job.name}\" was interrupted: "
                                      "the gateway stopped during the run. It will not be re-run.")


def _reason(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"it did not finish within {timeout:g}s (cron.run_timeout_seconds)"
    if isinstance(exc, LLMError):
        return exc.user_message[:ERROR_LIMIT]
    return (str(exc) or type(exc).__name__)[:ERROR_LIMIT]
