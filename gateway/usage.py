"""Token usage in the store: one row per LLM request (`agent.usage` says whom it served), and the
sums `/usage`, `chatgate usage` and `/metrics` show.

Rows older than `gateway.retention_days` (at least two days, so the last 24 hours are always exact)
are rolled up from the tick into `llm_usage_daily`: one row per UTC day, loop, session, person and
model with the number of requests and the token sums. Every figure adds both tables, so the sums per
loop, per session, per person and per day are the same after a roll-up as before it. A window that
begins inside a rolled-up day (`chatgate usage --days N` reaching that far back) counts that whole day.
"""

from __future__ import annotations

import time
from typing import Any

import aiosqlite

from agent.usage import UsageScope
from gateway.storage import Store

DAY = 86400
MIN_RAW_DAYS = 2.0  # requests of the last two days are always kept one by one (`/usage`'s 24 hours)


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
            " completion_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row))

    async def by_loop(self, *, session_id: int | None = None, person: tuple[str, str] | None = None,
                      since: float | None = None) -> dict[str, dict[str, int]]:
        """{loop: {requests, prompt, completion}}, for a session, a person (platform, user id), since a time."""
        sql, args = _selected(session_id, person, since)
        rows = await self.store.fetch_all(
            f"WITH u AS ({sql}) SELECT loop, sum(requests) AS requests, sum(prompt) AS prompt,"
            " sum(completion) AS completion FROM u GROUP BY loop ORDER BY loop", args)
        return {r["loop"]: {"requests": r["requests"], "prompt": r["prompt"], "completion": r["completion"]}
                for r in rows}

    async def by_day(self, since: float) -> list[dict[str, Any]]:
        """[{day, requests, prompt, completion}] per UTC day since a time, oldest first."""
        sql, args = _selected(None, None, since)
        rows = await self.store.fetch_all(
            f"WITH u AS ({sql}) SELECT day, sum(requests) AS requests, sum(prompt) AS prompt,"
            " sum(completion) AS completion FROM u GROUP BY day ORDER BY day", args)
        return [dict(r) for r in rows]

    async def top_sessions(self, since: float, limit: int = 5) -> list[dict[str, Any]]:
        """[{session_id, key, tokens, requests}]: the sessions that used the most tokens since a time."""
        sql, args = _selected(None, None, since)
        rows = await self.store.fetch_all(
            f"WITH u AS ({sql}) SELECT u.session_id, s.key, sum(u.prompt + u.completion) AS tokens,"
            " sum(u.requests) AS requests FROM u LEFT JOIN sessions s ON s.id = u.session_id"
            " WHERE u.session_id IS NOT NULL GROUP BY u.session_id ORDER BY tokens DESC, u.session_id LIMIT ?",
            (*args, limit))
        return [dict(r) for r in rows]

    async def chat_report(self, session_id: int | None, platform: str, user_id: str) -> str:
        """What `/usage` answers: this session, and this person today and in all."""
        session = await self.by_loop(session_id=session_id) if session_id is not None else {}
        day = await self.by_loop(person=(platform, user_id), since=time.time() - DAY)
        ever = await self.by_loop(person=(platform, user_id))
        lines = [f"This session: {describe(session)}", f"You, last 24 hours: {describe(day)}",
                 f"You, in all: {describe(ever)}"]
        if len(ever) > 1:
            lines.append("By loop (you, in all): " + "; ".join(f"{loop} {describe({loop: t})}"
                                                               for loop, t in ever.items()))
        return "\n".join(lines)

    async def roll_up(self, keep_days: float) -> int:
        """Fold the requests of whole UTC days older than `keep_days` (at least `MIN_RAW_DAYS`) into daily
        sums, a day per write (other writes go between); return how many requests were folded."""
        cutoff = _day_start(time.time() - max(keep_days, MIN_RAW_DAYS) * DAY)

        async def fold_oldest_day(db: aiosqlite.Connection) -> int:
            first = (await db.execute_fetchall("SELECT min(at) FROM llm_usage WHERE at < ?", (cutoff,)))[0][0]
            if first is None:
                return 0
            start = _day_start(first)
            end = min(start + DAY, cutoff)
            await db.execute(
                "INSERT INTO llm_usage_daily (day, loop, session_id, platform, user_id, model, requests, prompt_tokens,"
                " completion_tokens) SELECT date(?, 'unixepoch'), loop, session_id, platform, user_id, model, count(*),"
                " sum(prompt_tokens), sum(completion_tokens) FROM llm_usage WHERE at >= ? AND at < ?"
                " GROUP BY loop, session_id, platform, user_id, model", (start, start, end))
            return (await db.execute("DELETE FROM llm_usage WHERE at >= ? AND at < ?", (start, end))).rowcount

        folded = 0
        while n := await self.store.write(fold_oldest_day):
            folded += n
        return folded


def _day_start(at: float) -> float:
    return at - at % DAY


def _selected(session_id: int | None, person: tuple[str, str] | None,
              since: float | None) -> tuple[str, tuple[Any, ...]]:
    """A query of (loop, session_id, day, requests, prompt, completion) over the requests and the daily
    sums that match; a daily row counts when its day is the one `since` falls in or later."""
    where, args = ["1"], []
    if session_id is not None:
        where.append("session_id = ?")
        args.append(session_id)
    if person is not None:
        where.append("platform = ? AND user_id = ?")
        args.extend(person)
    raw, daily = " AND ".join(where), " AND ".join(where)
    raw_args, daily_args = list(args), list(args)
    if since is not None:
        raw += " AND at >= ?"
        daily += " AND day >= date(?, 'unixepoch')"
        raw_args.append(since)
        daily_args.append(since)
    sql = (f"SELECT loop, session_id, date(at, 'unixepoch') AS day, 1 AS requests, prompt_tokens AS prompt,"
           f" completion_tokens AS completion FROM llm_usage WHERE {raw} UNION ALL SELECT loop, session_id, day,"
           f" requests, prompt_tokens, completion_tokens FROM llm_usage_daily WHERE {daily}")
    return sql, (*raw_args, *daily_args)


def describe(totals: dict[str, dict[str, int]]) -> str:
    requests = sum(t["requests"] for t in totals.values())
    if not requests:
        return "nothing yet"
    prompt = sum(t["prompt"] for t in totals.values())
    completion = sum(t["completion"] for t in totals.values())
    return f"{prompt + completion:,} tokens ({prompt:,} in, {completion:,} out) in {requests:,} request(s)"
