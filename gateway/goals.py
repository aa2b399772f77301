"""`/goal`: the agent keeps working toward an objective, turn after turn, until a judge says it is
reached, the turn budget (`goals.max_turns`) is spent, or the person stops it.

Each turn of a goal is an inbox row of its own (message id `goal:<id>:<seq>`), dispatched to the
session like any message: it obeys the busy policy (a person's message queues beside it,
interrupts it or steers it), `/stop` stops it, and a turn cut off by a restart runs again. After
a turn the judge (`agent.goal_judge`, on the auxiliary model) reads what the turn did; its
verdict, the goal's counters, the notice to the chat and the next turn's row are committed in one
transaction. A goal whose latest turn finished but was not judged (the gateway stopped in
between) is judged at the next start, so a goal in progress always carries on.

Who may do what: anyone in the conversation may set a goal, see it and pause it (as anyone may
`/stop`); only its creator or an admin may add to it (`/subgoal`), resume or clear it (`/new` by
anyone else pauses it). A turn is nobody's request of the moment: it acts for the least trusted of
the creator, whoever added criteria and everyone whose messages are in its session
(`gateway.access.trust`), and only while its creator may still talk to the agent there (revoked,
the goal is paused). A resume that gives a goal more turns counts against the person's
`goals.max_resumes_per_day`.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable

from agent.goal_judge import Judge, Verdict
from agent.llm import LLMError
from gateway.access.trust import ADMIN, Person, Trust
from gateway.chat.delivery import Delivery
from gateway.chat.sessions import WorkItem
from gateway.storage.goals import Goal, GoalStore, GoalTurn
from gateway.storage.inbox import InboxStore
from gateway.storage.outbox import OutboxItem
from platforms.base import InboundMessage

log = logging.getLogger(__name__)

OPEN = ("active", "paused", "exhausted")
UNFINISHED = ("received", "processing")
MAX_OBJECTIVE = 2000
MAX_CRITERIA = 20


def _work(turn: GoalTurn) -> WorkItem:
    """A goal turn as its session's queue takes it."""
    return WorkItem(turn.inbox_id, turn.session_key, turn.msg, goal_turn=turn.goal_turn)


def describe(goal: Goal) -> str:
    """What `/goal status` says of a goal."""
    lines = [f"🎯 Goal: {goal.objective}"]
    lines += [f"  ✓ must also hold: {c}" for c in goal.criteria]
    state = {"active": "working on it", "paused": "paused (/goal resume)", "done": "reached",
             "exhausted": "stopped at its turn limit (/goal resume gives it more)", "cleared": "cleared"}
    lines.append(f"State: {state.get(goal.state, goal.state)}, turn {goal.turns} of {goal.max_turns}")
    if goal.reason:
        lines.append(f"Latest: {goal.reason}")
    return "\n".join(lines)


class Goals:
    def __init__(self, stored: GoalStore, inbox: InboxStore, delivery: Delivery, judge: Judge | None, *,
                 max_turns: int, dispatch: Callable[[WorkItem], None], spawn: Callable[..., Any], trust: Trust,
                 max_resumes_per_day: int = 10) -> None:
        self.spawn = spawn  # a background task the runner keeps (and waits for at stop)
        self.stored = stored
        self.inbox = inbox  # (a goal's turns are inbox rows)
        self.delivery = delivery
        self.judge = judge
        self.max_turns = max_turns
        self.dispatch = dispatch
        self.trust = trust
        self.max_resumes = max_resumes_per_day

    # -- the chat commands ----------------------------------------------------------------

    async def command(self, name: str, args: str, item: WorkItem) -> str:
        """`/goal [objective|status|pause|resume|clear]` and `/subgoal <criterion>`."""
        key = item.key
        word = args.lower()
        if word in ("", "status"):
            goal = await self.stored.latest(key)
            return describe(goal) if goal else "No goal here. Set one with /goal <what you want done>."
        if word == "pause":
            goal = await self.pause(key, "paused by you")
            return "⏸ Goal paused. /goal resume to go on." if goal else "No goal is running here."
        if name == "subgoal" or word in ("resume", "clear"):
            goal = await self.open_goal(key)
            if goal is not None and not await self.may_steer(goal, item.msg):
                who = goal.origin.user_name or goal.origin.user_id
                return (f"Only {who}, who set this goal, or an admin can add to it, resume it or clear it. "
                        "Anyone here can pause it (/goal pause or /stop).")
        if name == "subgoal":
            return await self._add_criterion(key, args, item.msg)
        if word == "resume":
            return await self._resume(key, item.msg)
        if word == "clear":
            goal = await self.stored.set_state(key, OPEN, "cleared", "cleared by you")
            return "Goal cleared." if goal else "No goal to clear."
        return await self._start(item, args)

    async def may_steer(self, goal: Goal, msg: InboundMessage) -> bool:
        """Whether the author of `msg` may add to, resume or clear `goal`: its creator or an admin."""
        return (msg.platform, msg.user_id) == goal.creator or await self.trust.rank(msg.platform, msg.user_id) == ADMIN

    async def session_reset(self, item: WorkItem) -> str:
        """`/new`: the session's goal is cleared — or, asked by someone who may not clear it, paused."""
        goal = await self.open_goal(item.key)
        if goal is None:
            return ""
        if await self.may_steer(goal, item.msg):
            return " Its goal was cleared." if await self.clear(item.key) is not None else ""
        paused = await self.pause(item.key, "the session was reset") is not None
        return (" Its goal stays" + (" (paused)" if paused else "") +
                ": only the person who set it or an admin can resume or clear it.")

    async def _start(self, item: WorkItem, objective: str) -> str:
        if self.judge is None:
            return "A goal needs a language model (and its judge): configure llm.base_url first."
        if len(objective) > MAX_OBJECTIVE:
            return f"That objective is {len(objective):,} characters; keep it under {MAX_OBJECTIVE:,}."
        if await self.open_goal(item.key) is not None:
            return "A goal is already set here (/goal status). /goal clear it first, or add to it with /subgoal."
        origin = replace(item.msg, text="", attachments=(), raw={}, reply_to=None)
        _, turn = await self.stored.create(item.key, origin, objective, self.max_turns,
                                                self._first_text(objective, self.max_turns))
        self._dispatch(turn)
        return (f"🎯 Goal set: {objective}\nI will work on it turn by turn (up to {self.max_turns} turns); after "
                "each turn a judge checks whether it is reached. /goal status shows where it stands, /subgoal "
                "adds a criterion, /stop or /goal pause stops it.")

    async def _add_criterion(self, key: str, criterion: str, msg: InboundMessage) -> str:
        if not criterion:
            return "Say what must also hold: /subgoal <criterion>."
        goal = await self.open_goal(key)
        if goal is None:
            return "No goal here to add to. Set one with /goal <what you want done>."
        if len(goal.criteria) >= MAX_CRITERIA:
            return f"This goal already has {MAX_CRITERIA} criteria."
        criteria = [*goal.criteria, criterion[:MAX_OBJECTIVE]]
        people = list(dict.fromkeys([*goal.people, (msg.platform, msg.user_id)]))
        await self.stored.set_criteria(goal.id, criteria, people)
        return f"Added to the goal: {criterion}. The judge now checks {len(criteria)} criteria besides the objective."

    async def _resume(self, key: str, msg: InboundMessage) -> str:
        goal = await self.open_goal(key)
        if goal is None or goal.state == "active":
            return "No paused goal here." if goal is None else "The goal is already running."
        more = goal.state == "exhausted"  # (a paused goal goes on within the turns it had)
        max_turns = goal.max_turns + self.max_turns if more else goal.max_turns
        # its next turn still waits in the queue
        pending = await self.stored.turn_state(goal, goal.seq) in UNFINISHED
        seq = goal.seq if pending else goal.seq + 1
        resumed = replace(goal, state="active", max_turns=max_turns, seq=seq)
        allowed, turn = await self.stored.resume(
            goal, max_turns=max_turns, seq=seq, next_turn=None if pending else self._next_text(resumed, None),
            counted=(msg.platform, msg.user_id) if more else None, max_resumes=self.max_resumes)
        if not allowed:
            return (f"You have given goals more turns {self.max_resumes} time(s) in the last 24 hours, as many as "
                    "goals.max_resumes_per_day allows; try again later, or /goal clear this one.")
        self._dispatch(turn)
        return f"▶️ Goal resumed (turn {goal.turns} of {max_turns} so far)."

    async def pause(self, key: str, why: str) -> Goal | None:
        """Pause the session's running goal (`/stop`, `/goal pause`); its queued turn will not run."""
        return await self.stored.set_state(key, ("active",), "paused", why)

    async def clear(self, key: str) -> Goal | None:
        """Drop the session's goal (`/new`)."""
        return await self.stored.set_state(key, OPEN, "cleared", "the session was reset")

    # -- queries --------------------------------------------------------------------------

    async def open_goal(self, key: str) -> Goal | None:
        """(Control asks here before `/new`.)"""
        return await self.stored.open_goal(key)

    # -- the turns ------------------------------------------------------------------------

    async def run_for(self, item: WorkItem) -> list[Person]:
        """Whom a goal turn is run for besides those whose messages are in its session: whoever added
        criteria and its creator (last: of equals, the turn acts for them; see `gateway.access.trust`)."""
        assert item.goal_turn is not None
        goal = await self.stored.get(item.goal_turn[0])
        return [*goal.people, goal.creator] if goal is not None else [(item.msg.platform, item.msg.user_id)]

    async def turn_starting(self, item: WorkItem) -> bool:
        """Whether a goal turn that comes up in its session's queue should run (its goal still active,
        it is the goal's latest turn, and its creator may still talk to the agent there — else the goal
        is paused, saying so); one that should not is set aside."""
        assert item.goal_turn is not None
        goal_id, seq = item.goal_turn
        goal = await self.stored.get(goal_id)
        if goal is not None and goal.state == "active" and goal.seq == seq:
            if await self.trust.admitted(goal.origin):
                return True
            await self._stop(goal, seq, "paused", "⏸ The goal is paused: the person who set it no longer has "
                             "access here. /goal clear drops it.", "its creator no longer has access")
        await self.inbox.set_state([item.inbox_id], "cancelled", "its goal is no longer running")
        return False

    def after_turn(self, item: WorkItem, outcome: str) -> None:
        """Judge the turn in the background: the session goes on meanwhile (a person's message that
        waits is answered first), and a `/stop` or an interruption cannot cut the judgement off."""
        self.spawn(self.turn_ended(item, outcome), name="goal-judge")

    async def turn_ended(self, item: WorkItem, outcome: str) -> None:
        """After a goal turn: `ok` → the judge decides; `interrupted` (a newer message, a restart) →
        the work goes on without a verdict; anything else (the model failed) pauses the goal."""
        assert item.goal_turn is not None
        goal_id, seq = item.goal_turn
        goal = await self.stored.get(goal_id)
        if goal is None or goal.state != "active" or goal.judged >= seq:
            return
        if outcome not in ("ok", "interrupted"):
            await self._stop(goal, seq, "paused", "⏸ The goal is paused: its last turn failed. /goal resume to "
                                                  "try again.", "its last turn failed")
            return
        verdict = None
        if outcome == "ok":
            assert self.judge is not None
            messages = await self.stored.turn_messages(item.inbox_id)
            try:
                verdict = await self.judge.decide(goal.objective, goal.criteria, messages)
            except LLMError as exc:
                log.warning("the judge of goal %s failed: %s", goal.id, exc)
                await self._stop(goal, seq, "paused", f"⏸ The goal is paused: the judge could not be reached "
                                                      f"({exc.user_message}). /goal resume to go on.",
                                 "the judge could not be reached")
                return
        await self._advance(goal, seq, verdict)

    async def _advance(self, goal: Goal, seq: int, verdict: Verdict | None) -> None:
        turns = goal.turns + 1
        reason = verdict.reason if verdict else None
        if verdict is not None and verdict.done:
            await self._stop(goal, seq, "done", f"✅ Goal reached after {turns} turn(s): {reason}", reason, turns)
            return
        if turns >= goal.max_turns:
            await self._stop(goal, seq, "exhausted", (
                f"⏹ The goal was not reached in {turns} turns" + (f": {reason}" if reason else "") +
                f". /goal resume gives it {self.max_turns} more turns; /goal clear drops it."), reason, turns)
            return
        following = replace(goal, turns=turns, seq=seq + 1, reason=reason or goal.reason)
        notice = OutboxItem(chat=goal.origin.reply_chat, text=f"↻ Continuing ({turns}/{goal.max_turns}): {reason}") \
            if reason else None

        _, turn = await self.stored.settle(goal, seq, state="active", reason=reason, turns=turns, next_seq=seq + 1,
                                                notice=notice, next_turn=self._next_text(following, reason))
        if notice is not None and notice.id is not None:
            await self.delivery.deliver(notice)
        self._dispatch(turn)

    async def _stop(self, goal: Goal, seq: int, state: str, text: str, reason: str | None,
                    turns: int | None = None) -> None:
        """End (or pause) the goal with a notice to the chat, in one transaction."""
        notice = OutboxItem(chat=goal.origin.reply_chat, text=text)
        stopped, _ = await self.stored.settle(goal, seq, state=state, reason=reason,
                                                   turns=goal.turns if turns is None else turns, next_seq=goal.seq,
                                                   notice=notice)
        if stopped:
            await self.delivery.deliver(notice)

    def _dispatch(self, turn: GoalTurn | None) -> None:
        if turn is not None:
            self.dispatch(_work(turn))

    async def resume_pending(self) -> list[Goal]:
        """At start: goals whose latest turn finished before it was judged. (Turns still unfinished
        run again with the other unfinished messages.)"""
        unjudged = await self.stored.unjudged()
        for u in unjudged:
            outcome = {"done": "ok", "failed": "error"}.get(u.turn_state, "interrupted")
            await self.turn_ended(_work(u.turn), outcome)
        return [u.goal for u in unjudged]

    # -- what the model is told -----------------------------------------------------------

    def _criteria(self, goal: Goal) -> str:
        listed = "".join(f"\n- {c}" for c in goal.criteria)
        return f"\nIt is reached only when these hold too:{listed}" if listed else ""

    def _first_text(self, objective: str, max_turns: int) -> str:
        """A new goal's first turn (it has no criteria yet)."""
        return (f"[Goal] {objective}\n\nWork toward this goal. You have up to "
                f"{max_turns} turns; after each one a judge checks whether it is reached. Do as much as "
                "you can in this turn, then say what you did and what is left.")

    def _next_text(self, goal: Goal, reason: str | None) -> str:
        note = f"\nThe judge's note on your last turn: {reason}" if reason else ""
        return (f"[Goal, turn {goal.turns + 1} of {goal.max_turns}] Keep working toward the goal: "
                f"{goal.objective}{self._criteria(goal)}{note}\nSay what you did and what is left.")
