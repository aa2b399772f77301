#!/usr/bin/env python3
"""Which async PostgreSQL driver for issue 36's storage engine: asyncpg, or psycopg 3 with psycopg_pool?

Measured per driver, over one schema (inbox, sessions, messages, outbox, as chatgate's) and one SQL text
(written with $n; psycopg is given %s), through the same thin adapter: the CPU of this process
(time.process_time), the wall time, and PostgreSQL's CPU (the pool's backends, from /proc/<pid>/stat;
"-" when the server is not on this machine), for:

1. group commit: 1, 10 or 100 units of work in one transaction on one pooled connection, a unit being
   INSERT ... RETURNING id, UPDATE, SELECT: per unit, and wall per batch;
2. a turn's statements as SessionStore/InboxStore/OutboxStore run them, one pool checkout per group: insert
   the inbound message; read the session and its latest 20 messages; mark it processing; in one transaction
   insert two messages (executemany), touch the session, mark the inbox row done, insert the outbox row;
   mark the outbox row sent (10 statements, 4 commits). Per turn, one after another and 50 at once.
3. a pool checkout (acquire + release, nothing run).

Variants: asyncpg (its pool sends a reset query on every release: pg_advisory_unlock_all, CLOSE ALL,
UNLISTEN *, RESET ALL), asyncpg with a no-op `reset`, psycopg with prepare_threshold 5 (the default) and 0.
Each round gives each variant a fresh schema, in a rotated order (the machine is shared and drifts); the
table has medians over rounds, and medians of the per-round ratios asyncpg / psycopg. Its own database
(t_<random>) is made and dropped WITH (FORCE) at the end. Nothing is asserted.

    .venv/bin/pip install 'asyncpg==0.32.*' 'psycopg[binary]==3.3.*' 'psycopg_pool==3.3.*'
    .venv/bin/python bench/pg_driver.py --rounds 7 [--url postgresql://postgres@127.0.0.1/postgres] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import secrets
import statistics
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import asyncpg
from psycopg_pool import AsyncConnectionPool

SCHEMA = """
DROP TABLE IF EXISTS inbox, sessions, messages, outbox;
CREATE TABLE sessions (id bigserial PRIMARY KEY, key text NOT NULL, created_at float8 NOT NULL,
    updated_at float8 NOT NULL, ended_at float8);
CREATE TABLE messages (id bigserial PRIMARY KEY, session_id bigint NOT NULL, inbox_id bigint, role text NOT NULL,
    content text NOT NULL DEFAULT '', status text NOT NULL DEFAULT 'ok', created_at float8 NOT NULL);
CREATE INDEX messages_by_session ON messages (session_id, id);
CREATE TABLE inbox (id bigserial PRIMARY KEY, platform text NOT NULL, chat_id text NOT NULL,
    platform_message_id text NOT NULL, session_key text NOT NULL, payload text NOT NULL,
    state text NOT NULL DEFAULT 'received', received_at float8 NOT NULL, updated_at float8 NOT NULL,
    UNIQUE (platform, chat_id, platform_message_id));
CREATE TABLE outbox (id bigserial PRIMARY KEY, platform text NOT NULL, chat_id text NOT NULL, inbox_id bigint,
    payload text NOT NULL, state text NOT NULL DEFAULT 'pending', attempts int NOT NULL DEFAULT 0,
    platform_message_ids text NOT NULL DEFAULT '[]', created_at float8 NOT NULL, sent_at float8);
INSERT INTO sessions (key, created_at, updated_at) SELECT 'telegram:' || g, 0, 0 FROM generate_series(1, 50) g;
INSERT INTO messages (session_id, role, content, created_at)
    SELECT s, CASE WHEN m % 2 = 0 THEN 'user' ELSE 'assistant' END, repeat('words ', 40), m
    FROM generate_series(1, 50) s, generate_series(1, 40) m; ANALYZE;
"""
INSERT_INBOX = ("INSERT INTO inbox (platform, chat_id, platform_message_id, session_key, payload, received_at,"
                " updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING RETURNING id")
SESSION = "SELECT id FROM sessions WHERE key = $1 AND ended_at IS NULL"
WINDOW = ("SELECT id, role, content FROM (SELECT id, role, content FROM messages WHERE session_id = $1"
          " AND status = 'ok' ORDER BY id DESC LIMIT $2) w ORDER BY id")
PROCESSING = "UPDATE inbox SET state = 'processing', updated_at = $1 WHERE id = $2 AND state = 'received'"
INSERT_MESSAGE = "INSERT INTO messages (session_id, inbox_id, role, content, created_at) VALUES ($1, $2, $3, $4, $5)"
TOUCH_SESSION = "UPDATE sessions SET updated_at = $1 WHERE id = $2"
INBOX_DONE = "UPDATE inbox SET state = 'done', updated_at = $1 WHERE id = $2"
INSERT_OUTBOX = ("INSERT INTO outbox (platform, chat_id, inbox_id, payload, created_at) VALUES ($1, $2, $3, $4, $5)"
                 " RETURNING id")
SENT = "UPDATE outbox SET state = 'sent', platform_message_ids = $1, attempts = 1, sent_at = $2 WHERE id = $3"
READ_INBOX = "SELECT id, state, payload FROM inbox WHERE id = $1"


@functools.lru_cache(maxsize=None)
def percent_s(sql: str) -> str:
    """$n -> %s for psycopg (each $n is used once, in order, in every statement here)."""
    return re.sub(r"\$\d+", "%s", sql)


class Adapter:
    """What both adapters share: a pool (`self.pool`), transactions as the driver's context manager."""

    def tx(self, conn: Any) -> Any:
        return conn.transaction()

    async def close(self) -> None:
        await self.pool.close()


class Asyncpg(Adapter):
    """The thin adapter over asyncpg: rows are asyncpg.Record (by name and by index)."""

    def __init__(self, reset: bool = True) -> None:
        self.name = "asyncpg" if reset else "asyncpg-noreset"
        self.reset = reset

    async def open(self, url: str, size: int) -> None:
        async def keep(conn: Any) -> None:
            """No reset query on release (the engine would leave no session state behind)."""
        self.pool = await asyncpg.create_pool(url, min_size=size, max_size=size, reset=None if self.reset else keep)

    def conn(self) -> Any:
        return self.pool.acquire()

    async def rows(self, conn: Any, sql: str, *args: Any) -> list[Any]:
        return await conn.fetch(sql, *args)

    async def value(self, conn: Any, sql: str, *args: Any) -> Any:
        return await conn.fetchval(sql, *args)

    async def run(self, conn: Any, sql: str, *args: Any) -> int:
        return int((await conn.execute(sql, *args)).rsplit(" ", 1)[-1])  # 'UPDATE 1' -> 1

    async def many(self, conn: Any, sql: str, rows: list[tuple[Any, ...]]) -> None:
        await conn.executemany(sql, rows)


class Psycopg(Adapter):
    """The same over psycopg 3 and psycopg_pool: autocommit connections, transactions said explicitly."""

    def __init__(self, threshold: int | None = 5) -> None:
        self.name = f"psycopg-t{threshold}"
        self.threshold = threshold

    async def open(self, url: str, size: int) -> None:
        self.pool = AsyncConnectionPool(url, min_size=size, max_size=size, open=False,
                                        kwargs={"autocommit": True, "prepare_threshold": self.threshold})
        await self.pool.open(wait=True)

    def conn(self) -> Any:
        return self.pool.connection()

    async def rows(self, conn: Any, sql: str, *args: Any) -> list[Any]:
        return await (await conn.execute(percent_s(sql), args)).fetchall()

    async def value(self, conn: Any, sql: str, *args: Any) -> Any:
        row = await (await conn.execute(percent_s(sql), args)).fetchone()
        return row[0] if row else None

    async def run(self, conn: Any, sql: str, *args: Any) -> int:
        return (await conn.execute(percent_s(sql), args)).rowcount

    async def many(self, conn: Any, sql: str, rows: list[tuple[Any, ...]]) -> None:
        async with conn.cursor() as cur:
            await cur.executemany(percent_s(sql), rows)


def server_cpu(pids: list[int]) -> float | None:
    """CPU seconds (user + system) the backends `pids` used so far; None when /proc does not show them."""
    try:
        stats = [Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split() for pid in pids]
        return sum(int(f[11]) + int(f[12]) for f in stats) / os.sysconf("SC_CLK_TCK")  # utime + stime
    except (OSError, IndexError, ValueError):
        return None


async def measured(work: Callable[[], Awaitable[None]], pids: list[int]) -> tuple[float, float, float | None]:
    """(client CPU s, wall s, server CPU s) of `work`."""
    srv, cpu, wall = server_cpu(pids), time.process_time(), time.perf_counter()
    await work()
    cpu, wall, srv_after = time.process_time() - cpu, time.perf_counter() - wall, server_cpu(pids)
    return cpu, wall, (srv_after - srv if srv is not None and srv_after is not None else None)


_seq = iter(range(10**9))


async def unit(d: Any, conn: Any) -> None:
    """One unit of a group commit: INSERT ... RETURNING id, UPDATE, SELECT."""
    n, now = next(_seq), time.time()
    new_id = await d.value(conn, INSERT_INBOX, "telegram", "g", str(n), "telegram:g", '{"text": "hi"}', now, now)
    await d.run(conn, PROCESSING, now, new_id)
    await d.rows(conn, READ_INBOX, new_id)


async def group_commits(d: Any, size: int, batches: int) -> None:
    for _ in range(batches):
        async with d.conn() as conn, d.tx(conn):
            for _ in range(size):
                await unit(d, conn)


async def turn(d: Any, chat: int) -> None:
    """A turn's statements (see the module doc), one pool checkout per write group as the engine would."""
    n, now, key = next(_seq), time.time(), f"telegram:{chat}"
    async with d.conn() as c:
        inbox_id = await d.value(c, INSERT_INBOX, "telegram", str(chat), str(n), key, '{"text": "hello"}', now, now)
    async with d.conn() as c:
        session_id = await d.value(c, SESSION, key)
        history = [{"role": r[1], "content": r[2]} for r in await d.rows(c, WINDOW, session_id, 20)]
    async with d.conn() as c:
        await d.run(c, PROCESSING, now, inbox_id)
    reply = f"an answer after {len(history)} messages"
    async with d.conn() as c, d.tx(c):
        await d.many(c, INSERT_MESSAGE, [(session_id, inbox_id, "user", "hello", now),
                                         (session_id, inbox_id, "assistant", reply, now)])
        await d.run(c, TOUCH_SESSION, now, session_id)
        await d.run(c, INBOX_DONE, now, inbox_id)
        outbox_id = await d.value(c, INSERT_OUTBOX, "telegram", str(chat), inbox_id, reply, now)
    async with d.conn() as c:
        await d.run(c, SENT, f'["{n}"]', time.time(), outbox_id)


async def variant(d: Any, url: str, args: argparse.Namespace) -> dict[str, Any]:
    schema = await asyncpg.connect(url)
    await schema.execute(SCHEMA)
    await schema.close()  # (a fresh schema per variant: each one starts from the same tables)
    await d.open(url, args.pool)
    async with d.conn() as c:
        pids = [r[0] for r in await d.rows(c, "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")]
    await group_commits(d, 10, 5)  # warm: statements prepared, caches filled
    await asyncio.gather(*(turn(d, chat) for chat in range(1, 51)))
    out: dict[str, Any] = {"variant": d.name}

    def put(name: str, result: tuple[float, float, float | None], per: int, walls: int) -> None:
        cpu, wall, srv = result
        out[f"{name} cpu_us"] = cpu / per * 1e6
        out[f"{name} wall_ms"] = wall / walls * 1e3
        out[f"{name} pg_cpu_us"] = srv / per * 1e6 if srv is not None else None

    for size in (1, 10, 100):
        batches = max(args.units // size, 5)
        spent = await measured(lambda: group_commits(d, size, batches), pids)
        put(f"group {size:>3}/unit", spent, batches * size, batches)

    async def turns(at_once: int) -> None:
        for first in range(0, args.turns, at_once):
            await asyncio.gather(*(turn(d, (first + i) % 50 + 1) for i in range(at_once)))

    put("turn seq", await measured(lambda: turns(1), pids), args.turns, args.turns)
    put("turn 50 at once", await measured(lambda: turns(50), pids), args.turns, args.turns)
    async def checkouts() -> None:
        for _ in range(args.checkouts):
            async with d.conn():
                pass

    put("pool checkout", await measured(checkouts, pids), args.checkouts, args.checkouts)
    out["threads"] = threading.active_count()
    await d.close()
    return out


def table(names: list[str], results: list[list[dict[str, Any]]]) -> None:
    """Medians per variant, and per-round ratios asyncpg / each psycopg variant (median)."""
    metrics = [k for k in results[0][0] if k not in ("variant", "threads")]
    by = [{r["variant"]: r for r in one} for one in results]
    ratio_to = [n for n in names if n.startswith("psycopg")]
    head = ["metric", *names, *(f"apg/{n}" for n in ratio_to)]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for m in metrics:
        meds = [statistics.median(x) if (x := [b[n][m] for b in by if b[n][m] is not None]) else None for n in names]
        paired = [[b["asyncpg"][m] / b[n][m] for b in by if b["asyncpg"][m] and b[n][m]] for n in ratio_to]
        cells = ["-" if v is None else f"{v:.3g}" if v < 100 else f"{v:.0f}" for v in meds]
        cells += [f"{statistics.median(p):.2f}" if p else "-" for p in paired]
        print(f"| {m} | " + " | ".join(cells) + " |")
    print("threads at the end of each variant:", {n: by[0][n]["threads"] for n in names})


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="a database where this user may CREATE DATABASE")
    for flag, default, what in (("rounds", 5, "rounds"), ("units", 1000, "units of work per group-commit size"),
                                ("turns", 200, "turns per way"), ("checkouts", 2000, "pool checkouts"),
                                ("pool", 6, "connections in each pool")):
        parser.add_argument(f"--{flag}", type=int, default=default, help=what)
    parser.add_argument("--json", help="append each round's figures to this file (JSON lines)")
    args = parser.parse_args()
    name = "t_" + secrets.token_hex(6)
    admin = await asyncpg.connect(args.url)
    await admin.execute(f"CREATE DATABASE {name}")
    url = args.url.rsplit("/", 1)[0] + "/" + name
    drivers = [Asyncpg(), Asyncpg(reset=False), Psycopg(5), Psycopg(0)]
    results: list[list[dict[str, Any]]] = []
    try:
        for rnd in range(args.rounds):
            order = drivers[rnd % len(drivers):] + drivers[:rnd % len(drivers)]
            results.append(one := [await variant(d, url, args) for d in order])
            print(f"round {rnd + 1}/{args.rounds} done", flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(one) + "\n")
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()
    print(f"asyncpg {asyncpg.__version__}, pool {args.pool} connections, {args.rounds} rounds; medians "
          "(cpu: this process per unit/turn/checkout; pg_cpu: the pool's backends; wall: per batch/turn/checkout)")
    table([d.name for d in drivers], results)


if __name__ == "__main__":
    asyncio.run(main())
