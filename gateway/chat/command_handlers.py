"""Every chat command: its handler and its registration, in menu order (adding a command is adding one
here), and `Commands`, which runs a command and answers.

A handler is given a `Call` (the command, its work item, the session's worker, the services) and returns
the `Answer` said in the chat; the rights a command checks (who set a goal, who asked for an approval,
whose scheduled job it is) are its feature's own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from gateway.chat.commands import Answer, Command, Registry
from gateway.goals import describe

if TYPE_CHECKING:
    from agent.llm import LLMClient
    from gateway.approvals import Approvals
    from gateway.board.tasks import Board
    from gateway.config import Config
    from gateway.cron.manage import CronManager
    from gateway.chat.delivery import Delivery
    from gateway.goals import Goals
    from gateway.chat.sessions import SessionWorker, WorkItem
    from gateway.storage.inbox import InboxStore
    from gateway.storage.sessions import SessionStore
    from gateway.usage import UsageLedger

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Services:
    """What the handlers use of the rest of the gateway."""

    config: "Config"
    transcripts: "SessionStore"
    goals: "Goals"
    approvals: "Approvals"
    cron: "CronManager"
    board: "Board"
    usage: "UsageLedger"
    llm: "LLMClient | None"
    session_ended: Callable[[int], None]  # a session ended with /new (its trajectory is exported)


@dataclass(frozen=True, slots=True)
class Call:
    """A handler's one argument: the command, its work item, the session's worker (None: no turn has run
    lately) and the services."""

    command: Command
    item: "WorkItem"
    worker: "SessionWorker | None"
    services: Services


class Commands:
    """Runs a parsed command and answers in its chat, marking its inbox row done."""

    def __init__(self, registry: Registry["Call"], services: Services, *, inbox: "InboxStore",
                 delivery: "Delivery") -> None:
        self.registry, self.services = registry, services
        self.inbox, self.delivery = inbox, delivery

    async def run(self, worker: "SessionWorker | None", item: "WorkItem", *, quiet: bool = False) -> None:
        """`quiet`: the person sent more of these than `gateway.max_commands_per_minute` here — one that
        did nothing is not answered."""
        command = item.command
        assert command is not None
        if command.spec is None:
            answer = Answer(self.registry.unknown_text(command))
        else:
            answer = await command.spec.handler(Call(command, item, worker, self.services))
        if quiet and not answer.acted:
            log.info("not answered: /%s from %s in %s did nothing, and more came this minute than "
                     "gateway.max_commands_per_minute", command.name, item.msg.user_id, item.key)
            await self.inbox.set_state([item.inbox_id], "done", "not answered: over gateway.max_commands_per_minute")
            return
        await self.delivery.reply(item.msg.reply_chat, answer.text, done_inbox_id=item.inbox_id)


REGISTRY: Registry[Call] = Registry()

YES = frozenset({"yes", "y", "ok", "approve", "allow"})  # a bare answer to the one waiting approval
NO = frozenset({"no", "n", "deny", "stop"})


# -- the session ------------------------------------------------------------------------------


@REGISTRY.command("new", "start a fresh session (the old one stays searchable)", at_once=False)
async def new_session(call: Call) -> Answer:
    """Waits its turn: the running turn ends in the session it began in."""
    services, item = call.services, call.item
    ended = await services.transcripts.end(item.key)
    text = ("Started a new session. The previous conversation is saved and still searchable."
            if ended is not None else "This is already a fresh session.")
    text += await services.goals.session_reset(item)
    if ended is not None:
        services.session_ended(ended)
    return Answer(text)


REGISTRY.alias("reset", "new", "same as /new")


@REGISTRY.command("stop", "cancel the request that is running", at_once=True, throttled=False)
async def stop(call: Call) -> Answer:
    worker = call.worker
    stopped = worker is not None and worker.cancel_turn("stop")
    paused = await call.services.goals.pause(call.item.key, "stopped with /stop") is not None
    text = ("Stopped the running request." if stopped else "The answer was already on its way."
            if worker is not None and worker.busy and worker.answered else "Nothing is running.")
    if paused:
        text += " The goal is paused: /goal resume to go on, /goal clear to drop it."
    return Answer(text, acted=stopped or paused)


@REGISTRY.command("status", "show this session's state", at_once=True)
async def status(call: Call) -> Answer:
    services, worker = call.services, call.worker
    summary = await services.transcripts.summary(call.item.key)
    lines = [f"Session: {summary['id']} ({summary['messages']} messages)" if summary else "Session: not started"]
    state = "running a request" if worker is not None and worker.busy else "idle"
    queued = len(worker.queue) if worker is not None else 0
    lines.append(f"State: {state}" + (f", {queued} message(s) waiting" if queued else ""))
    lines.append(f"Model: {services.config.llm.model}" if services.llm else "Model: not configured")
    lines.append(f"Busy policy: {services.config.gateway.busy_policy}")
    goal = await services.goals.open_goal(call.item.key)
    if goal is not None:
        lines.append(describe(goal))
    return Answer("\n".join(lines))


# -- approvals --------------------------------------------------------------------------------


async def _decide(call: Call, approve: bool) -> Answer:
    approvals, item = call.services.approvals, call.item
    msg = item.msg
    waiting = set(approvals.pending_in(item.key))
    text = await approvals.on_command(item.key, msg.platform, msg.user_id, msg.user_name, approve, call.command.args)
    return Answer(text, acted=set(approvals.pending_in(item.key)) != waiting)  # (one of them decided)


@REGISTRY.command("approve", "approve the waiting request: /approve [id]", at_once=True, throttled=False)
async def approve(call: Call) -> Answer:
    return await _decide(call, True)


@REGISTRY.command("deny", "deny the waiting request: /deny [id] [reason]", at_once=True, throttled=False)
async def deny(call: Call) -> Answer:
    return await _decide(call, False)


def bare_answer(text: str) -> Command | None:
    """A bare "yes" or "no" as the /approve or /deny it stands for (when one request waits: `Inbound`)."""
    word = text.strip().lower().rstrip(".!")
    return REGISTRY.named("approve") if word in YES else REGISTRY.named("deny") if word in NO else None


# -- scheduled jobs, usage, goals ---------------------------------------------------------------


@REGISTRY.command("cron", "scheduled jobs: /cron list|pause|resume|remove|run [job]", at_once=True)
async def cron(call: Call) -> Answer:
    msg = call.item.msg
    return Answer(await call.services.cron.command(call.command.args, platform=msg.platform, user_id=msg.user_id,
                                                   chat=msg.reply_chat, session_key=call.item.key))


@REGISTRY.command("task", "the task board: /task add <title>|list|show|answer|cancel", at_once=True)
async def task(call: Call) -> Answer:
    msg = call.item.msg
    return Answer(await call.services.board.command(call.command.args, msg.platform, msg.user_id, msg.reply_chat,
                                                    private=msg.chat_type == "dm"))


@REGISTRY.command("usage", "tokens used: this session, and yours today and in all", at_once=True)
async def usage(call: Call) -> Answer:
    services, msg = call.services, call.item.msg
    summary = await services.transcripts.summary(call.item.key)
    return Answer(await services.usage.chat_report(summary["id"] if summary else None, msg.platform, msg.user_id))


@REGISTRY.command("goal", "work toward an objective across turns: /goal <objective>|status|pause|resume|clear",
                  at_once=True)
async def goal(call: Call) -> Answer:
    return Answer(await call.services.goals.command("goal", call.command.args, call.item))


@REGISTRY.command("subgoal", "add a criterion the goal must also meet: /subgoal <criterion>", at_once=True)
async def subgoal(call: Call) -> Answer:
    return Answer(await call.services.goals.command("subgoal", call.command.args, call.item))


@REGISTRY.command("help", "list the commands", at_once=True)
async def help_(call: Call) -> Answer:
    return Answer(REGISTRY.help_text())
