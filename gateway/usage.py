"""Token usage: one record per LLM request (`agent.usage` says whom it served), and the sums `/usage`,
`chatgate usage` and `/metrics` show (stored by `gateway.storage.usage`).

Requests older than `gateway.retention_days` (at least two days, so the last 24 hours are always exact)
are rolled up from the tick into sums per UTC day, loop, session, person and model; the figures are the
same after a roll-up as before it.
"""

from __future__ import annotations

import time

from agent.usage import UsageScope
from gateway.storage.usage import DAY, UsageStore

MIN_RAW_DAYS = 2.0  # requests of the last two days are always kept one by one (`/usage`'s 24 hours)


class UsageLedger:
    """What is recorded, reported and rolled up, over the usage tables (`gateway.storage.usage`: the sums)."""

    def __init__(self, usage: UsageStore) -> None:
        self.usage = usage

    def record(self, scope: UsageScope, model: str, usage: dict[str, int] | None) -> None:
        """One request's tokens, written with the next group commit (a record that may lose its last
        second at a power loss: it needs no commit of its own)."""
        self.usage.record(time.time(), scope.loop, scope.session_id, scope.platform, scope.user_id, model,
                                int((usage or {}).get("prompt_tokens") or 0),
                                int((usage or {}).get("completion_tokens") or 0))

    async def chat_report(self, session_id: int | None, platform: str, user_id: str) -> str:
        """What `/usage` answers: this session, and this person today and in all."""
        session = await self.usage.by_loop(session_id=session_id) if session_id is not None else {}
        day = await self.usage.by_loop(person=(platform, user_id), since=time.time() - DAY)
        ever = await self.usage.by_loop(person=(platform, user_id))
        lines = [f"This session: {describe(session)}", f"You, last 24 hours: {describe(day)}",
                 f"You, in all: {describe(ever)}"]
        if len(ever) > 1:
            lines.append("By loop (you, in all): " + "; ".join(f"{loop} {describe({loop: t})}"
                                                               for loop, t in ever.items()))
        return "\n".join(lines)

    async def roll_up(self, keep_days: float) -> int:
        """Fold the requests of whole UTC days older than `keep_days` (at least `MIN_RAW_DAYS`) into daily
        sums, a day per write (other writes go between); return how many requests were folded."""
        return await self.usage.roll_up(time.time() - max(keep_days, MIN_RAW_DAYS) * DAY)


def describe(totals: dict[str, dict[str, int]]) -> str:
    requests = sum(t["requests"] for t in totals.values())
    if not requests:
        return "nothing yet"
    prompt = sum(t["prompt"] for t in totals.values())
    completion = sum(t["completion"] for t in totals.values())
    return f"{prompt + completion:,} tokens ({prompt:,} in, {completion:,} out) in {requests:,} request(s)"
