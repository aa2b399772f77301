#!/usr/bin/env python3
"""The disk an upgrade takes: a database as release 15 left it, with an inbox of `--rows` rows, opened
by this chatgate (migration 016 rebuilds the inbox). Printed: the database file and its WAL before,
the most the two held together while it ran (sampled every few milliseconds from another thread, so
a brief peak can be missed by that much), and both after; for a database with incremental vacuum
(`--vacuum incremental`, what chatgate makes since release 15) or without (`none`, older ones).
It asserts nothing.

    .venv/bin/python bench/migration_space.py --rows 400001 --vacuum none
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import sys
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gateway.storage import Store  # noqa: E402
from gateway.storage.schema import migrations  # noqa: E402

MIB = 1024 * 1024


def release_15(path: Path, rows: int, vacuum: str) -> None:
    """Migrations 1..15 as that release applied them, then `rows` finished messages in the inbox."""
    with closing(sqlite3.connect(path, isolation_level=None)) as db:  # (closed: its WAL is then not held open)
        db.execute(f"PRAGMA auto_vacuum = {vacuum.upper()}")
        db.execute("PRAGMA journal_mode=WAL")
        for number, sql in migrations():
            if number <= 15:
                db.executescript(f"BEGIN;\n{sql}\nPRAGMA user_version = {number};\nCOMMIT;")
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO inbox (platform, chat_id, platform_message_id, session_key, payload, state, received_at,"
            " updated_at) VALUES ('telegram', ?, ?, ?, ?, 'done', 1, 1)",
            ((str(i % 500), str(i), f"telegram:{i % 500}", payload(i)) for i in range(rows)))
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def payload(i: int) -> str:
    """An InboundMessage's JSON as the inbox keeps it (a short chat message)."""
    return json.dumps({"platform": "telegram", "chat_id": str(i % 500), "chat_type": "dm", "user_id": str(i % 500),
                       "user_name": f"user {i % 500}", "text": f"message number {i}: could you look at this",
                       "message_id": str(i), "thread_id": None, "reply_to": None, "mentioned": False,
                       "attachments": []})


def on_disk(path: Path) -> tuple[int, int]:
    sizes = []
    for suffix in ("", "-wal"):
        try:
            sizes.append(os.stat(f"{path}{suffix}").st_size)
        except FileNotFoundError:
            sizes.append(0)
    return sizes[0], sizes[1]


def measure(path: Path) -> tuple[int, float, tuple[int, int]]:
    """The most the database and its WAL held together while this chatgate opened it, how long that took,
    and both once it was open (as a daemon goes on with them)."""
    peak, done, opened = [0], threading.Event(), [(0, 0)]

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], sum(on_disk(path)))
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.monotonic()

    async def upgrade() -> None:
        store = await Store.open(path)
        opened[0] = on_disk(path)
        await store.close()

    try:
        asyncio.run(upgrade())
    finally:
        done.set()
        sampler.join()
    return max(peak[0], sum(opened[0])), time.monotonic() - started, opened[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=400_001)
    parser.add_argument("--vacuum", choices=["none", "incremental"], default="none")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "state.db"
        release_15(path, args.rows, args.vacuum)
        before = on_disk(path)
        peak, seconds, opened = measure(path)
        after = on_disk(path)
    print(f"{args.rows:,} inbox rows, auto_vacuum {args.vacuum}: migration 016 in {seconds:.1f}s")
    print(f"  before: file {before[0] / MIB:7.1f} MiB + WAL {before[1] / MIB:6.1f} MiB")
    print(f"  peak:   file + WAL {peak / MIB:7.1f} MiB")
    print(f"  open:   file {opened[0] / MIB:7.1f} MiB + WAL {opened[1] / MIB:6.1f} MiB  (what a daemon goes on with)")
    print(f"  closed: file {after[0] / MIB:7.1f} MiB + WAL {after[1] / MIB:6.1f} MiB")


if __name__ == "__main__":
    main()
