"""One agent turn for one inbound message: history in, streamed reply out, all recorded.

A turn ends in one of these ways, each recorded with its inbox row:

* **done**: the reply is committed to the outbox with the transcript, then delivered. From the
  commit on the turn is past stopping (`/stop` and a newer message leave it to deliver its reply,
  in order) and cannot fail: what it could not send is the outbox's to send;
* **cancelled** by `/stop` or a newer message (busy policy `interrupt`) before that;
* **failed**: the model could not be reached (the person is told what to do), or something
  unexpected broke — the person gets a short message and the row is marked failed, so the turn
  is not run again at every restart. A storage error (another program holding the database's lock,
  a full disk) is never that: it is the store's fault, not the message's. The turn waits for the
  store (`Store.until_stored`) where it stands: its record and reply are kept in memory and
  committed once the store takes writes again, then sent editing its preview; a tool's journal
  entry waits the same way before the tool runs; a turn that could not start (its session, its
  history) starts once it can, from what its inbox row says then. The session's later messages
  wait behind it, in order, and `/readyz` says storage is failing meanwhile;
* **cut off** by a crash or a shutdown: the row stays unfinished. At the next start the turn
  runs again only if it had not started any side-effecting tool (the journal, written before
  each such call); otherwise the person is told it was interrupted and what had already run,
  and can say "continue". Either way the message a turn already sent (its streaming preview)
  is edited, not sent a second time.

Under `steer`, messages folded into a turn whose model then fails are not answered by it: they
go back to the front of the session's queue and each gets a turn of its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping

from agent import usage as usage_scope
from agent.llm import LLMError
from agent.loop import Agent
from agent.tools import ApprovalPort, Place, ToolContext, ToolScope
from gateway.access.trust import Trust
from gateway.chat.delivery import Delivery
from gateway.chat.files import Outgoing, discard
from gateway.chat.preview import StreamPreview
from gateway.chat.session_key import personal_session
from gateway.chat.sessions import SessionWorker, WorkItem
from gateway.goals import Goals
from gateway.learning.review import Learning
from gateway.ops.logs import log_context
from gateway.ops.metrics import Metrics
from gateway.storage.connection import Work
from gateway.storage.inbox import InboxStore
from gateway.storage.owners import NotOwner, still_owned
from gateway.storage.sessions import SessionStore
from gateway.storage.outbox import OutboxItem
from platforms.base import Attachment, InboundMessage, PlatformAdapter, Reply

log = logging.getLogger(__name__)

NO_LLM = ("No language model is configured yet. Set llm.base_url (and llm.api_key if it needs one) in "
          "config.yaml or OPENAI_BASE_URL / OPENAI_API_KEY in the environment, then restart chatgate.")
SHOWN_EFFECTS = 10
MAIN_ARGUMENTS = ("command", "path", "query", "url", "action", "name")  # what a tool call is shown by, first found
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


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


def authored(record: list[dict[str, Any]], steered_by: list[str]) -> list[dict[str, Any]]:
    """The turn's messages, each one `steer` folded in marked with its author (`author_id`): every later
    turn and a review act for everyone whose words they read, so the store keeps who said what."""
    authors = iter(steered_by)
    marked = record[:1]
    for m in record[1:]:
        who = next(authors, None) if m["role"] == "user" else None
        marked.append(m if who is None else {**m, "author_id": who})
    return marked


def answers(item: WorkItem) -> str | None:
    """The message a reply quotes: in groups the person's message (a goal's own turns quote nothing)."""
    return None if item.msg.chat_type == "dm" or item.origin != "person" else item.msg.message_id


def session_context(msg: InboundMessage) -> str:
    """Facts about the conversation that stay true for the whole session (keeps prompt caches warm)."""
    where = {"dm": "a private chat", "group": "a group chat", "channel": "a channel"}[msg.chat_type]
    who = "" if msg.chat_type != "dm" else f" with {msg.user_name or msg.user_id}"
    return f"You are talking on {msg.platform}, in {where}{who}."


@dataclass(frozen=True, slots=True)
class CallShown:
    """A tool call as a person sees it — in the journal of a turn cut off (`terminal: make deploy`) and while
    it runs (`running terminal: make deploy`): its name and its main argument, else all its arguments."""

    name: str
    main: str | None  # a command, a path, a query, an address, an action or a name
    arguments: str  # all of them in one line

    @classmethod
    def of(cls, name: str, arguments: str) -> CallShown:
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            args = arguments
        if not isinstance(args, dict):
            return cls(name, None, " ".join(str(args).split()))
        main = next((args[k] for k in MAIN_ARGUMENTS if isinstance(args.get(k), str)), None)
        everything = ", ".join(f"{k}={v!r}" for k, v in args.items())
        return cls(name, None if main is None else " ".join(main.split()), " ".join(everything.split()))

    def line(self, limit: int = 200) -> str:
        """`write_file: notes.txt`; with no main argument, every argument."""
        return _cut(f"{self.name}: {self.main if self.main is not None else self.arguments}", limit)

    def activity(self, limit: int = 160) -> str:
        """`running terminal: ls -la`; with no main argument, only the name."""
        return _cut(f"running {self.name}" + (f": {self.main}" if self.main else ""), limit)


def _cut(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


def describe_call(name: str, arguments: str, limit: int = 200) -> str:
    """A tool call in one line for a person: `terminal: make deploy`, `write_file: notes.txt`."""
    return CallShown.of(name, arguments).line(limit)


def interrupted_text(effects: tuple[str, ...]) -> str:
    shown = "\n".join(f"• {e}" for e in effects[:SHOWN_EFFECTS])
    if len(effects) > SHOWN_EFFECTS:
        shown += f"\n• … and {len(effects) - SHOWN_EFFECTS} more"
    return ("⚠️ I was interrupted (chatgate stopped) while working on your message, after I had already "
            f"started:\n{shown}\nI did not start over, so nothing runs twice. Say \"continue\" and I will "
            "pick up from there.")


UntilStored = Callable[[Callable[[], Awaitable[Any]], str], Awaitable[Any]]  # `Store.until_stored`


def failed_text(exc: BaseException) -> str:
    return (f"⚠️ Something went wrong on my side ({type(exc).__name__}), so this message was not answered. "
            "It has been logged; please try again.")


class _Journal:
    """The turn's side-effecting tool calls, written to its inbox row before each one runs."""

    def __init__(self, inbox: InboxStore, until_stored: UntilStored, inbox_id: int,
                 redact: Callable[[str], str]) -> None:
        self.inbox, self.until_stored, self.inbox_id, self.redact = inbox, until_stored, inbox_id, redact

    async def tool_started(self, name: str, arguments: str) -> None:
        """Noted before the tool runs: while the store refuses it, the tool waits (see the module doc)."""
        what = self.redact(describe_call(name, arguments))
        await self.until_stored(lambda: self.inbox.add_effect(self.inbox_id, what),
                                f"the journal of inbox message {self.inbox_id}")


class _Steering:
    """The messages busy policy `steer` folds into a running turn, and the turn's context as each joins it
    (another person's words: it acts for the less trusted of them, `Trust.joined`)."""

    def __init__(self, worker: SessionWorker, trust: Trust, transcripts: SessionStore, inbox_id: int) -> None:
        self.worker, self.trust, self.transcripts, self.inbox_id = worker, trust, transcripts, inbox_id
        self.taken: list[WorkItem] = []

    def take(self, ctx: ToolContext) -> tuple[list[str], ToolContext]:
        """What was sent meanwhile, for the model, and the context the turn's calls act under from now on."""
        taken = list(self.worker.steered)
        self.worker.steered.clear()
        self.taken.extend(taken)
        for i in taken:
            ctx = self.trust.joined(ctx, (i.msg.platform, i.msg.user_id), self.transcripts)
        return [user_text(i.msg) for i in taken], ctx

    def give_back(self) -> None:
        """The turn will not answer what was folded in: back to the front of the session's queue."""
        self.worker.steered.extendleft(reversed(self.taken))
        self.taken.clear()

    @property
    def inbox_ids(self) -> list[int]:
        """The rows the turn answers: its own, then each folded in."""
        return [self.inbox_id, *(i.inbox_id for i in self.taken)]

    @property
    def authors(self) -> list[str]:
        return [i.msg.user_id for i in self.taken]


@dataclass(slots=True)
class _Open:
    """A turn once it is open: what it answers, its session, what the model is given, whom it acts for,
    and what it has produced so far."""

    msg: InboundMessage  # (its attachments fetched)
    session_id: int
    history: list[dict[str, Any]]
    ids: list[int | None]  # each history message's id (None: a summary)
    context: str
    ctx: ToolContext
    outgoing: Outgoing
    started: float  # (monotonic)
    steering: _Steering
    record: list[dict[str, Any]] = field(default_factory=list)
    preview: StreamPreview | None = None  # once shown

    def authored(self) -> list[dict[str, Any]]:
        return authored(self.record, self.steering.authors)


class Turns:
    def __init__(self, *, inbox: InboxStore, transcripts: SessionStore, until_stored: UntilStored,
                 agent: Agent | None, tools: ToolScope, delivery: Delivery, metrics: Metrics,
                 busy_policy: str, timezone: str | None, approvals: ApprovalPort | None,
                 adapters: Mapping[str, PlatformAdapter], files_root: Path, trust: Trust,
                 learning: Learning | None = None, redact: Callable[[str], str] = lambda text: text,
                 goals: Goals | None = None, holder: str | None = None) -> None:
        self.holder = holder  # several instances: this one's id (a turn commits only while it owns the conversation)
        self.trust = trust
        self.approvals = approvals
        self.goals = goals
        self.learning = learning
        self.last_finished = time.time()  # when a turn last ended (the curator's idle clock)
        self.inbox, self.transcripts, self.until_stored = inbox, transcripts, until_stored
        self.agent = agent
        self.tools = tools
        self.delivery = delivery
        self.metrics = metrics
        self.busy_policy = busy_policy
        self.timezone = timezone
        self.adapters = adapters
        self.files_root = files_root
        self.redact = redact

    async def run(self, worker: SessionWorker, item: WorkItem) -> None:
        log_context(platform=item.msg.platform, chat=item.msg.chat_id, turn=item.inbox_id)  # (this task's lines)
        goals = self.goals if item.origin == "goal" else None
        outcome: str | None = "error"
        first = True

        async def attempt() -> str | None:  # run again after a storage error: from what its row says now
            nonlocal item, first
            if not first:
                rows = await self.inbox.unfinished(item.inbox_id)
                if not rows:
                    return None
                item = replace(item, draft_message_id=rows[0].draft_message_id, effects=tuple(rows[0].effects),
                               draft_intent=rows[0].draft_intent)
            first = False
            return await self._turn(worker, item, goals)

        try:
            outcome = await self.until_stored(attempt, f"the turn in {item.key}")
        except asyncio.CancelledError:  # a newer message interrupted it: a goal carries on after that message
            outcome = "interrupted" if worker.cancel_reason == "interrupt" else None
            raise
        except NotOwner as exc:  # another instance runs the conversation now: this turn leaves no trace
            outcome = None
            log.warning("the turn in %s was not committed: %s", item.key, exc)
        except Exception as exc:  # outside the agent, not the storage's (a bug): tell the person, mark it failed
            log.exception("turn in %s failed", item.key)
            await self._fail(item, exc)
        finally:
            self.last_finished = time.time()
            if goals is not None and outcome is not None:
                goals.after_turn(item, outcome)

    async def _turn(self, worker: SessionWorker, item: WorkItem, goals: Goals | None) -> str | None:
        """The turn, or the report of one cut off after its side effects had started; its outcome
        (None: a goal's turn that is not to run)."""
        if goals is not None and not await goals.turn_starting(item):
            return None
        if item.effects:
            worker.answered = True
            await self._report_interrupted(item)
            return "interrupted"
        return await self._run(worker, item)

    async def _run(self, worker: SessionWorker, item: WorkItem) -> str:
        """The turn; returns its outcome (ok, no_llm, llm_error, error, refused)."""
        turn = await self._open(worker, item)
        if isinstance(turn, str):
            return turn
        reply, status, outcome, tool_iterations = await self._converse(worker, item, turn)
        return await self._finish(worker, item, turn, reply, status, outcome, tool_iterations)

    async def _open(self, worker: SessionWorker, item: WorkItem) -> _Open | str:
        """Everything before the model is asked: the attachments fetched (a message of refused files only
        ends here, "refused"), the session opened, the prompt, whom the turn acts for."""
        started = time.monotonic()
        msg = await self._fetch(item.msg)
        chat = msg.reply_chat
        refused = [a.error for a in msg.attachments if a.error]
        if refused:
            nothing_left = not msg.text.strip() and all(a.error for a in msg.attachments)
            await self.delivery.reply(chat, "I could not take this file: " + "; ".join(refused),
                                      reply_to=msg.message_id, done_inbox_id=item.inbox_id if nothing_left else None)
            if nothing_left:
                return "refused"
        start = await self.transcripts.open_turn(item.key, msg.chat, msg.chat_type)
        session_id = start.session_id
        log_context(session=session_id)
        usage_scope.serving("goal" if item.origin == "goal" else "main", session_id, msg.platform, msg.user_id)
        context = session_context(msg)
        if self.learning is not None:
            block = start.prompt if start.prompt is not None else await self.learning.session_block(
                session_id, platform=msg.platform, user_id=msg.user_id,
                personal=personal_session(item.key, msg.chat_type, msg.user_id))
            context += f"\n\n{block}" if block else ""
        outgoing = Outgoing(self.files_root.parent)  # files the agent sends: copied under the home
        ctx = ToolContext(platform=msg.platform, chat_id=chat.chat_id, user_id=msg.user_id, session_id=session_id,
                          transcripts=self.transcripts, approvals=self.approvals,
                          journal=_Journal(self.inbox, self.until_stored, item.inbox_id, self.redact), files=outgoing,
                          timezone=self.timezone,
                          place=Place(thread_id=chat.thread_id, session_key=item.key, inbox_id=item.inbox_id))
        ctx = await self._settle(ctx, item, msg)
        return _Open(msg, session_id, start.history, start.ids, context, ctx, outgoing, started,
                     _Steering(worker, self.trust, self.transcripts, item.inbox_id))

    async def _converse(self, worker: SessionWorker, item: WorkItem, turn: _Open) -> tuple[str, str, str, int]:
        """The model's answer, streamed to a preview, with the messages `steer` folds in: its text, the
        transcript's status, the outcome and how many tool steps it took. A model that fails is the
        person's answer (what to do); a cancelled turn is recorded as stopped and the cancel goes on."""
        msg, chat = turn.msg, turn.msg.reply_chat
        preview = self.delivery.stream(chat, answers(item), inbox_id=item.inbox_id, draft=item.draft_message_id,
                                       intent=item.draft_intent)
        preview.begin()  # (after every wait before the turn's try: a turn stopped before it leaves no preview)
        turn.preview = preview
        status, outcome, tool_iterations = "ok", "ok", 0
        try:
            async with self.delivery.typing.shown(chat):
                if self.agent is None:
                    text, outcome = NO_LLM, "no_llm"
                    turn.record.append({"role": "user", "content": user_text(msg)})
                else:
                    try:
                        result = await self.agent.run_turn(
                            turn.history, user_text(msg), self.tools, turn.ctx, record=turn.record,
                            context=turn.context, on_text=preview.push, on_restart=preview.reset,
                            steer=turn.steering.take if self.busy_policy == "steer" else None,
                            on_summary=self._summary_sink(item, turn),
                            on_tool=lambda name, args: self.delivery.typing.activity(
                                chat, self.redact(CallShown.of(name, args).activity())))
                        text, tool_iterations = result.text, result.iterations - 1
                    except LLMError as exc:
                        log.warning("turn in %s failed: %s", item.key, exc)
                        text, outcome = exc.user_message, "llm_error"
                        del turn.record[1:]  # keep the user's message; drop the unfinished exchange
                        turn.steering.give_back()  # what was folded in is not answered by this: back to the queue
        except asyncio.CancelledError:
            await self._cancelled(worker, item, turn)
            raise
        except Exception as exc:
            log.exception("turn in %s failed", item.key)
            text, status, outcome = failed_text(exc), "failed", "error"
        return text, status, outcome, tool_iterations

    async def _finish(self, worker: SessionWorker, item: WorkItem, turn: _Open, text: str, status: str,
                      outcome: str, tool_iterations: int) -> str:
        """The reply committed with the transcript, then delivered over the preview; metrics; a review if
        one is due. Returns the outcome."""
        msg, preview = turn.msg, turn.preview
        assert preview is not None
        preview.stop()  # durability first: the reply is committed before any preview call is waited on
        reply = OutboxItem(chat=msg.reply_chat, text=text or "(The model returned an empty answer.)",
                           reply_to=answers(item), inbox_id=item.inbox_id, files=turn.outgoing.entries)
        count = self.learning.turn_count(turn.session_id, tool_iterations) \
            if self.learning is not None and outcome == "ok" else None
        worker.answered = True  # from the commit on, /stop and a newer message leave this turn be
        async with self.delivery.final_reply(reply, preview):  # (a storage error: held here until it is stored)
            await self.until_stored(lambda: self.transcripts.commit_turn(
                turn.session_id, turn.steering.inbox_ids, msg.chat, msg.user_id, turn.authored(), reply,
                status=status, also=count, fenced=self._fenced(item)), f"the answer in {item.key}")
        self.metrics.turns.labels(outcome).inc()
        self.metrics.turn_seconds.observe(time.monotonic() - turn.started)
        if self.learning is not None and count is not None:  # after delivery: never delays the reply
            try:
                self.learning.review_if_due(count, msg.reply_chat, platform=msg.platform, user_id=msg.user_id)
            except Exception:  # (the turn is done: a review that cannot start is not its failure)
                log.exception("could not start the review of %s", item.key)
        return outcome

    def _fenced(self, item: WorkItem) -> Work | None:
        return None if self.holder is None else still_owned(item.key, self.holder)

    async def _cancelled(self, worker: SessionWorker, item: WorkItem, turn: _Open) -> None:
        """A turn cancelled before its commit: nothing of it is sent; by `/stop` or a newer message it is
        recorded as cancelled and its preview says so. On shutdown its inbox row stays unfinished: the
        next start decides (see the module doc)."""
        msg, preview = turn.msg, turn.preview
        assert preview is not None
        preview.stop()
        if turn.outgoing.files:  # (a turn run again takes its copies anew)
            await asyncio.to_thread(discard, turn.outgoing.entries)
        if worker.cancel_reason not in ("stop", "interrupt"):
            return
        note = "⏹ Stopped." if worker.cancel_reason == "stop" else "⏹ Interrupted by a newer message."
        try:
            await self.until_stored(lambda: self.transcripts.commit_turn(
                turn.session_id, turn.steering.inbox_ids, msg.chat, msg.user_id, turn.authored(), None,
                status="cancelled", fenced=self._fenced(item)), f"the stopped turn in {item.key}")
        except NotOwner as exc:  # (another instance runs the conversation now: it records what becomes of it)
            log.warning("the stopped turn in %s was not recorded: %s", item.key, exc)
            return
        draft = await preview.finish()
        if draft:
            await self._mark_draft(msg, draft, note)
        self.metrics.turns.labels(worker.cancel_reason).inc()

    def _summary_sink(self, item: WorkItem, turn: _Open) -> Callable[[str, int], Awaitable[None]]:
        """Where a compression's summary goes: the session's new starting point."""
        async def summarised(summary: str, through: int) -> None:
            if through >= 0 and turn.ids[through] is not None:
                await self.until_stored(lambda: self.transcripts.save_summary(
                    turn.session_id, turn.ids[through], summary), f"a summary in {item.key}")
        return summarised

    async def _settle(self, ctx: ToolContext, item: WorkItem, msg: InboundMessage) -> ToolContext:
        """Whom the turn acts for and what its search reads (`Trust.settle`): the least trusted of everyone
        whose words are in its session and of whom it is for now — the person asking; nobody asks for a
        goal's turn now, so its creator and whoever added criteria. Its search reads this conversation
        only, unless the chat is a direct one (its one person alone reads the answer)."""
        run_for = await self.goals.run_for(item) if self.goals is not None and item.origin == "goal" \
            else [(msg.platform, msg.user_id)]
        ctx, _ = await self.trust.settle(ctx, self.transcripts, run_for, private=msg.chat_type == "dm")
        return ctx

    async def _fetch(self, msg: InboundMessage) -> InboundMessage:
        """Download the message's attachments (now, after the access check, not at intake)."""
        adapter = self.adapters.get(msg.platform)
        if adapter is None or not any(a.ref and not a.path and not a.error for a in msg.attachments):
            return msg
        folder = self.files_root / _UNSAFE.sub("_", msg.platform) / _UNSAFE.sub("_", msg.chat_id)
        fetched: list[Attachment] = []
        for a in msg.attachments:
            try:
                fetched.append(await adapter.fetch(a, folder))
            except Exception as exc:
                log.warning("could not fetch %s from %s: %s", a.name, msg.platform, exc)
                fetched.append(replace(a, error=f"{a.name} could not be downloaded ({type(exc).__name__})"))
        return replace(msg, attachments=tuple(fetched))

    async def _report_interrupted(self, item: WorkItem) -> None:
        """A turn cut off after it had started side effects: say so instead of running it again."""
        msg = item.msg
        text = interrupted_text(item.effects)
        session_id = await self.transcripts.active(item.key, msg.chat, msg.chat_type)
        record = [{"role": "user", "content": user_text(msg)}, {"role": "assistant", "content": text}]
        reply = OutboxItem(chat=msg.reply_chat, text=text, reply_to=answers(item),
                           draft_message_id=item.draft_message_id, inbox_id=item.inbox_id)
        await self.transcripts.commit_turn(session_id, [item.inbox_id], msg.chat, msg.user_id, record, reply,
                                           inbox_state="interrupted", fenced=self._fenced(item))
        self.metrics.turns.labels("interrupted").inc()
        await self.delivery.deliver(reply)

    async def _fail(self, item: WorkItem, exc: Exception) -> None:
        """Best effort when the turn itself could not be recorded: mark the row, tell the person."""
        try:
            await self.inbox.set_state([item.inbox_id], "failed", f"{type(exc).__name__}: {exc}"[:500],
                                       fenced=self._fenced(item))
            await self.delivery.reply(item.msg.reply_chat, failed_text(exc), reply_to=answers(item))
        except NotOwner as lost:  # (another instance runs the conversation now: it says what became of it)
            log.warning("the failed turn in %s was not reported: %s", item.key, lost)
        except Exception:
            log.exception("could not report the failed turn in %s", item.key)
        self.metrics.turns.labels("error").inc()

    async def _mark_draft(self, msg: InboundMessage, draft: str, note: str) -> None:
        """Leave the half-streamed draft saying it was stopped (best effort, not durable)."""
        adapter = self.adapters.get(msg.platform)
        if adapter is None:
            return
        try:
            await adapter.edit(msg.reply_chat, draft, Reply(text=note))
        except Exception as exc:
            log.debug("could not mark stopped draft: %s", exc)
