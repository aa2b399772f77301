"""Skills' provenance and usage in the database (the `agent.skills.SkillUsage` port)."""

from __future__ import annotations

import time
from typing import Any

import aiosqlite

from gateway.storage import Store


class SkillUsage:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def wrote(self, name: str, provenance: str) -> None:
        """A write by `provenance`; the first writer stays the skill's provenance."""
        now = time.time()

        async def record_write(db: aiosqlite.Connection) -> None:
            await db.execute(
                "INSERT INTO skills (name, provenance, updated_by, created_at, updated_at, last_used_at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET updated_by = excluded.updated_by,"
                " updated_at = excluded.updated_at, last_used_at = excluded.updated_at, state = 'active'",
                (name, provenance, provenance, now, now, now))

        await self.store.write(record_write, single=True)

    async def viewed(self, name: str) -> None:
        now = time.time()

        async def record_view(db: aiosqlite.Connection) -> None:
            cur = await db.execute("UPDATE skills SET views = views + 1, last_used_at = ?,"
                             " state = CASE state WHEN 'stale' THEN 'active' ELSE state END WHERE name = ?",
                             (now, name))
            if not cur.rowcount:  # a skill put in place by hand: the user's
                await db.execute("INSERT INTO skills (name, provenance, updated_by, created_at, updated_at, views,"
                           " last_used_at) VALUES (?, 'user', 'user', ?, ?, 1, ?)", (name, now, now, now))

        await self.store.write(record_view)

    async def state(self, name: str, state: str) -> None:
        async def set_state(db: aiosqlite.Connection) -> None:
            await db.execute("INSERT INTO skills (name, provenance, updated_by, created_at, updated_at, state)"
                       " VALUES (?, 'user', 'user', ?, ?, ?) ON CONFLICT(name) DO UPDATE SET state = ?",
                       (name, time.time(), time.time(), state, state))

        await self.store.write(set_state, single=True)

    async def pin(self, name: str, pinned: bool) -> None:
        async def set_pinned(db: aiosqlite.Connection) -> None:
            await db.execute("INSERT INTO skills (name, provenance, updated_by, created_at, updated_at, pinned)"
                       " VALUES (?, 'user', 'user', ?, ?, ?) ON CONFLICT(name) DO UPDATE SET pinned = ?",
                       (name, time.time(), time.time(), int(pinned), int(pinned)))

        await self.store.write(set_pinned, single=True)

    async def meta(self) -> dict[str, dict[str, Any]]:
        return {r["name"]: dict(r) for r in await self.store.fetch_all("SELECT * FROM skills")}
