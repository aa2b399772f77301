"""One agent turn for one inbound message: history in, streamed reply out, all recorded."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from agent.llm import LLMError
from agent.loop import Agent
from agent.tools import ApprovalPort, ToolContext, ToolScope
from gateway.delivery import Delivery
from gateway.learning.review import Learning, personal_session
from gateway.ops.metrics import Metrics
from gateway.sessions import SessionWorker, WorkItem
from gateway.store import OutboxItem, Store
from platforms.base import InboundMessage, Reply

log = logging.getLogger(__name__)

NO_LLM = ("No language model is configured yet. Set llm.base_url (and llm.api_key if it needs one) in "
          "config.yaml or OPENAI_BASE_URL / OPENAI_API_KEY in the environment, then restart chatgate.")


def user_text(msg: InboundMessage) -> str:
    """What the model sees of a message: its text, its author in groups, its attachments."""
    text = msg.text
    if msg.chat_type != "dm":
        text = f"[{msg.user_name or msg.user_id}] {text}"
    for a in msg.attachments:
        if a.error:
            text += f"\n[a {a.kind} {a.name} was not accepted: {a.error}]"
            continue
        where = f" saved at {a.path}" if a.path else ""
        text += f"\n[attached {a.kind}: {a.name} ({a.mime_type}, {a.size} bytes){where}]"
    return text


def session_context(msg: InboundMessage) -> str:
    """Facts about the conversation that stay true for the whole session (keeps prompt caches warm)."""
    where = {"dm": "a private chat", "group": "a group chat", "channel": "a channel"}[msg.chat_type]
    who = "" if msg.chat_type != "dm" else f" with {msg.user_name or msg.user_id}"
    return f"You are talking on {msg.platform}, in {where}{who}."


class Turns:
    def __init__(self, *, store: Store, agent: Agent | None, tools: ToolScope, delivery: Delivery, metrics: Metrics,
                 busy_policy: str, timezone: str | None, approvals: ApprovalPort | None,
                 learning: Learning | None = None) -> None:
        self.approvals = approvals
        self.learning = learning
        self.last_finished = time.time()  # when a turn last ended (the curator's idle clock)
        self.store = store
        self.agent = agent
        self.tools = tools
        self.delivery = delivery
        self.metrics = metrics
        self.busy_policy = busy_policy
        self.timezone = timezone

    async def run(self, worker: SessionWorker, item: WorkItem) -> None:
        try:
            await self._run(worker, item)
        finally:
            self.last_finished = time.time()

    async def _run(self, worker: SessionWorker, item: WorkItem) -> None:
        msg = item.msg
        started = time.monotonic()
        refused = [a.error for a in msg.attachments if a.error]
        if refused:
            nothing_left = not msg.text.strip() and all(a.error for a in msg.attachments)
            await self.delivery.reply(msg.chat, "I could not take this file: " + "; ".join(refused),
                                      reply_to=msg.message_id, done_inbox_id=item.inbox_id if nothing_left else None)
            if nothing_left:
                return
        await self.store.inbox_set_state([item.inbox_id], "processing")
        session_id = await self.store.active_session(item.key, msg.chat, msg.chat_type)
        history = await self.store.history(session_id)
        context = session_context(msg)
        if self.learning is not None:
            block = await self.learning.session_block(
                session_id, platform=msg.platform, user_id=msg.user_id,
                personal=personal_session(item.key, msg.chat_type, msg.user_id))
            context += f"\n\n{block}" if block else ""
        inbox_ids = [item.inbox_id]
        record: list[dict[str, Any]] = []
        reply_to = msg.message_id if msg.chat_type != "dm" else None
        preview = self.delivery.stream(msg.chat, reply_to)

        def steer() -> list[str]:
            taken = list(worker.steered)
            worker.steered.clear()
            inbox_ids.extend(i.inbox_id for i in taken)
            return [user_text(i.msg) for i in taken]

        ctx = ToolContext(platform=msg.platform, chat_id=msg.chat_id, user_id=msg.user_id, session_id=session_id,
                          transcripts=self.store, approvals=self.approvals,
                          extras={"timezone": self.timezone, "thread_id": msg.thread_id, "session_key": item.key})
        outcome, tool_iterations = "ok", 0
        try:
            async with self.delivery.typing(msg.chat):
                if self.agent is None:
                    text, outcome = NO_LLM, "no_llm"
                    record.append({"role": "user", "content": user_text(msg)})
                else:
                    try:
                        result = await self.agent.run_turn(
                            history, user_text(msg), self.tools, ctx, record=record, context=context,
                            on_text=preview.push, on_restart=preview.reset,
                            steer=steer if self.busy_policy == "steer" else None)
                        text, tool_iterations = result.text, result.iterations - 1
                    except LLMError as exc:
                        log.warning("turn in %s failed: %s", item.key, exc)
                        text, outcome = exc.user_message, "llm_error"
                        del record[1:]  # keep the user's message; drop the unfinished exchange
        except asyncio.CancelledError:
            draft = await preview.finish()
            if worker.cancel_reason in ("stop", "interrupt"):
                note = "⏹ Stopped." if worker.cancel_reason == "stop" else "⏹ Interrupted by a newer message."
                await self.store.commit_turn(session_id, inbox_ids, msg.chat, msg.user_id, record, None,
                                             status="cancelled")
                if draft:
                    await self._mark_draft(msg, draft, note)
                self.metrics.turns.labels(worker.cancel_reason).inc()
            # on shutdown the inbox row stays 'processing' and the turn runs again after restart
            raise
        draft = await preview.finish()
        reply = OutboxItem(chat=msg.chat, text=text or "(The model returned an empty answer.)", reply_to=reply_to,
                           draft_message_id=draft, inbox_id=item.inbox_id)
        await self.store.commit_turn(session_id, inbox_ids, msg.chat, msg.user_id, record, reply)
        self.metrics.turns.labels(outcome).inc()
        self.metrics.turn_seconds.observe(time.monotonic() - started)
        await self.delivery.deliver(reply)
        if self.learning is not None and outcome == "ok":  # after delivery: a review never delays the reply
            await self.learning.after_turn(session_id, msg.chat, platform=msg.platform, user_id=msg.user_id,
                                           tool_iterations=tool_iterations)

    async def _mark_draft(self, msg: InboundMessage, draft: str, note: str) -> None:
        """Leave the half-streamed draft saying it was stopped (best effort, not durable)."""
        adapter = self.delivery.adapters.get(msg.platform)
        if adapter is None:
            return
        try:
            await adapter.edit(msg.chat, draft, Reply(text=note))
        except Exception as exc:
            log.debug("could not mark stopped draft: %s", exc)
