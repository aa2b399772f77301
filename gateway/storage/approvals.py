"""Approval requests, their events, session grants and the always-allow rules.

A request is a row of `approvals` that moves once, by compare-and-set, from `pending` to its outcome,
with who decided and when; every step (asked, decided, a press refused) is also a row of
`approval_events`. A request decided `session` is a session grant: it answers for the same subject in
that session, for the person who asked — an unconfined command's only while it reaches where it did
(`reach`, a digest of where its words led when it was shown). An "always allow" rule is written in
the same transaction as the decision that made it, from the request's own row. Pruning forgets
decided requests with their events, 500 at a time, but keeps a session grant while its session is
active.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, fields
from typing import Any, Awaitable, Sequence

from gateway.storage.connection import Connection
from gateway.storage.tables import Tables, live_instance


@dataclass(frozen=True, slots=True)
class Approval:
    """An approval request (`state` pending until decided). Its row also keeps when it was decided (`decided_at`,
    what pruning goes by); nothing else reads it."""

    id: str
    session_key: str
    session_id: int | None
    platform: str
    chat_id: str
    thread_id: str | None
    requester_id: str
    kind: str  # command | file | job | job_change
    subject: str  # as shown: secrets masked
    subject_hash: str  # of the real subject: the key of session grants and rules
    confinement: str  # sandbox | unconfined | "" (not a command)
    reasons: list[str]
    created_at: float
    expires_at: float
    state: str = "pending"  # pending | once | session | always | denied | expired | cancelled
    decided_by: str | None = None
    note: str | None = None
    prompt_message_id: str | None = None
    reach: str = ""  # an unconfined command's: where its words led when it was asked (what a grant is bound to)


_COLUMNS = tuple(f.name for f in fields(Approval))


def _approval(row: Any) -> Approval:
    values = {name: row[name] for name in _COLUMNS}
    values["reasons"] = json.loads(values["reasons"])
    return Approval(**values)


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


def _event(db: Connection, approval_id: str, event: str, actor: str | None,
           detail: str | None) -> Awaitable[Any]:
    return db.execute("INSERT INTO approval_events (approval_id, event, actor, detail, at) VALUES (?,?,?,?,?)",
                      approval_id, event, actor, detail, time.time())


class ApprovalStore(Tables):
    async def allowed_by_rule(self, kind: str, subject_hash: str, confinements: Sequence[str], reach: str | None,
                              platform: str, chat_id: str, user_id: str) -> bool:
        """Whether an always-allow rule for one of `confinements` (and, unless `reach` is None, made where
        the subject reached `reach`) covers this person in this chat (a rule for everyone, for the chat
        or for the person)."""
        row = await self.fetchrow(
            "SELECT 1 FROM approval_rules WHERE kind = ? AND subject_hash = ?"
            f" AND confinement IN ({_marks(confinements)}) AND reach = coalesce(?, reach) AND (scope = 'global' OR"
            " (scope = 'chat' AND platform = ? AND chat_id = ?) OR (scope = 'user' AND platform = ? AND user_id = ?))",
            kind, subject_hash, *confinements, reach, platform, chat_id, platform, user_id)
        return row is not None

    async def granted_for_session(self, session_id: int, subject_hash: str, confinements: Sequence[str],
                                  reach: str | None, platform: str, requester_id: str) -> bool:
        """Whether this person was granted the subject for the session (for one of `confinements`; unless
        `reach` is None, where the subject reached `reach`)."""
        row = await self.fetchrow(
            "SELECT 1 FROM approvals WHERE session_id = ? AND subject_hash = ? AND state = 'session'"
            f" AND confinement IN ({_marks(confinements)}) AND reach = coalesce(?, reach) AND platform = ?"
            " AND requester_id = ?", session_id, subject_hash, *confinements, reach, platform, requester_id)
        return row is not None

    async def add(self, approval: Approval, instance_id: str | None = None) -> None:
        """Store a new pending request and its `requested` event (by the requester, with the subject);
        `instance_id`: the instance whose turn waits for it."""
        a = approval

        async def add(db: Connection) -> None:
            await db.execute(
                "INSERT INTO approvals (id, session_key, session_id, platform, chat_id, thread_id, requester_id, kind,"
                " subject, subject_hash, confinement, reach, reasons, created_at, expires_at, instance_id)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                a.id, a.session_key, a.session_id, a.platform, a.chat_id, a.thread_id, a.requester_id, a.kind,
                a.subject, a.subject_hash, a.confinement, a.reach, json.dumps(a.reasons), a.created_at, a.expires_at,
                instance_id)
            await _event(db, a.id, "requested", a.requester_id, a.subject)

        await self.db.write(add)

    async def get(self, approval_id: str) -> Approval | None:
        row = await self.fetchrow("SELECT * FROM approvals WHERE id = ?", approval_id)
        return _approval(row) if row is not None else None

    async def decide(self, approval_id: str, state: str, actor: str, note: str | None = None, *,
                     rule_scope: str | None = None) -> bool:
        """Move a pending request to `state`, with its event; False when it was no longer pending.
        `rule_scope` (user | chat | global): also add an always-allow rule of that scope for the
        request's kind, subject and confinement, made by `actor`."""
        now = time.time()

        async def decide(db: Connection) -> bool:
            if not await db.execute("UPDATE approvals SET state = ?, decided_by = ?, decided_at = ?, note = ?"
                                    " WHERE id = ? AND state = 'pending'", state, actor, now, note, approval_id):
                return False
            await _event(db, approval_id, state, actor, note)
            if rule_scope is not None:
                await db.execute(
                    "INSERT INTO approval_rules (kind, subject, subject_hash, confinement, reach, scope,"
                    " platform, chat_id, user_id, created_by, created_at) SELECT kind, subject, subject_hash,"
                    " confinement, reach, ?, CASE WHEN ? = 'global'"
                    " THEN '' ELSE platform END, CASE WHEN ? = 'chat' THEN chat_id ELSE '' END, CASE WHEN ? = 'user'"
                    " THEN requester_id ELSE '' END, ?, ? FROM approvals WHERE id = ? ON CONFLICT DO NOTHING",
                    rule_scope, rule_scope, rule_scope, rule_scope, actor, now, approval_id)
            return True

        return await self.db.write(decide)

    async def add_event(self, approval_id: str, event: str, actor: str, detail: str) -> None:
        """Record a step that does not change the request (a press refused)."""
        await self.db.write(lambda db: _event(db, approval_id, event, actor, detail), single=True)

    async def set_prompt(self, approval_id: str, message_id: str) -> None:
        """Remember the message that asks (its outcome is edited into it)."""
        await self.execute("UPDATE approvals SET prompt_message_id = ? WHERE id = ?", message_id, approval_id)

    async def pending(self, expired_before: float | None = None) -> list[str]:
        """The ids of pending requests; with `expired_before`, only those that expired before then."""
        if expired_before is None:
            rows = await self.fetch("SELECT id FROM approvals WHERE state = 'pending'")
        else:
            rows = await self.fetch("SELECT id FROM approvals WHERE state = 'pending' AND expires_at < ?",
                                    expired_before)
        return [row["id"] for row in rows]

    async def pending_of(self, instance_id: str | None) -> list[str]:
        """The ids of pending requests that no live instance waits for: `instance_id`'s own, those of instances
        whose life lease has ended (gateway.leases.LifeLease), and those whose instance was not recorded."""
        now = self.db.dialect.NOW_SECONDS
        rows = await self.fetch(
            "SELECT id FROM approvals WHERE state = 'pending' AND (instance_id IS NULL OR instance_id = ?"
            f" OR NOT {live_instance('instance_id', now)})", instance_id)
        return [row["id"] for row in rows]

    async def pending_in(self, session_key: str) -> list[str]:
        """The ids of the pending requests of a conversation, oldest first (wherever its turn runs)."""
        rows = await self.fetch("SELECT id FROM approvals WHERE state = 'pending' AND session_key = ?"
                                " ORDER BY created_at, id", session_key)
        return [row["id"] for row in rows]

    async def prune(self, before: float) -> int:
        """Forget requests decided before `before` with their events; return how many (see the module doc)."""
        async def batch(db: Connection) -> int:
            ids = db.dialect.listed([r["id"] for r in await db.fetch(
                "SELECT id FROM approvals WHERE state != 'pending' AND coalesce(decided_at, created_at) < ?"
                " AND (state != 'session' OR session_id IS NULL"
                " OR session_id NOT IN (SELECT id FROM sessions WHERE ended_at IS NULL)) LIMIT 500", before)])
            await db.execute(f"DELETE FROM approval_events WHERE approval_id {db.dialect.IN_LIST}", ids)
            return await db.execute(f"DELETE FROM approvals WHERE id {db.dialect.IN_LIST}", ids)

        return await self.in_batches(batch)

    # -- always-allow rules, for the operator ----------------------------------------------

    async def rules(self) -> list[dict[str, Any]]:
        """Every always-allow rule, oldest first (`chatgate approvals rules list`)."""
        return [dict(r) for r in await self.fetch("SELECT * FROM approval_rules ORDER BY id")]

    async def remove_rule(self, rule_id: int) -> bool:
        """Delete a rule; False when there is no such rule."""
        return await self.execute("DELETE FROM approval_rules WHERE id = ?", rule_id) > 0
