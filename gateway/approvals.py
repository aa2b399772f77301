"""Asking a person before the agent does something dangerous, and remembering the answer.

Each request moves once from `pending` to one of `once`, `session`, `always`, `denied`, `expired`
or `cancelled`: the first decision wins, and is kept with who made it and when, as is every step
(`gateway.storage.approvals`). Whatever ends a request — a button, `/approve`, `/deny`,
a bare yes/no, `/stop`, the timeout, a shutdown or a restart — edits the prompt to say so and
removes its buttons, and the waiting tool gets the outcome in plain words for the model.

"Allow for this session" and "Always allow" cover the same kind and subject run with no more
power: a command allowed inside the sandbox is asked again before it runs outside it (the prompt
says where it runs). Outside it, they cover the command only while its words lead where they led
when it was shown (the request's `reach`); a request marked `each_time` (a command that reaches
chatgate's own state) is never covered, and its prompt offers only "Allow once" and "Deny". A
session grant covers the requests of the person who asked, in that session: in a shared one,
another member's request (or a turn acting for them) is asked again. What the
model or a person wrote (a command in a reason, a subagent's task, a job's name) is shown as one
line of quoted text that no platform renders as markup; in the subject, what could hide or reorder
a part of it (a bidi control, a zero-width character, screens of empty lines or blanks) is shown by
name (`revealed`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import secrets
import time
import unicodedata
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from agent.tools import ApprovalOutcome, ApprovalRequest, ToolContext
from gateway.chat.delivery import Delivery
from gateway.ops.redact import redact_values
from gateway.storage.approvals import Approval, ApprovalStore
from gateway.storage.database import StorageError
from platforms.base import Button, ButtonPress, ChatRef, PlatformAdapter, Reply

log = logging.getLogger(__name__)

PREFIX = "ap:"
CHOICES = {"o": "once", "s": "session", "a": "always", "d": "denied"}
LABELS = {"once": "Allow once", "session": "Allow for this session", "always": "Always allow", "denied": "Deny"}
APPROVED = frozenset({"once", "session", "always"})
MAX_SHOWN = 1500
POLL_SECONDS = 0.5  # several instances: how often a waiting turn reads whether another instance decided
MAX_REASON = 300  # characters of one reason shown (a classifier's reason quotes the command)
INVISIBLE = frozenset({"Cc", "Cf", "Cn", "Co", "Cs", "Zl", "Zp"})  # categories a subject shows by code point
MAX_BLANKS = 24  # spaces or tabs in a row a subject shows as they are
_EMPTY_LINES = re.compile(r"\n(?:[ \t]*\n){3,}")  # more than two empty lines
_BLANKS = re.compile(rf"[ \t]{{{MAX_BLANKS + 1},}}")
HIDING = ("it holds characters that show nothing or change the order of the text around them, shown as "
          "⟨U+…⟩: what runs is the text with them in it")
# What a grant made for one confinement covers: a command allowed to run unconfined may also run in the
# sandbox (less power), never the other way round. A command that does not say is taken as unconfined.
COVERS = {"sandbox": ("sandbox", "unconfined"), "unconfined": ("unconfined",)}
EACH_TIME = "each-time:"  # the key of a request no grant may answer: it matches no subject's hash
EACH_TIME_LINE = ("Asked each time: a command that reaches chatgate's own state is never allowed for a session "
                  "or always.")
WHERE = {"sandbox": "Where it runs: inside the sandbox (only the workspace is writable; chatgate's own files "
                    "and secrets are hidden).",
         "unconfined": "Where it runs: **outside any sandbox**, with chatgate's own access to files, secrets "
                       "and the network."}


def subject_hash(kind: str, subject: str) -> str:
    """With the request's confinement, the key of session grants and "always allow" rules. The reasons
    are not in it: they explain the same command (the classifier's words, on whose behalf), and a rule
    must not lapse when that wording changes; where the command runs is what changes its power."""
    return hashlib.sha256(f"{kind}\0{subject}".encode()).hexdigest()


def confinement_of(request: ApprovalRequest) -> str:
    """Where the request's command runs ("sandbox" | "unconfined"); "" for anything but a command."""
    if request.kind != "command":
        return ""
    return "sandbox" if request.confinement == "sandbox" else "unconfined"


def quoted(text: str) -> str:
    """Text that may come from the model or a person, as one line of inline code: no line break (nor a
    character a client shows as one), no control or bidi character, no backtick, at most `MAX_REASON`
    characters. Every renderer (Telegram, Slack, Discord, the web chat) shows a code span as it is, so
    it cannot add markup or a line that reads as the prompt's own."""
    kept = "".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in text
                   if unicodedata.category(c) != "Cf")
    line = " ".join(kept.replace("`", "\u02cb").split())
    if len(line) > MAX_REASON:
        line = line[:MAX_REASON - 1] + "…"
    return f"`{line}`" if line else ""


_MARKUP = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>&:])")


def plain_name(name: str) -> str:
    """A person's display name as inert Markdown: one line, no control or bidi character, every
    character Markdown could read as markup escaped (a name like `**Admin**` or `[x](url)` stays text)."""
    line = quoted(name)[1:-1].replace("\u02cb", "`")
    return _MARKUP.sub(r"\\\1", line) or "someone"


@dataclass(slots=True)
class _Waiting:
    approval_id: str
    session_key: str
    future: asyncio.Future[ApprovalOutcome]


def _status_line(state: str, who: str, note: str | None, timeout: float) -> str:
    who = plain_name(who)
    if state == "once":
        return f"✅ Allowed once by {who}."
    if state == "session":
        return f"✅ Allowed for this session by {who}."
    if state == "always":
        return f"✅ Always allowed by {who} (rule added)."
    if state == "denied":
        return f"❌ Denied by {who}" + (f": {quoted(note)}" if note else ".")  # (their words, quoted)
    if state == "cancelled":
        return "⏹ Cancelled: the request was stopped."
    return f"⌛ Expired: {note or f'nobody answered within {timeout / 60:.0f} min'}. Treated as denied."


def _outcome(approval: Approval, timeout: float) -> ApprovalOutcome:
    """What the waiting tool call hears of a decided request."""
    state = approval.state
    return ApprovalOutcome(state in APPROVED, state, _agent_words(state, approval.decided_by or "someone",
                                                                 approval.note, timeout))


def _agent_words(state: str, who: str, note: str | None, timeout: float) -> str:
    if state == "once":
        return f"{who} approved it once."
    if state == "session":
        return f"{who} approved it for the rest of this session."
    if state == "always":
        return f"{who} approved it and allowed it from now on."
    not_run = " It was NOT run; do not try to get around this, ask the user how to proceed."
    if state == "denied":
        return f"{who} denied it" + (f", saying: {note}." if note else ".") + not_run
    if state == "cancelled":
        return "The user stopped the request." + not_run
    return (f"Nobody approved it ({note or f'no answer within {timeout / 60:.0f} min'}), so it counts as denied."
            + not_run)


def _invisible(c: str) -> bool:
    """A character a subject shows by its code point (not a line break or a tab)."""
    return c not in "\n\t" and unicodedata.category(c) in INVISIBLE


def revealed(text: str) -> str:
    """`text` with nothing that hides or reorders a part of it where a person reads it: a character that
    shows nothing or changes the order of the text around it (a bidi control, a zero-width space, a
    carriage return but at a line's end, a line separator) as its code point, ⟨U+202E⟩; more than two
    empty lines in a row and a run of more than `MAX_BLANKS` blanks as a note of how many there were."""
    shown = "".join(f"⟨U+{ord(c):04X}⟩" if _invisible(c) else c for c in text.replace("\r\n", "\n"))
    shown = _EMPTY_LINES.sub(lambda m: f"\n[… {m.group().count(chr(10)) - 1:,} empty lines …]\n", shown)
    return _BLANKS.sub(lambda m: f" [… {len(m.group()):,} blanks …] ", shown)


def shown_subject(subject: str, secrets: list[str]) -> tuple[str, bool]:
    """What the prompt shows of a command or file change (real secrets masked, what could hide a part
    of it `revealed`), and whether it had to be cut — then it ends with a line that says so."""
    shown = revealed(redact_values(subject, secrets))
    if len(shown) <= MAX_SHOWN:
        return shown, False
    return f"{shown[:MAX_SHOWN]}\n[… {len(shown) - MAX_SHOWN:,} more characters NOT shown …]", True


def prompt_text(kind: str, subject: str, reasons: list[str], approval_id: str, confinement: str = "",
                each_time: bool = False) -> str:
    """The prompt's Markdown. The subject is in a fence longer than any run of backticks inside it,
    so a line of backticks in a command cannot close the block and pose as the prompt's own text;
    each reason is `quoted` (it may hold the model's words); a command says where it runs, and one
    that only a yes to this very request can allow says so."""
    what = {"command": "run this command", "job": "schedule this job",
            "job_change": "change or run a scheduled job"}.get(kind, "touch this file")
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", subject)), default=0))
    where = f"{WHERE[confinement]}\n" if confinement in WHERE else ""
    where += f"{EACH_TIME_LINE}\n" if each_time else ""
    why = "; ".join(q for q in map(quoted, reasons) if q) or "it needs consent"
    return (f"⚠️ **Approval needed** — the agent wants to {what}:\n{fence}\n{subject}\n{fence}\n"
            f"{where}Why it asks: {why}\nOnly the person who asked (or an admin) can decide. id `{approval_id}`")


class Approvals:
    """The gateway's side of `agent.tools.ApprovalPort`."""

    def __init__(self, stored: ApprovalStore, delivery: Delivery, adapters: Mapping[str, PlatformAdapter], *, mode: str,
                 timeout: float, is_admin: Callable[[str, str], bool], secrets_: list[str],
                 spawn: Callable[[Awaitable[None]], Any] | None = None,
                 may_approve: Callable[[str, str], bool] | None = None,
                 always_scope: str = "user", instance: str | None = None) -> None:
        self._spawn = spawn  # runs the prompt's edit after a decision as a task (it may wait out rate limits)
        self.stored = stored  # the requests, their events, grants and rules
        self.delivery = delivery
        self.adapters = adapters
        self.mode = mode
        self.timeout = timeout
        self.is_admin = is_admin
        self.may_approve = may_approve or (lambda platform, user_id: True)  # decides own requests (not admins)
        self.always_scope = always_scope
        self.secrets = secrets_
        self.instance = instance  # several instances on one database: this one's id (None: the only one)
        self._waiting: dict[str, _Waiting] = {}

    @property
    def waiting(self) -> int:
        """Prompts waiting for a person now."""
        return len(self._waiting)

    def pending_in(self, session_key: str) -> list[str]:
        return [w.approval_id for w in self._waiting.values() if w.session_key == session_key]

    # -- the port -------------------------------------------------------------------------

    async def request(self, ctx: ToolContext, request: ApprovalRequest) -> ApprovalOutcome:
        reasons = "; ".join(request.reasons) or "it needs consent"
        if self.mode == "off":
            return ApprovalOutcome(True, "auto", "Approvals are off (approvals.mode: off).")
        if self.mode == "deny":
            return ApprovalOutcome(False, "refused", f"Refused without asking: {reasons}; approvals.mode is deny. "
                                   "It was NOT run. Tell the user what you wanted to do and why.")
        digest, confinement = subject_hash(request.kind, request.subject), confinement_of(request)
        if request.each_time:
            return await self._ask(ctx, request, EACH_TIME + digest, confinement)
        covering = COVERS.get(confinement, (confinement,))
        reach = request.reach if confinement == "unconfined" else None  # (in the sandbox: wherever they lead)
        if await self.stored.allowed_by_rule(request.kind, digest, covering, reach, ctx.platform,
                                                      ctx.chat_id, ctx.user_id):
            return ApprovalOutcome(True, "always", "Allowed by an 'always allow' rule.")
        if ctx.session_id is not None and await self.stored.granted_for_session(
                ctx.session_id, digest, covering, reach, ctx.platform, ctx.user_id):  # (shared: that person's)
            return ApprovalOutcome(True, "session", "Allowed for this session earlier.")
        return await self._ask(ctx, request, digest, confinement)

    async def _ask(self, ctx: ToolContext, request: ApprovalRequest, digest: str,
                   confinement: str) -> ApprovalOutcome:
        approval_id = secrets.token_urlsafe(12)
        chat = ChatRef(ctx.platform, ctx.chat_id, ctx.place.thread_id)
        shown, cut = shown_subject(request.subject, self.secrets)
        reasons = [redact_values(reason, self.secrets) for reason in request.reasons]  # they quote the command
        if any(map(_invisible, request.subject.replace("\r\n", "\n"))):
            reasons.append(HIDING)
        if cut:
            reasons.append(f"it is {len(request.subject):,} characters long and only the start is shown: "
                           "deny it unless you know the rest")
        now = time.time()
        await self.stored.add(Approval(
            approval_id, ctx.place.session_key or "", ctx.session_id, chat.platform, chat.chat_id,
            chat.thread_id, ctx.user_id, request.kind, shown, digest, confinement, reasons, now, now + self.timeout,
            reach=request.reach if confinement == "unconfined" else ""), self.instance)
        future: asyncio.Future[ApprovalOutcome] = asyncio.get_running_loop().create_future()
        self._waiting[approval_id] = _Waiting(approval_id, ctx.place.session_key or "", future)
        try:
            if not await self._show_prompt(approval_id, chat):
                await self.decide(approval_id, "expired", "gateway", "the approval prompt could not be shown")
            async with self.delivery.typing.paused(chat):
                try:
                    async with asyncio.timeout(self.timeout):  # (not wait_for: it can swallow a /stop)
                        return await self._decided(approval_id, future)
                except TimeoutError:
                    if not await self.decide(approval_id, "expired", "timeout") and not future.done():
                        await self._from_store(approval_id, future)  # (another instance decided it first)
                    return future.result()
        except asyncio.CancelledError:
            await self.decide(approval_id, "cancelled", "stop")
            raise
        finally:
            self._waiting.pop(approval_id, None)

    async def _decided(self, approval_id: str, future: asyncio.Future[ApprovalOutcome]) -> ApprovalOutcome:
        """The outcome: decided here (`decide` sets `future`), or, with several instances, on another one —
        a press or a command that reached it — read from the database every `POLL_SECONDS`."""
        if self.instance is None:
            return await asyncio.shield(future)
        while not future.done():
            await asyncio.wait({future}, timeout=POLL_SECONDS)  # (a cancelled wait leaves `future` alone)
            if future.done():
                break
            try:
                await self._from_store(approval_id, future)
            except StorageError as exc:  # (the next poll tries again; the timeout still holds)
                log.warning("reading approval %s: %s", approval_id, exc)
        return future.result()

    async def _from_store(self, approval_id: str, future: asyncio.Future[ApprovalOutcome]) -> None:
        """`future` set from the stored request when it was decided (on another instance); still pending: not."""
        approval = await self.stored.get(approval_id)
        if approval is not None and approval.state != "pending" and not future.done():
            future.set_result(_outcome(approval, self.timeout))

    # -- deciding -------------------------------------------------------------------------

    async def decide(self, approval_id: str, state: str, actor: str, note: str | None = None) -> bool:
        """Move a pending request to `state`; False when it was already decided (first one wins)."""
        rule_scope = self.always_scope if state == "always" else None  # ("always" adds a rule: same write)
        if not await self.stored.decide(approval_id, state, actor, note, rule_scope=rule_scope):
            return False
        approval = await self.stored.get(approval_id)
        assert approval is not None
        log.info("approval %s: %s by %s", approval_id, state, actor)
        waiting = self._waiting.get(approval_id)
        if waiting is not None and not waiting.future.done():  # the tool goes on at once; the edit follows
            waiting.future.set_result(_outcome(approval, self.timeout))
        if self._spawn is not None:
            self._spawn(self._show_outcome(approval))
        else:
            await self._show_outcome(approval)
        return True

    async def on_button(self, press: ButtonPress) -> str:
        """A button under a prompt was pressed; returns the short answer shown to the presser."""
        _, _, rest = press.data.partition(PREFIX)
        approval_id, _, choice = rest.rpartition(":")
        approval = await self.stored.get(approval_id)
        if approval is None or choice not in CHOICES or \
                (approval.platform, approval.chat_id) != (press.platform, press.chat_id):
            return "This approval request does not exist."
        if not self._may_decide(approval, press.platform, press.user_id):
            await self.stored.add_event(approval_id, "refused_press", press.user_id,
                                                 "not the requester or an admin")
            return "This approval is not yours to decide."
        state = CHOICES[choice]
        if state in ("session", "always") and approval.subject_hash.startswith(EACH_TIME):
            await self.stored.add_event(approval_id, "refused_press", press.user_id, "asked each time")
            return "This one can only be allowed once: it reaches chatgate's own state."
        if state == "always" and not self.is_admin(press.platform, press.user_id):
            await self.stored.add_event(approval_id, "refused_press", press.user_id,
                                                 "always allow needs an admin")
            return "Only an admin can allow this for always; choose Allow once or Allow for this session."
        if not await self.decide(approval_id, state, press.user_name or press.user_id):
            return "Already decided."
        return LABELS[state] + " — done."

    async def on_command(self, session_key: str, platform: str, user_id: str, user_name: str, approve: bool,
                         args: str) -> str:
        """`/approve [id]`, `/deny [id] [reason]`, or a bare yes/no (args empty)."""
        pending = await self.stored.pending_in(session_key)  # (its turn may run on another instance)
        first, _, rest = args.partition(" ")
        matches = [a for a in pending if first and len(first) >= 4 and a.startswith(first)]
        if matches:
            approval_id, note = matches[0], rest.strip() or None
        elif len(pending) == 1:
            approval_id, note = pending[0], args.strip() or None
        elif not pending:
            return "There is no approval waiting here."
        else:
            return f"{len(pending)} approvals are waiting; use the buttons or give the id: /approve <id>."
        approval = await self.stored.get(approval_id)
        if approval is None or not self._may_decide(approval, platform, user_id):
            return "This approval is not yours to decide."
        state = "once" if approve else "denied"
        if not await self.decide(approval_id, state, user_name or user_id, None if approve else note):
            return "Already decided."
        return "Approved once." if approve else "Denied."

    async def expire_all(self, note: str) -> None:
        """End every pending request nobody waits for any more: at shutdown and at start, this instance's and
        those a dead process left (the only instance: all of them; several: not another live one's)."""
        ids = await (self.stored.pending() if self.instance is None else self.stored.pending_of(self.instance))
        for approval_id in ids:
            await self.decide(approval_id, "expired", "gateway", note)

    async def expire_overdue(self) -> None:
        """End requests past their time that no waiting turn here will end, and (several instances) those of
        an instance that died (from the tick)."""
        for approval_id in await self.stored.pending(expired_before=time.time() - 5.0):
            if approval_id not in self._waiting:
                await self.decide(approval_id, "expired", "timeout")
        await self.expire_orphaned("the instance that asked stopped")

    async def expire_orphaned(self, note: str) -> None:
        """Several instances: end the requests of instances that died (their life lease ended: the turn that
        waited on one is gone). At each tick, and at start once the first look has found who is gone."""
        if self.instance is not None:
            for approval_id in await self.stored.pending_of(None):
                await self.decide(approval_id, "expired", "gateway", note)

    # -- helpers --------------------------------------------------------------------------

    def _may_decide(self, approval: Approval, platform: str, user_id: str) -> bool:
        """An admin; or the person who asked, when they may approve at all (`may_approve`)."""
        if self.is_admin(platform, user_id):
            return True
        return user_id == approval.requester_id and approval.platform == platform and \
            self.may_approve(platform, user_id)

    @staticmethod
    def _prompt_text(approval: Approval) -> str:
        return prompt_text(approval.kind, approval.subject, approval.reasons, approval.id, approval.confinement,
                           approval.subject_hash.startswith(EACH_TIME))

    async def _show_prompt(self, approval_id: str, chat: ChatRef) -> bool:
        adapter = self.adapters.get(chat.platform)
        approval = await self.stored.get(approval_id)
        if adapter is None or approval is None:
            return False
        text = self._prompt_text(approval) + f"\nExpires in {self.timeout / 60:.0f} min."
        part = adapter.render(text)[0]
        pairs = (("o", "d"),) if approval.subject_hash.startswith(EACH_TIME) else (("o", "s"), ("a", "d"))
        buttons = tuple(tuple(Button(LABELS[CHOICES[c]], f"{PREFIX}{approval_id}:{c}") for c in pair)
                        for pair in pairs)
        try:
            message_id = await self.delivery.patiently(
                lambda: adapter.send_buttons(chat, Reply(text=part.text, plain=part.plain, buttons=buttons)))
        except Exception as exc:
            log.warning("could not show approval prompt %s: %s", approval_id, exc)
            return False
        await self.stored.set_prompt(approval_id, message_id)
        return True

    async def _show_outcome(self, approval: Approval) -> None:
        adapter = self.adapters.get(approval.platform)
        if adapter is None or not approval.prompt_message_id:
            return
        text = self._prompt_text(approval) + "\n\n" + _status_line(approval.state, approval.decided_by or "",
                                                                   approval.note, self.timeout)
        part = adapter.render(text)[0]
        chat = ChatRef(approval.platform, approval.chat_id, approval.thread_id)
        prompt_id = approval.prompt_message_id
        try:
            await self.delivery.patiently(
                lambda: adapter.edit(chat, prompt_id, Reply(text=part.text, plain=part.plain)))
        except Exception as exc:  # best effort: the decision stands either way
            log.warning("could not update approval prompt %s: %s", approval.id, exc)
