"""`chatgate board …`: the task board from the shell, with or without the daemon running (a running one sees
each change by itself). The operator's tasks are owned by nobody in a chat (owner None) and every change is
written as the operator's.

What it prints of a task came from chats and from the model (titles, results, questions, comments): control
characters are taken out, so nothing a task holds can move the cursor, recolour or fake a line of the terminal.
`--json` prints exactly one JSON value (escaped the same way by json.dumps) and keeps notes and refusals on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any, Awaitable, Callable

from gateway.cli.state import open_store
from gateway.config import Config
from gateway.board.words import BoardError, checked_task, checked_text, one_line
from gateway.storage.board import BoardStore, Task
from platforms.base import ChatRef

AUTHOR = "operator"
Shown = tuple[Any, str]  # (what --json prints, what is printed otherwise)


async def board(config: Config, args: argparse.Namespace) -> int:
    try:
        origin = _checked(args)  # (bad input is refused before the database is opened)
    except BoardError as exc:
        print(f"chatgate board: {exc}", file=sys.stderr)
        return 1
    async with open_store(config) as store:
        try:
            value, text = await ACTIONS[args.action](store.board, args, origin)
        except BoardError as exc:
            print(f"chatgate board: {exc}", file=sys.stderr)
            return 1
        idle = args.action in ("add", "answer") and not await _daemon_running(config, store)
    print(json.dumps(value, indent=2) if args.json else text)
    if idle:
        print("note: the gateway is not running; the task waits until it starts", file=sys.stderr if args.json
              else sys.stdout)
    return 0


def _checked(args: argparse.Namespace) -> ChatRef | None:
    """The chat `add --to` names (None: none); BoardError for a bad target, a blank title, answer or comment, or
    one past the limits a chat's has (a title is one line of every listing, notice and run's prompt)."""
    if args.action not in ("add", "answer", "comment"):
        return None  # (`list` and `show` load no more than they need)
    from gateway.cron.jobs import CronError, parse_target

    if args.action != "add":
        args.text = checked_text(args.text, args.action)
        return None
    args.title, args.body = checked_task(args.title, args.body)
    if args.to is None:
        return None
    try:
        return parse_target(args.to)
    except CronError as exc:
        raise BoardError(f"--to: {exc}") from None


async def _daemon_running(config: Config, store: Any) -> bool:
    """Whether a gateway beats its heartbeat on this database (cron's note asks the same)."""
    from gateway.cron.ledger import RunLedger, new_instance_id

    ledger = RunLedger(store.cron, new_instance_id())
    return bool(await ledger.live_instances(3 * config.gateway.tick_seconds + 5.0))


# -- the verbs ------------------------------------------------------------------------------------


async def _add(board: BoardStore, args: argparse.Namespace, origin: ChatRef | None) -> Shown:
    task = await board.add(args.title.strip(), args.body, owner=None, origin=origin, parents=args.after,
                           priority=args.priority, author=AUTHOR)
    waits = f", after {_ids(task.parents)}" if task.status == "todo" else ""
    return task.as_dict(), f"added task {task.id}: {one_line(task.title, 120)} ({task.status}{waits})"


async def _list(board: BoardStore, args: argparse.Namespace, origin: ChatRef | None) -> Shown:
    tasks = await board.list(args.status)
    if not tasks:
        return [], f"no {args.status} tasks" if args.status else "no tasks"
    lines = [f"{'ID':>5}  {'STATUS':<8} {'PRI':>5}  {'OWNER':<20} TITLE"]
    lines += [f"{t.id:>5}  {t.status:<8} {t.priority:>5}  {one_line(t.as_dict()['owner'], 20):<20} "
              f"{one_line(t.title, 80)}{_waiting_on(t)}" for t in tasks]
    return [t.as_dict() for t in tasks], "\n".join(lines)


def _waiting_on(task: Task) -> str:
    """What a task waits for, in a listing: its parents, or a person."""
    if task.status == "todo" and task.parents:
        return f" (after {_ids(task.parents)})"
    if task.status == "blocked":
        return f" — asks: {one_line(task.question, 80)}" if task.question else f" — {one_line(task.reason or '', 80)}"
    return ""


async def _show(board: BoardStore, args: argparse.Namespace, origin: ChatRef | None) -> Shown:
    task = await board.get(args.id)
    if task is None:
        raise BoardError(f"there is no task {args.id}")
    events = await board.events(task.id)
    parents = [(parent, await board.get(parent)) for parent in task.parents]
    facts = task.as_dict()
    lines = [f"task {task.id}: {one_line(task.title, 200)}",
             f"  status:   {task.status}, priority {task.priority}, {task.attempts} run(s) started",
             f"  owner:    {one_line(facts['owner'], 60)}, reports to "
             f"{one_line(facts['origin'], 80) if task.origin else 'no chat'}",
             f"  added:    {_when(task.created_at)}" + (f" by the run of task {task.created_by}" if task.created_by
                                                        else "")
             + f", changed {_when(task.updated_at)}" + (f", done {_when(task.done_at)}" if task.done_at else "")]
    if parents:
        lines.append("  after:    " + ", ".join(f"{parent} ({found.status if found else 'gone'})"
                                                for parent, found in parents))
    for name in ("question", "reason", "result", "body"):
        if facts[name]:
            lines += [f"  {name}:", *_block(facts[name], "    ")]
    lines.append("  events:")
    for event in events:
        head = f"    {_when(event.at)}  {event.kind:<9} {one_line(event.author or 'the board', 40)}"
        body = _block(event.text, "      ")
        lines += [f"{head}: {body[0].strip()}", *body[1:]] if body else [head]
    return {**facts, "events": [e.as_dict() for e in events]}, "\n".join(lines)


async def _answer(board: BoardStore, args: argparse.Namespace, origin: ChatRef | None) -> Shown:
    task = await board.answer(args.id, AUTHOR, args.text)
    return task.as_dict(), f"answered task {task.id}: it is {task.status} again, its next turn reads the answer"


async def _comment(board: BoardStore, args: argparse.Namespace, origin: ChatRef | None) -> Shown:
    task = await board.comment(args.id, AUTHOR, args.text)
    return task.as_dict(), f"commented on task {task.id} ({task.status})"


async def _cancel(board: BoardStore, args: argparse.Namespace, origin: ChatRef | None) -> Shown:
    task = await board.cancel(args.id, AUTHOR)
    return task.as_dict(), f"cancelled task {task.id}: {one_line(task.title, 120)} ({task.status})"


ACTIONS: dict[str, Callable[[BoardStore, argparse.Namespace, ChatRef | None], Awaitable[Shown]]] = {
    "add": _add, "list": _list, "show": _show, "answer": _answer, "comment": _comment, "cancel": _cancel}


# -- printing -------------------------------------------------------------------------------------


def _ids(ids: tuple[int, ...]) -> str:
    return ", ".join(str(i) for i in ids)


def _when(at: float) -> str:
    return datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")


def _block(text: str, indent: str) -> list[str]:
    """Text of several lines, each indented, without control characters (a tab is a space)."""
    lines = str(text).strip("\n").splitlines()
    return [indent + "".join(c if c.isprintable() else " " for c in line).rstrip() for line in lines]
