"""Intake: the one callback every adapter calls. Store, answer, return — nothing else waits here.

A message is checked (access, pairing, mention gating: one function for every platform),
written to the inbox, and handed to its session's worker; `emit` returns as soon as the row is
stored, so the adapter can acknowledge the platform. Everything that may wait on the network —
a pairing offer, a button press (its decision, the prompt's edit, the presser's answer), a
chat command, a web chat tab coming back — runs as a task of its own. The text is read as a chat command
here, once (`_parse`), and the parsed command rides on the work item.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping

from gateway.access.policy import check_access
from gateway.chat.command_handlers import bare_answer
from gateway.chat.session_key import session_key
from gateway.chat.sessions import WorkItem
from gateway.chat.refusals import Refusals
from gateway.storage.database import StorageError
from platforms.base import ButtonPress, ChatOpened, InboundEvent, InboundMessage, Intake, StorageUnavailable, Unreadable

if TYPE_CHECKING:
    from gateway.access.pairing import Pairing
    from gateway.approvals import Approvals
    from gateway.chat.command_handlers import Commands
    from gateway.chat.commands import Command
    from gateway.config import Config
    from gateway.chat.control import Control
    from gateway.chat.delivery import Delivery
    from gateway.chat.owners import Owners
    from gateway.ops.metrics import Metrics
    from gateway.chat.sessions import Sessions
    from gateway.storage.inbox import InboxStore, Unfinished
    from gateway.storage.sessions import SessionStore
    from platforms.base import PlatformAdapter

    ButtonHandler = Callable[[ButtonPress], Awaitable[str]]

log = logging.getLogger(__name__)


class Inbound:
    def __init__(self, config: "Config", *, local: frozenset[str], inbox: "InboxStore", transcripts: "SessionStore",
                 pairing: "Pairing", sessions: "Sessions", delivery: "Delivery", control: "Control",
                 commands: "Commands", approvals: "Approvals", metrics: "Metrics",
                 adapters: Mapping[str, "PlatformAdapter"], buttons: Mapping[str, "ButtonHandler"],
                 owners: "Owners", spawn: Callable[..., Any], state: Callable[[], str]) -> None:
        self.config = config
        self.local = local  # platforms whose people are the machine's owner (check_access)
        self.inbox, self.transcripts, self.pairing = inbox, transcripts, pairing
        self.sessions, self.delivery, self.control, self.approvals = sessions, delivery, control, approvals
        self.commands = commands  # the registry (to parse), and running a command
        self.metrics, self.adapters, self.buttons = metrics, adapters, buttons  # buttons: data prefix → handler
        self.spawn = spawn  # a background task the runner keeps
        self.state = state  # the gateway's: starting | running | draining | stopped
        self.last_message_at = time.time()
        self.owners = owners  # which instance runs each conversation (on a database of its own: this one)
        self.held: list[WorkItem] = []  # accepted while starting: handed on once running
        self.refusals = Refusals(config.gateway, local, sessions)

    async def on_event(self, event: InboundEvent) -> Intake:
        """The callback every adapter's `emit` reaches. The database failing (locked by another
        program, full) is `StorageUnavailable` to the adapter: not stored, not the event's fault."""
        try:
            return await self._take(event)
        except StorageError as exc:
            raise StorageUnavailable(str(exc)) from exc

    async def _take(self, event: InboundEvent) -> Intake:
        if isinstance(event, InboundMessage):
            return await self.message(event)
        if isinstance(event, ButtonPress):
            self.spawn(self.press(event), name="button-press")
        elif isinstance(event, ChatOpened):
            self.spawn(self.control.chat_opened(event), name="chat-opened")
        elif isinstance(event, Unreadable):
            await self.inbox.dead_letter(event.platform, event.ref, event.payload, event.reason)
            self.metrics.dead_letters.labels(event.platform).inc()
        return Intake.STORED

    async def message(self, msg: InboundMessage) -> Intake:
        cfg = self.config
        self.metrics.inbound.labels(msg.platform).inc()
        self.last_message_at = time.time()
        key = session_key(msg, cfg.gateway.group_sessions)
        if await self._follow_up(msg, key):
            msg = replace(msg, bot_mentioned=True)
        mention = cfg.platforms.require_mention(msg.platform, msg.chat_id)
        decision = check_access(msg, cfg.access, local=self.local, require_mention=mention)
        if decision != "allow" and msg.platform not in self.local \
                and await self.pairing.is_paired(msg.platform, msg.user_id):  # (asked only when it can matter)
            decision = check_access(msg, cfg.access, local=self.local, paired=True, require_mention=mention)
        if decision == "pair":
            self.spawn(self.control.offer_pairing(msg), name="pairing-offer")
        if decision != "allow":
            return Intake.IGNORED
        command = self._parse(msg)
        refusal = self.refusals.refusal(msg, key, command)
        if refusal is not None:
            return await self._refuse(msg, key, *refusal)
        inbox_id, owned = await self.owners.store_message(msg, key)
        if inbox_id is None:
            self.metrics.duplicates.labels(msg.platform).inc()
            log.info("dropped a re-delivered %s message %s", msg.platform, msg.message_id)
            return Intake.DUPLICATE
        item = WorkItem(inbox_id, key, msg, command=command)
        state = self.state()
        if state == "starting":
            self.held.append(item)
        elif state == "running":
            await self.owners.hand(item, owned=owned)
        return Intake.STORED  # while draining it stays in the inbox for the next start

    async def _follow_up(self, msg: InboundMessage, key: str) -> bool:
        """An unaddressed message in a thread the agent is in, on a platform whose threads are
        conversations (`Capabilities.follows_threads`): answered as if it were addressed."""
        if msg.bot_mentioned or msg.chat_type == "dm" or not msg.thread_id:
            return False
        adapter = self.adapters.get(msg.platform)
        if adapter is None or not adapter.capabilities.follows_threads:
            return False
        return await self.transcripts.in_thread(msg.platform, msg.chat_id, msg.thread_id, key)

    async def _refuse(self, msg: InboundMessage, key: str, reason: str, text: str,
                      notice_key: tuple[str, ...] | None) -> Intake:
        """Keep a small record (so a re-delivery is still dropped) and tell the person, in a task — a
        notice with a key only when that key was not told within the last minute."""
        kept = replace(msg, text=msg.text[:1000], attachments=())
        if await self.inbox.add(kept, key, state="refused", error=reason) is None:
            return Intake.DUPLICATE
        self.metrics.refused.labels(msg.platform, reason).inc()
        log.info("refused a %s message in %s: %s", msg.platform, key, reason)
        if self.refusals.tell(reason, notice_key):
            self.spawn(self.delivery.reply(msg.reply_chat, text, reply_to=msg.message_id), name="refusal")
        return Intake.REFUSED

    async def press(self, press: ButtonPress) -> None:
        """Acknowledge at once, then decide and answer (a task: the intake never waits on it)."""
        try:
            await press.ack()
        except Exception as exc:
            log.warning("acknowledging a %s button press failed: %s", press.platform, exc)
        answer = "This button is no longer active."
        try:
            for prefix, handler in self.buttons.items():
                if press.data.startswith(prefix):
                    answer = await handler(press)
                    break
        except Exception:
            log.exception("handling a %s button press failed", press.platform)
            answer = "That did not work; please try again."
        try:
            await press.answer(answer)
        except Exception as exc:
            log.warning("answering a %s button press failed: %s", press.platform, exc)

    def dispatch(self, item: WorkItem) -> None:
        """Hand a stored message to its session: a command that acts at once runs now, the rest waits in the
        worker's queue."""
        command = item.command
        if item.goal_turn is not None:
            self.sessions.queue_goal_turn(item)
            return
        if command is not None and command.immediate:
            quiet = not command.throttled and self.refusals.over_answers(item.msg)
            self.spawn(self._run_now(item, quiet), name=f"command:{command.name}")
            return
        answer = bare_answer(item.msg.text) if command is None else None
        if answer is not None and len(self.approvals.pending_in(item.key)) == 1:  # it answers the one waiting request
            self.spawn(self._run_now(replace(item, command=answer), self.refusals.over_answers(item.msg)), name="yes-no")
            return
        worker = self.sessions.worker(item.key)
        policy = self.config.gateway.busy_policy
        if worker.busy and command is None:
            if policy == "interrupt":
                worker.cancel_turn("interrupt")
            elif policy == "steer" and not worker.queue:
                worker.steered.append(item)
                return
        worker.submit(item)

    async def _run_now(self, item: WorkItem, quiet: bool) -> None:
        await self.commands.run(self.sessions.get(item.key), item, quiet=quiet)  # (the worker as it is now)

    def resumed_item(self, u: "Unfinished") -> WorkItem:
        """A message an earlier run (or another instance) stored and did not finish, as its session takes it."""
        return WorkItem(u.inbox_id, u.session_key, u.msg, draft_message_id=u.draft_message_id, effects=tuple(u.effects),
                        goal_turn=u.goal_turn, draft_intent=u.draft_intent, command=self._parse(u.msg))

    def _parse(self, msg: InboundMessage) -> "Command | None":
        """The one place a message's text is read as a chat command (None: an ordinary message)."""
        return self.commands.registry.parse(msg.text)

    async def resume(self) -> None:
        """Take up what was accepted and not finished (`Owners.start`), then what arrived while starting.
        A turn that had started side-effecting tools is not run again: its person is told (`Turns`)."""
        await self.owners.start()
        while self.held:
            await self.owners.hand(self.held.pop(0))  # (one the start took up already is not run again)
