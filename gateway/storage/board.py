"""The task board's tables (gateway.board): tasks, their parents, their events.

Every change of a task's status is a compare-and-set on the status it had (and, for a run's end, on the
instance running it), in one transaction with its event and the notice to its chat: a task is started by one
instance only, done once, and reported done once. A task whose parents are all done becomes `ready` in the
transaction that finishes the last of them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Sequence

from gateway.board.words import BoardError
from gateway.storage.connection import Connection
from gateway.storage.outbox import OutboxItem, insert_outbox
from gateway.storage.tables import Tables, live_instance
from platforms.base import ChatRef

STATUSES = ("todo", "ready", "running", "blocked", "done", "archived")
OPEN = ("todo", "ready", "running", "blocked")
Person = tuple[str, str]  # (platform, user id)
# A task's status once nothing else holds it: `todo` while a task it comes after is neither done nor cancelled (a
# person let it go on without a cancelled one: `BoardStore.cancel`), else `ready`.
_READY_UNLESS_WAITING = ("CASE WHEN EXISTS (SELECT 1 FROM board_parents p JOIN board_tasks t ON t.id = p.parent_id"
                         " WHERE p.task_id = board_tasks.id AND t.status NOT IN ('done', 'archived'))"
                         " THEN 'todo' ELSE 'ready' END")
CLAIM_LOCK = 0x626F617264  # ("board") several instances' claims one at a time: never more than max_running run
ADD_LOCK = 0x626F617265  # several instances' limited adds one at a time: a limit is counted with what it limits


@dataclass(frozen=True, slots=True)
class Task:
    id: int
    title: str
    body: str
    status: str
    owner: Person | None  # None: the operator
    origin: ChatRef | None  # the chat it reports to
    parents: tuple[int, ...]
    created_by: int | None  # the task whose run made it
    priority: int
    attempts: int  # runs started
    result: str | None
    question: str | None
    reason: str | None
    runner: str | None
    beat_at: float | None
    not_before: float | None
    created_at: float
    updated_at: float
    done_at: float | None

    def as_dict(self) -> dict[str, Any]:
        """The task as `chatgate board --json` prints it."""
        origin = self.origin
        return {"id": self.id, "title": self.title, "body": self.body, "status": self.status,
                "owner": ":".join(self.owner) if self.owner else "operator",
                "origin": ":".join(p for p in (origin.platform, origin.chat_id, origin.thread_id) if p)
                if origin else None,
                "parents": list(self.parents), "created_by": self.created_by, "priority": self.priority,
                "attempts": self.attempts, "result": self.result, "question": self.question, "reason": self.reason,
                "runner": self.runner, "created_at": self.created_at, "updated_at": self.updated_at,
                "done_at": self.done_at}


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    task_id: int
    at: float
    kind: str  # added | started | blocked | answered | comment | done | failed | reclaimed | cancelled | ready
    author: str | None
    text: str

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "at": self.at, "kind": self.kind, "author": self.author, "text": self.text}


def _origin(raw: str | None) -> ChatRef | None:
    if not raw:
        return None
    data = json.loads(raw)
    return ChatRef(data["platform"], data["chat_id"], data.get("thread_id"))


def _task(row: Any, parents: Sequence[int]) -> Task:
    owner = json.loads(row["owner"]) if row["owner"] else None
    return Task(int(row["id"]), row["title"], row["body"], row["status"], tuple(owner) if owner else None,
                _origin(row["origin"]), tuple(parents), row["created_by"], row["priority"], row["attempts"],
                row["result"], row["question"], row["reason"], row["runner"], row["beat_at"], row["not_before"],
                row["created_at"], row["updated_at"], row["done_at"])


async def _tasks(db: Connection, rows: list[Any]) -> list[Task]:
    """The rows as tasks, with their parents (one more statement for all of them)."""
    if not rows:
        return []
    ids = [int(r["id"]) for r in rows]
    links = await db.fetch(f"SELECT task_id, parent_id FROM board_parents WHERE task_id {db.dialect.IN_LIST}"
                           " ORDER BY parent_id", db.dialect.listed(ids))
    parents: dict[int, list[int]] = {}
    for link in links:
        parents.setdefault(int(link["task_id"]), []).append(int(link["parent_id"]))
    return [_task(r, parents.get(int(r["id"]), ())) for r in rows]


async def _one(db: Connection, task_id: int) -> Task | None:
    row = await db.fetchrow("SELECT * FROM board_tasks WHERE id = ?", task_id)
    return (await _tasks(db, [row]))[0] if row else None


async def _event(db: Connection, task_id: int, kind: str, author: str | None, text: str = "",
                 now: float | None = None) -> None:
    await db.execute("INSERT INTO board_events (task_id, at, kind, author, text) VALUES (?, ?, ?, ?, ?)",
                     task_id, now or time.time(), kind, author, text)


async def _move(db: Connection, task_id: int, current: Sequence[str], sets: str, *args: Any,
                runner: str | None = None) -> Task | None:
    """Set `sets` (SQL assignments, their values `args`) on the task while its status is one of `current` (and,
    given, while `runner` runs it); the task as it is then (None: it was not so)."""
    marks = ", ".join("?" for _ in current)
    row = await db.fetchrow(
        f"UPDATE board_tasks SET {sets}, updated_at = ? WHERE id = ? AND status IN ({marks})"
        + (" AND runner = ?" if runner is not None else "") + " RETURNING *",
        *args, time.time(), task_id, *current, *((runner,) if runner is not None else ()))
    return (await _tasks(db, [row]))[0] if row else None


async def _promote(db: Connection, parent_id: int, now: float) -> list[Task]:
    """The children of a task just done whose parents are now all done: `todo` → `ready`."""
    rows = await db.fetch(
        "UPDATE board_tasks SET status = 'ready', updated_at = ? WHERE status = 'todo' AND id IN"
        " (SELECT task_id FROM board_parents WHERE parent_id = ?) AND NOT EXISTS (SELECT 1 FROM board_parents p"
        " JOIN board_tasks t ON t.id = p.parent_id WHERE p.task_id = board_tasks.id"
        " AND t.status NOT IN ('done', 'archived'))"
        " RETURNING *", now, parent_id)
    for row in rows:
        await _event(db, int(row["id"]), "ready", None, f"task {parent_id} is done", now)
    return await _tasks(db, rows)


class BoardStore(Tables):
    async def add(self, title: str, body: str = "", *, owner: Person | None = None, origin: ChatRef | None = None,
                  parents: Sequence[int] = (), created_by: int | None = None, priority: int = 0,
                  author: str = "operator", most_open: int | None = None, most_made: int | None = None) -> Task:
        """A new task: `ready`, or `todo` while one of its `parents` is not done (BoardError: a parent that does
        not exist or was archived; `owner` has `most_open` tasks open; the family of `created_by` made
        `most_made` tasks). The limits are counted in the transaction that adds: a model's tool calls of one step
        run at once, and a count read before another call's task is written would let them all through."""
        now = time.time()
        parents = sorted(set(parents))

        async def add(db: Connection) -> Task:
            await _within_limits(db, owner, most_open, created_by, most_made, author)
            status = "ready"
            for parent in parents:
                state = await db.fetchval("SELECT status FROM board_tasks WHERE id = ?", parent)
                if state is None or state == "archived":
                    raise BoardError(f"task {parent} {'does not exist' if state is None else 'was cancelled'}:"
                                     " it cannot come first")
                if state != "done":
                    status = "todo"
            where = json.dumps({"platform": origin.platform, "chat_id": origin.chat_id,
                                "thread_id": origin.thread_id}) if origin else None
            task_id = int(await db.fetchval(
                "INSERT INTO board_tasks (title, body, status, owner, origin, created_by, priority, created_at,"
                " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id", title, body, status,
                json.dumps(list(owner)) if owner else None, where, created_by, priority, now, now))
            for parent in parents:
                await db.execute("INSERT INTO board_parents (task_id, parent_id) VALUES (?, ?)", task_id, parent)
            await _event(db, task_id, "added", author, title, now)
            task = await _one(db, task_id)
            assert task is not None
            return task

        return await self.db.write(add)

    async def get(self, task_id: int) -> Task | None:
        return await self.db.read(lambda db: _one(db, task_id))

    async def list(self, status: str | None = None) -> list[Task]:
        """Tasks (of one status), the order the dispatcher takes them in: highest priority, then oldest."""
        async def listed(db: Connection) -> list[Task]:
            where = "WHERE status = ?" if status else ""
            rows = await db.fetch(f"SELECT * FROM board_tasks {where} ORDER BY priority DESC, id",
                                  *((status,) if status else ()))
            return await _tasks(db, rows)

        return await self.db.read(listed)

    async def events(self, task_id: int) -> list[Event]:
        rows = await self.fetch("SELECT * FROM board_events WHERE task_id = ? ORDER BY id", task_id)
        return [Event(int(r["id"]), int(r["task_id"]), r["at"], r["kind"], r["author"], r["text"]) for r in rows]

    async def comments_since(self, task_id: int, after: int) -> list[Event]:
        """The task's comments (answers too) after event `after`: what its next turn reads."""
        rows = await self.fetch("SELECT * FROM board_events WHERE task_id = ? AND id > ? AND kind = 'comment'"
                                " ORDER BY id", task_id, after)
        return [Event(int(r["id"]), int(r["task_id"]), r["at"], r["kind"], r["author"], r["text"]) for r in rows]

    async def last_turn(self, task_id: int) -> int:
        """The event that started the task's latest turn (0: none yet): the comments after it are new."""
        return int(await self.fetchval("SELECT coalesce(max(id), 0) FROM board_events WHERE task_id = ?"
                                       " AND kind = 'turn'", task_id))

    async def note_turn(self, task_id: int, runner: str, turn: int) -> None:
        await self.db.write(lambda db: _event(db, task_id, "turn", runner, f"turn {turn}"), single=True)

    async def comment(self, task_id: int, author: str, text: str) -> Task:
        async def comment(db: Connection) -> Task:
            task = await _move(db, task_id, STATUSES, "title = title")
            if task is None:
                raise BoardError(f"there is no task {task_id}")
            await _event(db, task_id, "comment", author, text)
            return task

        return await self.db.write(comment)

    async def answer(self, task_id: int, author: str, text: str) -> Task:
        """The answer to a blocked task's question (a comment its next turn reads); the task is ready again (`todo`
        while a task it comes after is still to be done: a cancelled one no longer counts)."""
        async def answer(db: Connection) -> Task:
            task = await _move(db, task_id, ("blocked",), f"status = {_READY_UNLESS_WAITING}, question = NULL,"
                               " reason = NULL, not_before = NULL")
            if task is None:
                raise BoardError(await _not(db, task_id, "is not blocked: there is nothing to answer"))
            await _event(db, task_id, "comment", author, text)
            await _event(db, task_id, "answered", author)
            return task

        return await self.db.write(answer)

    async def cancel(self, task_id: int, author: str) -> Task:
        """Archive a task that is not done (a run of it stops at its next heartbeat). The tasks that wait for it
        cannot run as they are: they are blocked, saying so (an answer lets one run without it)."""
        async def cancel(db: Connection) -> Task:
            task = await _move(db, task_id, OPEN, "status = 'archived', runner = NULL")
            if task is None:
                raise BoardError(await _not(db, task_id, "cannot be cancelled"))
            await _event(db, task_id, "cancelled", author)
            why = f"task {task_id}, which it comes after, was cancelled: answer to run it without that task"
            waiting = await db.fetch(
                "UPDATE board_tasks SET status = 'blocked', reason = ?, updated_at = ? WHERE status = 'todo' AND id IN"
                " (SELECT task_id FROM board_parents WHERE parent_id = ?) RETURNING id", why, time.time(), task_id)
            for row in waiting:
                await _event(db, int(row["id"]), "blocked", author, why)
            return task

        return await self.db.write(cancel)

    # -- runs -----------------------------------------------------------------------------------

    async def claim(self, runner: str, max_running: int, now: float | None = None) -> list[Task]:
        """Start the ready tasks this instance may: highest priority then oldest, while fewer than `max_running`
        run (on every instance); each `running` with `runner`, its attempts counted."""
        now = now or time.time()

        async def claim(db: Connection) -> list[Task]:
            if db.dialect.ADVISORY_LOCK:
                await db.execute(db.dialect.ADVISORY_LOCK, CLAIM_LOCK)
            running = int(await db.fetchval("SELECT count(*) FROM board_tasks WHERE status = 'running'"))
            free = max_running - running
            if free <= 0:
                return []
            rows = await db.fetch(
                "SELECT id FROM board_tasks WHERE status = 'ready' AND (not_before IS NULL OR not_before <= ?)"
                " ORDER BY priority DESC, id LIMIT ?", now, free)
            started = []
            for row in rows:
                task = await _move(db, int(row["id"]), ("ready",), "status = 'running', runner = ?, beat_at = ?,"
                                   " attempts = attempts + 1, not_before = NULL", runner, now)
                if task is not None:
                    await _event(db, task.id, "started", runner, f"run {task.attempts}", now)
                    started.append(task)
            return started

        return await self.db.write(claim)

    async def beat(self, task_id: int, runner: str, attempt: int) -> bool:
        """The heartbeat of run `attempt` of the task; False: the task is not this run's any more (cancelled,
        reclaimed — and perhaps claimed again by the same instance: a run is its instance and its attempt)."""
        return await self.execute("UPDATE board_tasks SET beat_at = ? WHERE id = ? AND status = 'running'"
                                  " AND runner = ? AND attempts = ?", time.time(), task_id, runner, attempt) == 1

    async def finish(self, task_id: int, runner: str, result: str, notice: OutboxItem | None) -> Task | None:
        """The run's task done with `result` and `notice` queued, once (None: it was not this run's to finish);
        its children waiting only for it become ready."""
        async def finish(db: Connection) -> Task | None:
            now = time.time()
            task = await _move(db, task_id, ("running",), "status = 'done', result = ?, runner = NULL, done_at = ?",
                               result, now, runner=runner)
            if task is None:
                return None
            await _event(db, task_id, "done", runner, result[:500], now)
            if notice is not None:
                await insert_outbox(db, notice, now)
            await _promote(db, task_id, now)
            return task

        return await self.db.write(finish)

    async def block(self, task_id: int, runner: str | None, question: str | None, reason: str | None,
                    notice: OutboxItem | None, author: str | None = None) -> Task | None:
        """The task blocked on a person (its `question`, or the `reason`), `notice` queued, once (None: it was not
        running, or not `runner`'s)."""
        async def block(db: Connection) -> Task | None:
            task = await _move(db, task_id, ("running", "ready"), "status = 'blocked', question = ?, reason = ?,"
                               " runner = NULL", question, reason, runner=runner)
            if task is None:
                return None
            await _event(db, task_id, "blocked", author or runner, question or reason or "")
            if notice is not None:
                await insert_outbox(db, notice, time.time())
            return task

        return await self.db.write(block)

    async def release(self, task_id: int, runner: str | None, *, kind: str, text: str,
                      not_before: float | None = None) -> Task | None:
        """A run that ended without an answer (it failed, it was lost): the task ready again, after
        `not_before` (None: at once), if `runner` still runs it (None: whoever does)."""
        async def release(db: Connection) -> Task | None:
            task = await _move(db, task_id, ("running",), "status = 'ready', runner = NULL, not_before = ?",
                               not_before, runner=runner)
            if task is not None:
                await _event(db, task_id, kind, runner, text)
            return task

        return await self.db.write(release)

    async def lost_runs(self, me: str, stale_before: float) -> list[Task]:
        """Running tasks whose run is gone: not this instance's, and their instance's life lease has ended (on a
        database of one daemon's, none is kept: every other instance is gone) or their heartbeat is older than
        `stale_before`."""
        now = self.db.dialect.NOW_SECONDS
        async def lost(db: Connection) -> list[Task]:
            rows = await db.fetch(
                "SELECT * FROM board_tasks WHERE status = 'running' AND (runner IS NULL OR runner <> ?) AND"
                f" (beat_at IS NULL OR beat_at < ? OR NOT {live_instance('runner', now)})", me, stale_before)
            return await _tasks(db, rows)

        return await self.db.read(lost)

    async def counts(self) -> dict[str, int]:
        rows = await self.fetch("SELECT status, count(*) AS n FROM board_tasks GROUP BY status")
        found = {r["status"]: int(r["n"]) for r in rows}
        return {status: found.get(status, 0) for status in STATUSES}

    async def version(self) -> tuple[float, int]:
        """Changes with every change to the board (by any process): the dispatcher's look then comes at once."""
        row = await self.fetchrow("SELECT coalesce(max(updated_at), 0) AS at, count(*) AS n FROM board_tasks")
        assert row is not None
        return float(row["at"]), int(row["n"])


async def _within_limits(db: Connection, owner: Person | None, most_open: int | None, created_by: int | None,
                         most_made: int | None, author: str) -> None:
    """BoardError when `owner` has `most_open` tasks open, or runs in the family of `created_by` made `most_made`
    tasks: those made by the run of the task at the family's root (the first not made by a run), by theirs, and so
    on at any depth (counting only what one task made let a chain of runs, each making the next, go on without
    end)."""
    limited = [(most_open, owner), (most_made, created_by)]
    if all(limit is None or whose is None for limit, whose in limited):
        return
    if db.dialect.ADVISORY_LOCK:
        await db.execute(db.dialect.ADVISORY_LOCK, ADD_LOCK)
    if most_open is not None and owner is not None:
        marks = ", ".join("?" for _ in OPEN)
        count = await db.fetchval(f"SELECT count(*) FROM board_tasks WHERE owner = ? AND status IN ({marks})",
                                  json.dumps(list(owner)), *OPEN)
        if int(count) >= most_open:
            raise BoardError(f"{author} has {most_open} open tasks already: let some finish, or cancel some, before"
                             " adding more")
    if most_made is not None and created_by is not None:
        family = await db.fetchval(
            "WITH RECURSIVE up(id, made_by) AS (SELECT id, created_by FROM board_tasks WHERE id = ?"
            " UNION SELECT t.id, t.created_by FROM board_tasks t JOIN up ON t.id = up.made_by),"
            " down(id) AS (SELECT id FROM up WHERE made_by IS NULL"
            " UNION SELECT t.id FROM board_tasks t JOIN down ON t.created_by = down.id)"
            " SELECT count(*) FROM down", created_by)
        if int(family) - 1 >= most_made:  # (the root is not made by a run)
            raise BoardError(f"a task and the tasks made in its runs may create at most {most_made} tasks in all")


async def _not(db: Connection, task_id: int, why: str) -> str:
    """Why a change was refused: the task does not exist, else `why` with its status."""
    status = await db.fetchval("SELECT status FROM board_tasks WHERE id = ?", task_id)
    return f"there is no task {task_id}" if status is None else f"task {task_id} is {status}: it {why}"
