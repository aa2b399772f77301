"""`chatgate board …`: the task board (tasks the agent works through) from the shell."""

from __future__ import annotations

import argparse
from typing import Any

from gateway.board.words import task_number
from gateway.cli.dispatch import handled_by

# gateway.storage.board's STATUSES, written out: the parser imports no storage (tests/test_board_cli.py
# checks that the two agree)
STATUSES = ("todo", "ready", "running", "blocked", "done", "archived")
PRIORITY_LIMIT = 1000


def task_id(text: str) -> int:
    """A task's number, as `3` or `#3` (gateway.board.words reads it for every way in)."""
    number = task_number(text)
    if number is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a task number")
    return number


def priority(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = PRIORITY_LIMIT + 1
    if abs(value) > PRIORITY_LIMIT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a priority: a whole number from -{PRIORITY_LIMIT} to "
                                         f"{PRIORITY_LIMIT}")
    return value


def add_parsers(sub: Any) -> None:
    board = sub.add_parser("board", help="the task board: tasks the agent works through (with or without the "
                                         "daemon running)")
    handled_by(board, "gateway.cli.board:board")
    board_sub = board.add_subparsers(dest="action", required=True)
    add = board_sub.add_parser("add", help="add a task for the agent")
    add.add_argument("title", help="what the task is, in a line")
    add.add_argument("--body", default="", help="the task in full, when the title is not enough")
    add.add_argument("--after", type=task_id, action="append", default=[], metavar="ID",
                     help="start it only once task ID is done (may repeat)")
    add.add_argument("--to", metavar="TARGET", help="the chat it reports to: platform:chat[:thread] "
                                                    "(e.g. telegram:12345), or none (the default)")
    add.add_argument("--priority", type=priority, default=0, metavar="N",
                     help=f"higher runs first, from -{PRIORITY_LIMIT} to {PRIORITY_LIMIT} (default 0)")
    listing = board_sub.add_parser("list", help="the tasks, in the order they run: highest priority, then oldest")
    listing.add_argument("--status", choices=STATUSES, help="only the tasks in this state")
    board_sub.add_parser("show", help="a task: its parents, result or question, comments and events"
                         ).add_argument("id", type=task_id)
    for action, what in (("answer", "answer a blocked task's question: it is ready again"),
                         ("comment", "a note its next turn reads")):
        verb = board_sub.add_parser(action, help=what)
        verb.add_argument("id", type=task_id)
        verb.add_argument("text")
    board_sub.add_parser("cancel", help="archive a task that is not done (a run of it stops)"
                         ).add_argument("id", type=task_id)
    for verb in board_sub.choices.values():
        verb.add_argument("--json", action="store_true", help="print it as JSON")
