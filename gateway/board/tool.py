"""The agent's `board` tool: in a task's run, and in the turns of allowed users.

`create` makes a task owned by the same person and reporting to the same chat (in a task's run: the task's
owner and chat, and `created_by` that task; the runs of a task and of all it made, at any depth, make at most
`tasks.MAX_CREATED`, and a cancelled task's run makes nothing more); `list` shows the tasks of that chat; `comment`
adds to a task (in a run: its own by default); `block` ends the turn at once with a question for a person: the
task waits for the answer (`runs.TaskRuns` reads `TurnShare.ended`). A run acts with the rank the turn acts under
(the least trusted of its speakers in a shared chat: gateway.access.trust), so a model's words cannot reach past
a person's rights.
"""

from __future__ import annotations

from typing import Any

from agent.tools import ApprovalRequest, Tool, ToolContext
from gateway.access.trust import ALLOWED
from gateway.board.runs import task_of
from gateway.board.tasks import Board, line
from gateway.board.words import MAX_BODY, BoardError, one_line, task_number
from gateway.storage.board import Task
from platforms.base import ChatRef

UNATTENDED = "a task runs later, unattended, with the agent's tools, in your name"
DESCRIPTION = (
    "The task board: a backlog worked through on its own, each task as a goal with a judge. "
    "create: a task (title, body; after: ids of tasks that must be done first). list: the tasks here. "
    "comment: add a note to a task (text; task: its id, default the task you are running). "
    "block: only while running a task, when you need a decision or information from a person: your question "
    "(question) goes to them, the turn ends at once, and their answer comes back as a comment.")


def board_tool(board: Board) -> Tool:
    async def handler(ctx: ToolContext, action: str, title: str = "", body: str = "", after: Any = None,
                      text: str = "", question: str = "", task: Any = None) -> str:
        current = task_of(ctx.place.session_key)
        rank = ctx.rank if ctx.rank is not None else board.trust.known_rank(ctx.platform, ctx.user_id)
        if current is None and rank < ALLOWED:
            return "error: only allowed users and admins can use the task board"
        try:
            return await _act(board, ctx, current, action, title=title, body=body, after=after, text=text,
                              question=question, task=task)
        except BoardError as exc:
            return f"error: {exc}"

    return Tool("board", DESCRIPTION, {
        "type": "object", "required": ["action"],
        "properties": {
            "action": {"type": "string", "enum": ["create", "list", "comment", "block"]},
            "title": {"type": "string", "description": "create: the task's title"},
            "body": {"type": "string", "description": "create: what to do, in detail"},
            "after": {"type": "array", "items": {"type": "integer"}, "description": "create: tasks done first"},
            "text": {"type": "string", "description": "comment: the note"},
            "task": {"type": "integer", "description": "comment: the task (default: the one you run)"},
            "question": {"type": "string", "description": "block: what you need a person to decide or tell"},
        }}, handler, toolset="board", side_effects=True)


def _same_chat(task: Task, chat: ChatRef | None) -> bool:
    return task.origin is not None and chat is not None and \
        (task.origin.platform, task.origin.chat_id) == (chat.platform, chat.chat_id)


async def _act(board: Board, ctx: ToolContext, current: int | None, action: str, **given: Any) -> str:
    running = await board.store.get(current) if current is not None else None
    if running is not None:
        owner, chat = running.owner, running.origin
    else:
        owner, chat = (ctx.platform, ctx.user_id), ChatRef(ctx.platform, ctx.chat_id, ctx.place.thread_id)
    if running is not None and running.status != "running" and action in ("create", "comment"):
        return f"error: task {running.id} is {running.status}: its run is over"  # (cancelled: it makes nothing more)
    if action == "block":
        question = one_line(str(given["question"] or ""))
        if running is None:
            return "error: block is for a task's run (there is no task to wait here)"
        if not question:
            return "error: say what you need to know (question)"
        if len(question) > MAX_BODY:
            return f"error: keep the question under {MAX_BODY} characters"
        ctx.turn.ended = question
        return "blocked: the question goes to the person; this turn ends now"
    if action == "create":
        after = given["after"]
        listed = after if isinstance(after, list) else [] if after in (None, "") else [after]
        parents = tuple(n for n in (task_number(p) for p in listed) if n is not None)
        for parent in parents:  # (its answer says what became of the parent: only one this person may see)
            found = await board.store.get(parent)
            if found is None or owner is not None and not (_same_chat(found, chat) or board.may_steer(found, *owner)):
                return f"error: there is no task {parent} here"
        if running is None:  # (a person's turn: the task runs later, unattended, in their name: they say yes)
            refusal = await _consent(ctx, str(given["title"]), str(given["body"] or ""))
            if refusal is not None:
                return refusal
        made = await board.add(str(given["title"]), str(given["body"] or ""), owner=owner, origin=chat,
                               parents=parents, created_by=current)
        return f"created: {line(made)}"
    if action == "list":
        here = chat or ChatRef("", "")
        tasks = [t for t in await board.store.list() if t.status != "archived" and
                 (t.origin == chat if chat is not None else t.owner == owner)]
        return "\n".join(line(t) for t in tasks[:50]) or f"no tasks for {here.platform or 'the operator'} here"
    if action == "comment":
        named = given["task"] not in (None, "")
        target = task_number(given["task"]) if named else current
        if target is None:
            return f"error: there is no task {str(given['task'])[:20]}" if named else "error: say which task (task)"
        text = str(given["text"] or "").strip()
        if len(text) > MAX_BODY:
            return f"error: keep a comment under {MAX_BODY} characters"
        found = await board.store.get(target)
        if found is None or not (target == current or found.created_by == current and current is not None
                                 or owner is not None and board.may_steer(found, *owner)):
            return f"error: there is no task {target} you may comment on"
        await board.store.comment(target, "agent", text or "(empty)")
        return f"comment added to task {target}"
    return "error: action is create, list, comment or block"


async def _consent(ctx: ToolContext, title: str, body: str) -> str | None:
    """A person approves a task the agent adds in their turn, seeing it (as a scheduled job the agent writes):
    it runs later, unattended, with the agent's tools in their name. None: approved; else the refusal."""
    if ctx.approvals is None:
        return "refused: a task needs a person's approval and nobody can approve here"
    subject = f"task: {one_line(title)[:200]}" + (f"\n{body[:1000]}" if body.strip() else "")
    outcome = await ctx.approvals.request(ctx, ApprovalRequest("job", subject, (UNATTENDED,)))
    return None if outcome.approved else outcome.message
