"""A scripted model for the task board's tests: a task's turns answer (or call the `board` tool) as a test
says, by the task's title; the judge's requests get a verdict, done unless told otherwise; the rest echo."""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from agent.goal_judge import JUDGE_IDENTITY
from tests.fakes.llm import Reply

TURN = re.compile(r"^\[Task (\d+), turn (\d+) of at most \d+\] (?:Keep working on: )?(.*)", re.S)


def verdict(done: bool, reason: str) -> Reply:
    return Reply.text(json.dumps({"done": done, "reason": reason}))


def board_call(**arguments: Any) -> Reply:
    return Reply.tool_calls([("board", arguments)])


class BoardModel:
    """`plans[title]`: what a task's turn answers — a function of (turn number, the turn's text, the request body)
    to a Reply or None (then "did <title>"); `judged[title]`: its verdicts in order (default: done)."""

    def __init__(self) -> None:
        self.plans: dict[str, Callable[[int, str, dict[str, Any]], Reply | None]] = {}
        self.judged: dict[str, list[Reply]] = {}
        self.turns: list[tuple[int, int, str]] = []  # (task id, turn, its text), as asked

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        messages = body["messages"]
        if messages[0]["content"] == JUDGE_IDENTITY:
            title = next((t for t in self.judged if t in messages[-1]["content"]), None)
            return self.judged[title].pop(0) if title and self.judged[title] else verdict(True, "done")
        if messages[-1]["role"] == "tool":  # after the board tool: say so, the turn ends
            return Reply.text("noted: " + str(messages[-1]["content"])[:80])
        asked = TURN.match(str(messages[-1].get("content", "")))
        if asked is None:
            return None
        task_id, turn, rest = int(asked.group(1)), int(asked.group(2)), asked.group(3)
        self.turns.append((task_id, turn, str(messages[-1]["content"])))
        title = next((t for t in self.plans if rest.startswith(t)), None)
        reply = self.plans[title](turn, str(messages[-1]["content"]), body) if title else None
        return reply or Reply.text(f"did {rest.splitlines()[0]}")


def scripted(llm: Any) -> BoardModel:
    """A BoardModel answering `llm`'s (a FakeLLM's) requests."""
    model = BoardModel()
    llm.responder = model
    return model


def hangs_first(turns: list[int], answer: str) -> Callable[[int, str, dict[str, Any]], Reply]:
    """A plan whose first turn never ends (a test kills the process running it) and whose next ones say `answer`;
    `turns` records each turn asked."""
    def plan(turn: int, text: str, body: dict[str, Any]) -> Reply:
        turns.append(turn)
        return Reply.hang() if len(turns) == 1 else Reply.text(answer)
    return plan
