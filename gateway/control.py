"""What the gateway does itself, beside agent turns: chat commands, pairing offers, chat reopened."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable, Mapping

from gateway.commands import Command, help_text, parse_command, unknown_text
from gateway.goals import describe
from gateway.sessions import SessionWorker, WorkItem
from gateway.turns import NO_LLM
from platforms.base import ChatOpened, ChatRef, InboundMessage

if TYPE_CHECKING:
    from agent.llm import LLMClient
    from gateway.access.pairing import Pairing
    from gateway.approvals import Approvals
    from gateway.config import Config
    from gateway.cron.manage import CronManager
    from gateway.delivery import Delivery
    from gateway.goals import Goals
    from gateway.sessions import Sessions
    from gateway.storage.inbox import InboxStore
    from gateway.storage.sessions import SessionStore
    from gateway.turns import Turns
    from gateway.usage import UsageLedger
    from platforms.base import PlatformAdapter

log = logging.getLogger(__name__)

LLM_PROBE_TTL = 60.0


class Control:
    def __init__(self, config: "Config", *, inbox: "InboxStore", transcripts: "SessionStore", sessions: "Sessions",
                 turns: "Turns", delivery: "Delivery", approvals: "Approvals", goals: "Goals", cron: "CronManager",
                 usage: "UsageLedger", pairing: "Pairing", llm: "LLMClient | None",
                 adapters: Mapping[str, "PlatformAdapter"], session_ended: Callable[[int], None]) -> None:
        self.config = config
        self.inbox = inbox
        self.transcripts, self.sessions, self.turns, self.delivery = transcripts, sessions, turns, delivery
        self.approvals, self.goals, self.cron, self.usage = approvals, goals, cron, usage
        self.pairing, self.llm, self.adapters = pairing, llm, adapters
        self.session_ended = session_ended  # a session ended with /new (its trajectory is exported)
        self._llm_problem: tuple[float, str | None] | None = None

    async def queued(self, worker: SessionWorker, item: WorkItem) -> None:
        """A session worker's unit of work, in order: `/new` (`/reset`) or an agent turn."""
        command = parse_command(item.msg.text)
        if command is not None and command.name in ("new", "reset"):
            ended = await self.transcripts.end(item.key)
            text = ("Started a new session. The previous conversation is saved and still searchable."
                    if ended is not None else "This is already a fresh session.")
            text += await self.goals.session_reset(item)
            if ended is not None:
                self.session_ended(ended)
            await self.delivery.reply(item.msg.reply_chat, text, done_inbox_id=item.inbox_id)
            return
        await self.turns.run(worker, item)

    async def immediate(self, command: Command, item: WorkItem, *, quiet: bool = False) -> None:
        """Commands that act at once, even while a turn runs. `quiet`: the person sent more of these than
        `gateway.max_commands_per_minute` here — a /stop, /approve or /deny that did nothing is not answered."""
        msg = item.msg
        worker = self.sessions.get(item.key)
        acted = True
        if command.name == "stop":
            stopped = worker is not None and worker.cancel_turn("stop")
            paused = await self.goals.pause(item.key, "stopped with /stop") is not None
            acted = stopped or paused
            text = ("Stopped the running request." if stopped else "The answer was already on its way."
                    if worker is not None and worker.busy and worker.answered else "Nothing is running.")
            if paused:
                text += " The goal is paused: /goal resume to go on, /goal clear to drop it."
        elif command.name in ("goal", "subgoal"):
            text = await self.goals.command(command.name, command.args, item)
        elif command.name == "status":
            text = await self.status_text(item.key, worker)
        elif command.name in ("approve", "deny"):
            waiting = set(self.approvals.pending_in(item.key))
            text = await self.approvals.on_command(item.key, msg.platform, msg.user_id, msg.user_name,
                                                command.name == "approve", command.args)
            acted = set(self.approvals.pending_in(item.key)) != waiting  # (one of them decided)
        elif command.name == "cron":
            text = await self.cron.command(command.args, platform=msg.platform, user_id=msg.user_id,
                                        chat=msg.reply_chat, session_key=item.key)
        elif command.name == "usage":
            summary = await self.transcripts.summary(item.key)
            text = await self.usage.chat_report(summary["id"] if summary else None, msg.platform, msg.user_id)
        elif command.name == "help":
            text = help_text()
        else:
            text = unknown_text(command)
        if quiet and not acted:
            log.info("not answered: /%s from %s in %s did nothing, and more came this minute than "
                     "gateway.max_commands_per_minute", command.name, msg.user_id, item.key)
            await self.inbox.set_state([item.inbox_id], "done", "not answered: over gateway.max_commands_per_minute")
            return
        await self.delivery.reply(msg.reply_chat, text, done_inbox_id=item.inbox_id)

    async def status_text(self, key: str, worker: SessionWorker | None) -> str:
        summary = await self.transcripts.summary(key)
        lines = [f"Session: {summary['id']} ({summary['messages']} messages)" if summary else "Session: not started"]
        state = "running a request" if worker is not None and worker.busy else "idle"
        queued = len(worker.queue) if worker is not None else 0
        lines.append(f"State: {state}" + (f", {queued} message(s) waiting" if queued else ""))
        lines.append(f"Model: {self.config.llm.model}" if self.llm else "Model: not configured")
        lines.append(f"Busy policy: {self.config.gateway.busy_policy}")
        goal = await self.goals.open_goal(key)
        if goal is not None:
            lines.append(describe(goal))
        return "\n".join(lines)

    async def offer_pairing(self, msg: InboundMessage) -> None:
        """An unknown person wrote in a DM: send a pairing code (rate-limited) and nothing else."""
        code = await self.pairing.request(msg.platform, msg.user_id, msg.user_name, msg.chat_id)
        if code is None:
            return
        log.info("pairing code issued for %s user %s (%s)", msg.platform, msg.user_id, msg.user_name)
        await self.delivery.reply(msg.reply_chat, (
            f"Hi {msg.user_name or 'there'}! I only talk to people my owner has approved. "
            f"Your pairing code is {code} — ask the owner to run:\n"
            f"chatgate pair approve {msg.platform} {code}\nThe code expires in one hour."))

    async def chat_opened(self, event: ChatOpened) -> None:
        """A chat is reachable again: deliver what waits for it, and warn if the LLM is missing."""
        await self.delivery.flush_chat(event.platform, event.chat_id)
        problem = await self._llm_status()
        adapter = self.adapters.get(event.platform)
        if problem and adapter is not None:
            try:
                await adapter.notice(ChatRef(event.platform, event.chat_id), problem)
            except Exception as exc:
                log.debug("could not show LLM notice: %s", exc)

    async def _llm_status(self) -> str | None:
        llm = self.llm
        if llm is None:
            return NO_LLM
        now = time.monotonic()
        if self._llm_problem is None or now - self._llm_problem[0] > LLM_PROBE_TTL:
            reason = await llm.probe()
            self._llm_problem = (now, f"The language model is not reachable: {reason}" if reason else None)
        return self._llm_problem[1]
