"""Goals.

A goal is a row of `goals`; each of its turns is an inbox row of its own, with the message id
`goal:<id>:<seq>`: `seq` is the goal's latest turn, `judged` the latest one the judge (or an
interruption) has dealt with. A verdict is recorded by compare-and-set (only while the goal is active
and that turn not yet judged), in one transaction with the goal's counters, the notice to the chat and
the next turn's inbox row (`settle`). A resume that gives a goal more turns is a row of `goal_resumes`
for a day, counted per person in the same transaction.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any

from gateway.storage.connection import Connection
from gateway.storage.inbox import decode_inbound, encode_inbound, insert_inbox
from gateway.storage.outbox import OutboxItem, insert_outbox
from gateway.storage.tables import Tables
from platforms.base import InboundMessage

TURN_ID = "goal:"  # a goal turn's message id, goal:<goal id>:<seq>: unique in its chat (what it is: `origin`)
RESUME_WINDOW = 86400.0  # resumes are counted over the last day

Person = tuple[str, str]  # (platform, user id)


@dataclass(frozen=True, slots=True)
class Goal:
    """A goal as stored (`state` active | paused | done | exhausted | cleared)."""

    id: int
    session_key: str
    origin: InboundMessage  # the /goal message: where its turns come from and go
    objective: str
    criteria: list[str]
    state: str
    turns: int  # turns spent on it so far
    max_turns: int
    seq: int  # its latest turn
    judged: int  # the latest turn dealt with
    reason: str | None  # the judge's latest reason, or why it stopped
    people: tuple[Person, ...] = ()  # whoever added criteria (besides the creator)

    @property
    def creator(self) -> Person:
        return self.origin.platform, self.origin.user_id


@dataclass(frozen=True, slots=True)
class GoalTurn:
    """A goal's turn, queued as an inbox row."""

    inbox_id: int
    session_key: str
    msg: InboundMessage
    goal_turn: tuple[int, int]  # (goal id, turn number)


@dataclass(frozen=True, slots=True)
class Unjudged:
    """A goal whose latest turn finished but was not judged (`GoalStore.unjudged`)."""

    goal: Goal
    turn: GoalTurn
    turn_state: str  # the turn's inbox state: done, failed, cancelled, ...


def _goal(row: Any) -> Goal:
    return Goal(row["id"], row["session_key"], decode_inbound(row["origin"]), row["objective"],
                json.loads(row["criteria"]), row["state"], row["turns"], row["max_turns"], row["seq"],
                row["judged"], row["reason"], tuple((p, u) for p, u in json.loads(row["people"])))


def _turn_message_id(goal_id: int, seq: int) -> str:
    return f"{TURN_ID}{goal_id}:{seq}"


async def _insert_turn(db: Connection, goal: Goal, seq: int, text: str) -> GoalTurn | None:
    """The goal's turn `seq` as an inbox row (None: it exists already)."""
    msg = replace(goal.origin, text=text, message_id=_turn_message_id(goal.id, seq))
    inbox_id = await insert_inbox(db, msg, goal.session_key, goal_turn=(goal.id, seq))
    return GoalTurn(inbox_id, goal.session_key, msg, (goal.id, seq)) if inbox_id is not None else None


async def _claim(db: Connection, goal: Goal, seq: int, state: str, reason: str | None,
                 turns: int, next_seq: int) -> bool:
    """Record the verdict on turn `seq` — only if the goal is still active and that turn not yet
    judged (a pause or a second judge meanwhile wins)."""
    return await db.execute(
        "UPDATE goals SET state = ?, reason = coalesce(?, reason), turns = ?, judged = ?, seq = ?, updated_at = ?"
        " WHERE id = ? AND state = 'active' AND judged < ?",
        state, reason, turns, seq, next_seq, time.time(), goal.id, seq) == 1


class GoalStore(Tables):
    async def create(self, key: str, origin: InboundMessage, objective: str, max_turns: int,
                     first_turn: str) -> tuple[Goal, GoalTurn | None]:
        """A new active goal of the session `key`, and its first turn (text `first_turn`), in one write."""
        now = time.time()

        async def create(db: Connection) -> tuple[Goal, GoalTurn | None]:
            goal_id = await db.fetchval(
                "INSERT INTO goals (session_key, origin, objective, state, max_turns, seq, created_at, updated_at)"
                " VALUES (?, ?, ?, 'active', ?, 1, ?, ?) RETURNING id",
                key, encode_inbound(origin), objective, max_turns, now, now)
            goal = Goal(int(goal_id), key, origin, objective, [], "active", 0, max_turns, 1, 0, None)
            return goal, await _insert_turn(db, goal, 1, first_turn)

        return await self.db.write(create)

    async def open_goal(self, key: str) -> Goal | None:
        """The session's goal that is active, paused or exhausted (at most one is)."""
        row = await self.fetchrow(
            "SELECT * FROM goals WHERE session_key = ? AND state IN ('active', 'paused', 'exhausted')", key)
        return _goal(row) if row else None

    async def latest(self, key: str) -> Goal | None:
        """The session's newest goal, in whatever state."""
        row = await self.fetchrow("SELECT * FROM goals WHERE session_key = ? ORDER BY id DESC LIMIT 1", key)
        return _goal(row) if row else None

    async def get(self, goal_id: int) -> Goal | None:
        row = await self.fetchrow("SELECT * FROM goals WHERE id = ?", goal_id)
        return _goal(row) if row else None

    async def set_criteria(self, goal_id: int, criteria: list[str], people: list[Person]) -> None:
        """The goal's criteria and the people who added them."""
        await self.execute("UPDATE goals SET criteria = ?, people = ?, updated_at = ? WHERE id = ?",
                           json.dumps(criteria), json.dumps(people), time.time(), goal_id)

    async def set_state(self, key: str, current: tuple[str, ...], state: str, reason: str) -> Goal | None:
        """Move the session's goal that is in one of the `current` states to `state`; the goal as it is
        now (None: no goal was in those states)."""
        marks = ", ".join("?" for _ in current)
        row = await self.db.write(lambda db: db.fetchrow(
            f"UPDATE goals SET state = ?, reason = ?, updated_at = ? WHERE session_key = ? AND state IN ({marks})"
            " RETURNING *", state, reason, time.time(), key, *current), single=True)
        return _goal(row) if row else None

    async def resume(self, goal: Goal, *, max_turns: int, seq: int, next_turn: str | None,
                     counted: Person | None = None, max_resumes: int = 0) -> tuple[bool, GoalTurn | None]:
        """Make the goal active again with `max_turns` and its latest turn `seq` (the one before it counts
        as judged), and queue turn `seq` with the text `next_turn` (None: it is queued already), in one
        write. `counted`: the resume gives more turns and counts against that person, refused when they
        did so `max_resumes` times in the last day. Whether it resumed, and the turn queued."""
        async def resume(db: Connection) -> tuple[bool, GoalTurn | None]:
            now = time.time()
            if counted is not None:
                await db.execute("DELETE FROM goal_resumes WHERE at < ?", now - RESUME_WINDOW)
                done = await db.fetchval(
                    "SELECT count(*) FROM goal_resumes WHERE platform = ? AND user_id = ?", *counted)
                if done >= max_resumes:
                    return False, None
                await db.execute("INSERT INTO goal_resumes (goal_id, platform, user_id, at) VALUES (?, ?, ?, ?)",
                                 goal.id, *counted, now)
            await db.execute("UPDATE goals SET state = 'active', max_turns = ?, seq = ?, judged = ?, updated_at = ?"
                             " WHERE id = ?", max_turns, seq, seq - 1, now, goal.id)
            return True, None if next_turn is None else await _insert_turn(db, goal, seq, next_turn)

        return await self.db.write(resume)

    async def settle(self, goal: Goal, seq: int, *, state: str, reason: str | None, turns: int, next_seq: int,
                     notice: OutboxItem | None = None, next_turn: str | None = None) -> tuple[bool, GoalTurn | None]:
        """Record the verdict on turn `seq` (the goal's new state, reason, turns spent and latest turn
        `next_seq`) — only if the goal is still active and that turn not yet judged — and with it, in the
        same write, queue `notice` to the chat and turn `next_seq` with the text `next_turn`. Whether the
        verdict was recorded, and the turn queued (None: none, or it existed already)."""
        async def settle(db: Connection) -> tuple[bool, GoalTurn | None]:
            if not await _claim(db, goal, seq, state, reason, turns, next_seq):
                return False, None
            if notice is not None:
                await insert_outbox(db, notice, time.time())
            return True, None if next_turn is None else await _insert_turn(db, goal, next_seq, next_turn)

        return await self.db.write(settle)

    async def turn_state(self, goal: Goal, seq: int) -> str | None:
        """The inbox state of the goal's turn `seq` (None: there is no such row)."""
        row = await self.fetchrow("SELECT state FROM inbox WHERE goal_id = ? AND goal_seq = ? AND origin = 'goal'",
                                  goal.id, seq)
        return row["state"] if row else None

    async def turn_messages(self, inbox_id: int) -> list[dict[str, Any]]:
        """What a goal turn did, for the judge: its transcript's messages (role, content, name, tool_calls)."""
        rows = await self.fetch("SELECT role, content, tool_calls, name FROM messages WHERE inbox_id = ?"
                                " AND status = 'ok' ORDER BY id", inbox_id)
        return [{"role": r["role"], "content": r["content"], "name": r["name"],
                 "tool_calls": json.loads(r["tool_calls"]) if r["tool_calls"] else None} for r in rows]

    async def unjudged(self) -> list[Unjudged]:
        """Active goals whose latest turn finished (neither received nor processing) but was not judged."""
        rows = await self.fetch(
            "SELECT g.*, i.id AS inbox_id, i.state AS turn_state, i.payload FROM goals g JOIN inbox i"
            " ON i.goal_id = g.id AND i.goal_seq = g.seq AND i.origin = 'goal' WHERE g.state = 'active'"
            " AND g.judged < g.seq AND i.state NOT IN ('received', 'processing')")
        return [Unjudged(_goal(r), GoalTurn(r["inbox_id"], r["session_key"], decode_inbound(r["payload"]),
                                            (r["id"], r["seq"])), r["turn_state"]) for r in rows]
