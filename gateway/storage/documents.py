"""The agent's documents (memory, skills: agent.documents) as rows, for instances that share a database.

* `documents`, a row per document: its name (the path its file has in a home), its text, when it was written.
* `document_changes`, one row: a counter bumped by every change, written first in the change's transaction.
  So every change to the documents (from any instance) queues on that row, one after the other, and
  `stamp()` (the counter) tells a cache (the skill index) whether anything changed since it was built.

`update` is one unit of work of the group commit: the counter, then the document's row read with a row lock
(`FOR_UPDATE`: PostgreSQL), the edit, the write — so two instances adding to `memory/MEMORY.md` at once each
add to what the other committed. What the edit raises aborts it: nothing is written but the counter.
"""

from __future__ import annotations

import time
from typing import Any, Hashable

from agent.documents import BadName, Edit, checked, checked_path, under
from gateway.storage.connection import Connection
from gateway.storage.tables import Tables

_BUMP = ("INSERT INTO document_changes (id, changes) VALUES (1, 1)"
         " ON CONFLICT (id) DO UPDATE SET changes = document_changes.changes + 1")
_UPSERT = ("INSERT INTO documents (name, body, updated_at) VALUES (?, ?, ?)"
           " ON CONFLICT (name) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at")
_AT_OR_UNDER = "(name = ?1 OR substr(name, 1, ?2) = ?3)"  # the document ?1 and those under it


def _at_or_under(path: str) -> tuple[str, int, str]:
    return path, len(path) + 1, path + "/"


class _Aborted:
    """What an edit raised, carried out of the unit of work (raised there, it would roll its batch back)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class DocumentStore(Tables):
    """agent.documents.Documents over the `documents` table (see the module doc)."""

    async def read(self, name: str) -> str | None:
        body = await self.fetchval("SELECT body FROM documents WHERE name = ?", checked(name))
        return None if body is None else str(body)

    async def write(self, name: str, text: str) -> None:
        checked(name)

        async def write(db: Connection) -> None:
            await db.execute(_BUMP)
            await db.execute(_UPSERT, name, text, time.time())

        await self.db.write(write)

    async def delete(self, name: str) -> bool:
        checked(name)

        async def delete(db: Connection) -> int:
            await db.execute(_BUMP)
            return await db.execute("DELETE FROM documents WHERE name = ?", name)

        return bool(await self.db.write(delete))

    async def names(self, prefix: str) -> list[str]:
        rows = await self.fetch("SELECT name FROM documents WHERE substr(name, 1, ?1) = ?2", len(prefix), prefix)
        return sorted(str(r["name"]) for r in rows)

    async def move(self, src: str, dst: str) -> int:
        return await self._transfer(src, dst, moving=True)

    async def copy(self, src: str, dst: str) -> int:
        return await self._transfer(src, dst, moving=False)

    async def delete_all(self, path: str) -> int:
        path = checked_path(path)

        async def delete_all(db: Connection) -> int:
            await db.execute(_BUMP)
            return await db.execute(f"DELETE FROM documents WHERE {_AT_OR_UNDER}", *_at_or_under(path))

        return int(await self.db.write(delete_all))

    async def update(self, name: str, edit: Edit) -> str | None:
        checked(name)

        async def update(db: Connection) -> str | None | _Aborted:
            await db.execute(_BUMP)
            old = await db.fetchval(f"SELECT body FROM documents WHERE name = ?{db.dialect.FOR_UPDATE}", name)
            try:
                new = edit(None if old is None else str(old))
            except Exception as exc:
                return _Aborted(exc)
            if new is None:
                await db.execute("DELETE FROM documents WHERE name = ?", name)
            elif new != old:
                await db.execute(_UPSERT, name, new, time.time())
            return new

        outcome = await self.db.write(update)
        if isinstance(outcome, _Aborted):
            raise outcome.error
        return outcome

    async def stamp(self) -> Hashable:
        return int(await self.fetchval("SELECT changes FROM document_changes WHERE id = 1") or 0)

    async def _transfer(self, src: str, dst: str, *, moving: bool) -> int:
        src, dst = checked_path(src), checked_path(dst)
        if under(dst, src) or under(src, dst):
            raise BadName(f"cannot {'move' if moving else 'copy'} {src!r} to {dst!r}: one is inside the other")

        async def transfer(db: Connection) -> int:
            await db.execute(_BUMP)
            rows = await db.fetch(f"SELECT name, body FROM documents WHERE {_AT_OR_UNDER}", *_at_or_under(src))
            if not rows:
                return 0
            now = time.time()
            moved: list[tuple[Any, ...]] = [(dst + str(r["name"])[len(src):], r["body"], now) for r in rows]
            if moving:
                await db.execute(f"DELETE FROM documents WHERE {_AT_OR_UNDER}", *_at_or_under(src))
            await db.executemany(_UPSERT, moved)
            return len(moved)

        return int(await self.db.write(transfer))
