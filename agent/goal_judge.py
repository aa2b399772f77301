"""The judge of a goal: after each turn spent on a goal, one request without tools decides whether
the goal (and every acceptance criterion) is met, or the work goes on.

The judge answers JSON `{"done": true|false, "reason": "..."}`. Anything else counts as "not
done" — a judge that cannot be read never ends a goal early — and the reason says so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

from agent import usage as usage_scope
from agent.llm import LLMClient

JUDGE_IDENTITY = (
    "You judge whether an AI assistant has reached a goal a user set it. You are shown the goal, its "
    "acceptance criteria and the assistant's latest work. Decide from that evidence only: the goal is done "
    "when the objective and every criterion are met, not when the assistant merely says it will do them. "
    'Answer with one JSON object and nothing else: {"done": true or false, "reason": "one short sentence: '
    'what is met, or what is still missing"}.')
EVIDENCE_CHARS = 12_000
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Verdict:
    done: bool
    reason: str
    readable: bool = True  # False: the judge's answer was not the JSON asked for


def evidence(messages: Sequence[dict[str, Any]], limit: int = EVIDENCE_CHARS) -> str:
    """A turn's messages as plain lines for the judge, the latest kept when they are too long."""
    lines = []
    for m in messages:
        text = str(m.get("content") or "")
        if m.get("role") == "tool":
            lines.append(f"[result of {m.get('name') or 'a tool'}] {text[:1500]}")
            continue
        calls = ", ".join(f"{c['function']['name']}({c['function']['arguments'][:200]})"
                          for c in m.get("tool_calls") or ())
        lines.append(f"{m.get('role')}: {text}" + (f" [called {calls}]" if calls else ""))
    joined = "\n".join(lines)
    return joined if len(joined) <= limit else "…" + joined[-limit:]


def read_verdict(answer: str) -> Verdict:
    """The judge's answer → a verdict; unreadable answers mean "continue", and say so."""
    found = _OBJECT.search(answer or "")
    try:
        data = json.loads(found.group(0)) if found else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("done"), bool):
        shown = " ".join((answer or "").split())[:120] or "an empty answer"
        return Verdict(False, f"the judge's answer could not be read ({shown!r}), so the work goes on", False)
    reason = " ".join(str(data.get("reason") or "").split())[:500] or "no reason given"
    return Verdict(data["done"], reason)


class Judge:
    def __init__(self, llm: LLMClient) -> None:
        self.llm = llm

    async def decide(self, objective: str, criteria: Sequence[str], work: Sequence[dict[str, Any]]) -> Verdict:
        """One request without tools (counted as the `judge` loop); LLM errors (a stalled model: at the turn
        deadline) propagate."""
        listed = "\n".join(f"- {c}" for c in criteria) or "(none besides the objective)"
        request = [{"role": "system", "content": JUDGE_IDENTITY},
                   {"role": "user", "content": f"Goal: {objective}\n\nAcceptance criteria:\n{listed}\n\n"
                                               f"The assistant's latest turn:\n{evidence(work)}"}]
        with usage_scope.counted_as("judge"):  # (bounded like a turn's wait: `llm.turn_timeout_seconds`)
            completion = await self.llm.within(lambda progress, deadline: self.llm.complete(
                request, on_progress=progress, deadline=deadline))
        return read_verdict(completion.content)
