"""The task board as the web chat's page shows it (`platforms.base.BoardView`): every task by status, and a
task's events, as plain values, read-only.

It is handed only to local surfaces (`gateway.assembly.board.show_board`), whose people are admins: they see
every task, as an admin's `/task list` does. What a page gets is bounded, however long the board grows: each
column's first `SHOWN` tasks (the open ones in the order they run, done and archived ones latest first) with
their counts, texts cut at `TEXT_LIMIT`, and a task's latest `EVENTS` events. Titles and texts come from chats
and from the model: the page shows them as text.
"""

from __future__ import annotations

from typing import Any

from gateway.storage.board import STATUSES, BoardStore, Event, Task

SHOWN = 50  # tasks a column shows
EVENTS = 100  # a task's latest events shown
TEXT_LIMIT = 2000  # characters of a description, result, question or event shown


def _cut(text: str | None) -> str | None:
    return text if text is None or len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + "…"


def _shown_task(task: Task) -> dict[str, Any]:
    shown = task.as_dict()
    for key in ("body", "result", "question", "reason"):
        shown[key] = _cut(shown[key])
    return shown


def _shown_event(event: Event) -> dict[str, Any]:
    return {**event.as_dict(), "text": _cut(event.text)}


class BoardView:
    def __init__(self, store: BoardStore) -> None:
        self.store = store

    async def tasks(self) -> dict[str, Any]:
        """`columns`: each status's first tasks; `counts`: how many each has in all."""
        columns: dict[str, list[Task]] = {status: [] for status in STATUSES}
        for task in await self.store.list():  # (highest priority, then oldest: the order they run in)
            columns.setdefault(task.status, []).append(task)
        columns["done"].sort(key=lambda t: t.done_at or t.updated_at, reverse=True)
        columns["archived"].sort(key=lambda t: t.updated_at, reverse=True)
        return {"columns": {status: [_shown_task(t) for t in tasks[:SHOWN]] for status, tasks in columns.items()},
                "counts": {status: len(tasks) for status, tasks in columns.items()}}

    async def events(self, task_id: int) -> dict[str, Any] | None:
        """The task's latest events, oldest first (None: there is no task `task_id`)."""
        if await self.store.get(task_id) is None:
            return None
        events = await self.store.events(task_id)
        return {"task": task_id, "events": [_shown_event(e) for e in events[-EVENTS:]],
                "earlier": max(0, len(events) - EVENTS)}
