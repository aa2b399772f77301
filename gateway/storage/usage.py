"""Token usage: a row of `llm_usage` per LLM request (which loop asked, for which session and person,
with which model, how many tokens in and out), and their sums per UTC day in `llm_usage_daily` (one row
per day, loop, session, person and model, with the number of requests), into which old rows are rolled
up. Every reading adds both tables, so the sums per loop, per session, per person and per day are the
same after a roll-up as before it; a window that begins inside a rolled-up day counts that whole day.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from gateway.storage.connection import Connection
from gateway.storage.tables import Tables

DAY = 86400


def _day_start(at: float) -> float:
    """The start of the UTC day `at` falls in."""
    return at - at % DAY


def _selected(d: ModuleType, session_id: int | None, person: tuple[str, str] | None,
              since: float | None) -> tuple[str, tuple[Any, ...]]:
    """A query of (loop, session_id, day, requests, prompt, completion) over the requests and the daily
    sums that match; a daily row counts when its day is the one `since` falls in or later."""
    where, args = ["TRUE"], []
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
        daily += f" AND day >= {d.utc_day('?')}"
        raw_args.append(since)
        daily_args.append(since)
    sql = (f"SELECT loop, session_id, {d.utc_day('at')} AS day, 1 AS requests, prompt_tokens AS prompt,"
           f" completion_tokens AS completion FROM llm_usage WHERE {raw} UNION ALL SELECT loop, session_id, day,"
           f" requests, prompt_tokens, completion_tokens FROM llm_usage_daily WHERE {daily}")
    return sql, (*raw_args, *daily_args)

# The sums as integers: PostgreSQL's sum() of a BIGINT is a NUMERIC (a Decimal in Python, which JSON and the
# figures' formatting refuse), SQLite's already an integer.
_TOTALS = ("CAST(sum(requests) AS BIGINT) AS requests, CAST(sum(prompt) AS BIGINT) AS prompt,"
           " CAST(sum(completion) AS BIGINT) AS completion")


class UsageStore(Tables):
    def record(self, at: float, loop: str, session_id: int | None, platform: str, user_id: str, model: str,
               prompt_tokens: int, completion_tokens: int) -> None:
        """One request's tokens, written with the next group commit (`later`: no commit of its own)."""
        row = (at, loop, session_id, platform, user_id, model, prompt_tokens, completion_tokens)
        self.db.later(lambda db: db.execute(
            "INSERT INTO llm_usage (at, loop, session_id, platform, user_id, model, prompt_tokens,"
            " completion_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", *row))

    async def by_loop(self, *, session_id: int | None = None, person: tuple[str, str] | None = None,
                      since: float | None = None) -> dict[str, dict[str, int]]:
        """{loop: {requests, prompt, completion}}, for a session, a person (platform, user id), since a time."""
        sql, args = _selected(self.db.dialect, session_id, person, since)
        rows = await self.fetch(
            f"WITH u AS ({sql}) SELECT loop, {_TOTALS} FROM u GROUP BY loop ORDER BY loop", *args)
        return {r["loop"]: {"requests": r["requests"], "prompt": r["prompt"], "completion": r["completion"]}
                for r in rows}

    async def by_day(self, since: float) -> list[dict[str, Any]]:
        """[{day, requests, prompt, completion}] per UTC day since a time, oldest first."""
        sql, args = _selected(self.db.dialect, None, None, since)
        rows = await self.fetch(
            f"WITH u AS ({sql}) SELECT day, {_TOTALS} FROM u GROUP BY day ORDER BY day", *args)
        return [dict(r) for r in rows]

    async def top_sessions(self, since: float, limit: int = 5) -> list[dict[str, Any]]:
        """[{session_id, key, tokens, requests}]: the sessions that used the most tokens since a time."""
        sql, args = _selected(self.db.dialect, None, None, since)
        rows = await self.fetch(
            f"WITH u AS ({sql}) SELECT u.session_id, s.key, CAST(sum(u.prompt + u.completion) AS BIGINT) AS tokens,"
            " CAST(sum(u.requests) AS BIGINT) AS requests FROM u LEFT JOIN sessions s ON s.id = u.session_id"
            " WHERE u.session_id IS NOT NULL GROUP BY u.session_id, s.key ORDER BY tokens DESC, u.session_id LIMIT ?",
            *args, limit)
        return [dict(r) for r in rows]

    async def roll_up(self, before: float) -> int:
        """Fold the requests of the whole UTC days before the one `before` falls in into daily sums, a day
        per write (other writes go between); return how many requests were folded."""
        cutoff = _day_start(before)

        async def fold_oldest_day(db: Connection) -> int:
            first = await db.fetchval("SELECT min(at) FROM llm_usage WHERE at < ?", cutoff)
            if first is None:
                return 0
            start = _day_start(first)
            end = min(start + DAY, cutoff)
            await db.execute(
                "INSERT INTO llm_usage_daily (day, loop, session_id, platform, user_id, model, requests, prompt_tokens,"
                f" completion_tokens) SELECT {db.dialect.utc_day('?')}, loop, session_id, platform, user_id, model, count(*),"
                " sum(prompt_tokens), sum(completion_tokens) FROM llm_usage WHERE at >= ? AND at < ?"
                " GROUP BY loop, session_id, platform, user_id, model", start, start, end)
            return await db.execute("DELETE FROM llm_usage WHERE at >= ? AND at < ?", start, end)

        return await self.in_batches(fold_oldest_day)
