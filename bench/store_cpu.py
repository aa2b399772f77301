#!/usr/bin/env python3
"""The storage layer's own CPU: what the event loop and aiosqlite's thread spend per statement.

Two loops on a fresh store in a temporary folder (`durability: normal`, so the figures are CPU rather
than the disk's fsync), each run `--repeat` times, printing the median process CPU (every thread:
aiosqlite's too) and wall time:

* ``inbox``: `--messages` times `store.inbox.add` then `store.inbox.set_state(..., "done")`, one
  after the other (each write its own commit: the per-write cost);
* ``turns``: `--turns` turns of one chat: `sessions.open_turn` then `sessions.commit_turn` with a user
  message and a reply (the statements a turn runs).

Usage::

    .venv/bin/python bench/store_cpu.py                     # 2,000 messages, 500 turns, 5 repeats
    PYTHONPATH=/path/to/other/checkout python bench/store_cpu.py   # the same on another revision
    .venv/bin/python bench/store_cpu.py --postgres postgresql://postgres@127.0.0.1:5432   # on PostgreSQL

With `--postgres SERVER`, each run uses a new database on that server (made, then dropped); the CPU is
this process's only (the server's own is not counted here).

It prints figures and asserts nothing about time.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import tempfile
import time
from pathlib import Path

from gateway.storage import Store
from gateway.storage.outbox import OutboxItem
from platforms.base import ChatRef, InboundMessage


def _message(n: int) -> InboundMessage:
    return InboundMessage(platform="webchat", chat_id="bench", chat_type="dm", user_id="u", user_name="U",
                          text=f"message {n}", message_id=str(n))


async def _inbox(store: Store, messages: int) -> None:
    for n in range(messages):
        inbox_id = await store.inbox.add(_message(n), "webchat:bench")
        assert inbox_id is not None
        await store.inbox.set_state([inbox_id], "done")


async def _turns(store: Store, turns: int) -> None:
    chat = ChatRef("webchat", "turns")
    for n in range(turns):
        inbox_id = await store.inbox.add(_message(100_000 + n), "webchat:turns")
        assert inbox_id is not None
        start = await store.sessions.open_turn("webchat:turns", chat, "dm")
        reply = OutboxItem(chat=chat, text=f"answer {n}", inbox_id=inbox_id)
        await store.sessions.commit_turn(start.session_id, [inbox_id], chat, "u",
                                         [{"role": "user", "content": f"message {n}"},
                                          {"role": "assistant", "content": f"answer {n}"}], reply)


async def _timed(loop: str, count: int, server: str | None) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of `loop` on a new store."""
    with tempfile.TemporaryDirectory() as folder:
        name = f"bench_{secrets.token_hex(6)}"
        if server is not None:
            await _admin(server, f"CREATE DATABASE {name}")
        store = await Store.open(Path(folder) / "state.db", url=f"{server}/{name}" if server else None,
                                 durability="normal")
        try:
            cpu, wall = time.process_time(), time.perf_counter()
            await (_inbox(store, count) if loop == "inbox" else _turns(store, count))
            return time.process_time() - cpu, time.perf_counter() - wall
        finally:
            await store.close()
            if server is not None:
                await _admin(server, f"DROP DATABASE {name} WITH (FORCE)")


async def _admin(server: str, sql: str) -> None:
    import asyncpg

    db = await asyncpg.connect(f"{server}/postgres")
    try:
        await db.execute(sql)
    finally:
        await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--loops", default="inbox,turns")
    parser.add_argument("--postgres", metavar="SERVER", help="postgresql://user@host:port (a new database per run)")
    args = parser.parse_args()
    for loop in args.loops.split(","):
        count = args.messages if loop == "inbox" else args.turns
        runs = [asyncio.run(_timed(loop, count, args.postgres)) for _ in range(args.repeat)]
        cpu = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        print(f"{loop:6} x{count}: CPU median {cpu:.3f} s ({cpu / count * 1e6:.0f} us each), wall median {wall:.3f} s"
              f"  [CPU runs: {', '.join(f'{r[0]:.3f}' for r in runs)}]")


if __name__ == "__main__":
    main()
