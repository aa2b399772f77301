"""Token usage in the store: one row per LLM request (`agent.usage` says whom it served), and the
sums `/usage`, `chatgate usage` and `/metrics` show."""

from __future__ import annotations

import time
from typing import Any

from agent.usage import UsageScope
from gateway.store import Store


class UsageLedger:
    def __init__(self, store: Store) -> None:
        self.store = store

    def record(self, scope: UsageScope, model: str, usage: dict[str, int] | None) -> None:
        """One request's tokens, written with the next group commit (a record that may lose its last
        second at a power loss: it needs no commit of its own)."""
        row = (time.time(), scope.loop, scope.session_id, scope.platform, scope.user_id, model,
               int((usage or {}).get("prompt_tokens") or 0), int((usage or {}).get("completion_tokens") or 0))
        self.store.later(lambda db: db.execute(
            "INSERT INTO llm_usage (at, loop, session_id, platform, user_id, model, prompt_tokens,"
            " completion_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row).rowcount)

    async def by_loop(self, where: str = "1", args: tuple[Any, ...] = ()) -> dict[str, dict[str, int]]:
        """{loop: {requests, prompt, completion}} over the rows `where` selects."""
        rows = await self.store.fetch_all(
            "SELECT loop, count(*) AS requests, coalesce(sum(prompt_tokens), 0) AS prompt,"
            f" coalesce(sum(completion_tokens), 0) AS completion FROM llm_usage WHERE {where}"
            " GROUP BY loop ORDER BY loop", args)
        return {r["loop"]: {"requests": r["requests"], "prompt": r["prompt"], "completion": r["completion"]}
                for r in rows}

    async def chat_report(self, session_id: int | None, platform: str, user_id: str) -> str:
        """What `/usage` answers: this session, and this person today and in all."""
        session = await self.by_loop("session_id = ?", (session_id,)) if session_id is not None else {}
        day = await self.by_loop("platform = ? AND user_id = ? AND at >= ?", (platform, user_id, time.time() - 86400))
        ever = await self.by_loop("platform = ? AND user_id = ?", (platform, user_id))
        lines = [f"This session: {describe(session)}", f"You, last 24 hours: {describe(day)}",
                 f"You, in all: {describe(ever)}"]
        if len(ever) > 1:
            lines.append("By loop (you, in all): " + "; ".join(f"{loop} {describe({loop: t})}"
                                                               for loop, t in ever.items()))
        return "\n".join(lines)


def describe(totals: dict[str, dict[str, int]]) -> str:
    requests = sum(t["requests"] for t in totals.values())
    if not requests:
        return "nothing yet"
    prompt = sum(t["prompt"] for t in totals.values())
    completion = sum(t["completion"] for t in totals.values())
    return f"{prompt + completion:,} tokens ({prompt:,} in, {completion:,} out) in {requests:,} request(s)"
