"""Who may do what on the board, and what a chat is told: `/task` and the agent's `board` tool go through here.

Allowed users and admins may add tasks (at most `MAX_OPEN` open each, and the runs of a task and of the tasks
they made `MAX_CREATED` in all: a turn led astray cannot flood the board); a task's owner is who added it (the
operator's: `chatgate board`), its origin the chat (and thread) it was added in. Only its owner or an admin may
answer or cancel it; a chat shows its own tasks (a direct chat also its person's: `may_see`). The texts a chat gets
from a task's run (started, blocked, done) are made here too (`notice`).
"""

from __future__ import annotations

from typing import Callable

from gateway.access.trust import ALLOWED, Trust
from gateway.board.words import BoardError, checked_task, checked_text, task_number
from gateway.storage.board import BoardStore, Person, Task
from gateway.storage.outbox import OutboxItem
from platforms.base import ChatRef

MAX_LISTED = 30
MAX_OPEN = 50  # a person's tasks not done (chatgate board's are not counted): a turn cannot flood the board
MAX_CREATED = 20  # tasks made by the runs of a task and of the tasks they made, in all: no chain without end
USAGE = ("Tasks the agent works through on its own:\n"
         "/task add <title> (the lines after the first are its description)\n"
         "/task list · /task show <id> · /task answer <id> <answer> · /task cancel <id>")
BY_PEOPLE = ("added", "comment", "answered", "cancelled")  # events a chat sees the author of (a run's: host, pid)
ICONS = {"todo": "⏳", "ready": "🟢", "running": "▶", "blocked": "❓", "done": "✅", "archived": "🗄"}


def who(person: Person | None) -> str:
    """An author as the board's events name it."""
    return ":".join(person) if person else "operator"


def line(task: Task) -> str:
    after = f" (after {', '.join(str(p) for p in task.parents)})" if task.parents and task.status == "todo" else ""
    return f"{ICONS.get(task.status, '•')} {task.id} [{task.status}] {task.title}{after}"


def notice(task: Task, what: str) -> OutboxItem | None:
    """What the task's chat is told when it `started`, is `blocked` or is `done` (None: it has no chat)."""
    if task.origin is None:
        return None
    if what == "started":
        text = f"▶ Task {task.id} started: {task.title}"
    elif what == "blocked":
        text = (f"❓ Task {task.id} ({task.title}) needs you: {task.question or task.reason}\n"
                f"Answer with /task answer {task.id} followed by your answer")
    else:
        text = f"✅ Task {task.id} done: {task.title}\n\n{task.result or ''}".rstrip()
    return OutboxItem(chat=task.origin, text=text)


class Board:
    def __init__(self, store: BoardStore, trust: Trust, *, changed: Callable[[], None]) -> None:
        self.store = store
        self.trust = trust
        self.changed = changed  # the dispatcher looks at once

    async def add(self, title: str, body: str = "", *, owner: Person | None, origin: ChatRef | None,
                  parents: tuple[int, ...] = (), created_by: int | None = None, priority: int = 0) -> Task:
        title, body = checked_task(title, body)
        task = await self.store.add(title, body, owner=owner, origin=origin, parents=parents,
                                    created_by=created_by, priority=priority, author=who(owner),
                                    most_open=MAX_OPEN, most_made=MAX_CREATED)
        self.changed()
        return task

    async def may_use(self, platform: str, user_id: str) -> bool:
        """Allowed users and admins (and the web chat's owner) work the board."""
        return self.trust.known_rank(platform, user_id) >= ALLOWED

    def may_steer(self, task: Task, platform: str, user_id: str) -> bool:
        """Its owner or an admin may answer or cancel a task (the operator's: an admin)."""
        return task.owner == (platform, user_id) or self.trust.known_rank(platform, user_id) > ALLOWED

    def may_see(self, task: Task, platform: str, user_id: str, chat: ChatRef, private: bool) -> bool:
        """A chat sees its own tasks; a direct chat also its person's (an admin's: every task). A shared chat never
        shows another chat's tasks, whoever asks: everyone there reads the answer."""
        origin = task.origin
        here = origin is not None and (origin.platform, origin.chat_id) == (chat.platform, chat.chat_id)
        return here or private and self.may_steer(task, platform, user_id)

    async def visible(self, platform: str, user_id: str, chat: ChatRef, private: bool) -> list[Task]:
        """The tasks `may_see` lets this chat see, not archived."""
        return [t for t in await self.store.list()
                if t.status != "archived" and self.may_see(t, platform, user_id, chat, private)]

    async def answer(self, task_id: int, text: str, platform: str, user_id: str) -> Task:
        text = checked_text(text, "answer")
        task = await self._steered(task_id, platform, user_id)
        answered = await self.store.answer(task.id, who((platform, user_id)), text)
        self.changed()
        return answered

    async def cancel(self, task_id: int, platform: str, user_id: str) -> Task:
        task = await self._steered(task_id, platform, user_id)
        return await self.store.cancel(task.id, who((platform, user_id)))

    async def _steered(self, task_id: int, platform: str, user_id: str) -> Task:
        task = await self.store.get(task_id)
        if task is None:
            raise BoardError(f"there is no task {task_id}")
        if not self.may_steer(task, platform, user_id):
            raise BoardError(f"only the person who added task {task_id}, or an admin, can answer or cancel it")
        return task

    # -- /task ----------------------------------------------------------------------------------

    async def command(self, args: str, platform: str, user_id: str, chat: ChatRef, private: bool = False) -> str:
        """`/task add|list|show|answer|cancel`: the answer in the chat (a refusal is one line); `private`: a
        direct chat (see `may_see`)."""
        if not await self.may_use(platform, user_id):
            return "Only allowed users and admins can use the task board."
        first, _, after = args.strip().partition("\n")
        verb, _, rest = first.partition(" ")
        rest += f"\n{after}" if after else ""
        try:
            return await self._command(verb.lower(), rest.strip(), platform, user_id, chat, private)
        except BoardError as exc:
            return f"⚠️ {exc}"

    async def _command(self, verb: str, rest: str, platform: str, user_id: str, chat: ChatRef,
                       private: bool) -> str:
        if verb == "add":
            title, _, body = rest.partition("\n")
            task = await self.add(title, body, owner=(platform, user_id), origin=chat)
            return f"{line(task)}\nAdded to the board; this chat hears when it starts and when it is done."
        if verb == "list":
            tasks = await self.visible(platform, user_id, chat, private)
            if not tasks:
                return "No tasks here. Add one with /task add <title>."
            more = f"\n… and {len(tasks) - MAX_LISTED} more" if len(tasks) > MAX_LISTED else ""
            return "\n".join(line(t) for t in tasks[:MAX_LISTED]) + more
        number, _, text = rest.partition(" ")
        task_id = task_number(number)
        if verb not in ("show", "answer", "cancel") or task_id is None:
            return USAGE
        if verb == "show":
            return await self._show(task_id, platform, user_id, chat, private)
        if verb == "cancel":
            return f"{line(await self.cancel(task_id, platform, user_id))}\nCancelled."
        if not text.strip():
            return f"Say the answer: /task answer {task_id} <your answer>"
        return f"{line(await self.answer(task_id, text.strip(), platform, user_id))}\nThanks: it goes on with that."

    async def _show(self, task_id: int, platform: str, user_id: str, chat: ChatRef, private: bool) -> str:
        task = await self.store.get(task_id)
        if task is None or not self.may_see(task, platform, user_id, chat, private):
            return f"⚠️ There is no task {task_id} here."
        parts = [line(task), *([task.body] if task.body else [])]
        if task.question or task.reason:
            parts.append(f"Waiting on: {task.question or task.reason}")
        if task.result:
            parts.append(f"Result: {task.result}")
        events = await self.store.events(task_id)
        parts.append("\n".join(f"· {e.kind}" + (f" ({e.author})" if e.author and e.kind in BY_PEOPLE else "")
                               + (f": {e.text[:200]}" if e.text else "") for e in events[-15:]))
        return "\n".join(parts)
