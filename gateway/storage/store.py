"""The store: the one database, opened and migrated, and its groups of tables.

`Store.open(path)` opens `$CHATGATE_HOME/state.db` (WAL; the folder 0700, the files 0600) and applies
the migrations it lacks; each attribute is one group of tables (`inbox`, `outbox`, `sessions`, ...),
whose methods take and return plain values. Commits are `synchronous=FULL` by default: a message
acknowledged to a platform survives a power loss (`gateway.durability: normal` trades that for speed:
then only a crash of the process is safe).

`read`, `write`, `later` and (from `Tables`) `fetch`, `fetchrow`, `fetchval` and `execute` take units of work
(functions of a `Connection`: gateway.storage.connection) or SQL: they are for this package, and for tests and
tools that look at the database itself.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import aiosqlite

from gateway.storage import schema
from gateway.storage.access import AccessStore
from gateway.storage.approvals import ApprovalStore
from gateway.storage.board import BoardStore
from gateway.storage.connection import Connection, Work
from gateway.storage.cron import CronStore
from gateway.storage.documents import DocumentStore
from gateway.storage.database import LOCK_WAIT, Database, StorageError
from gateway.storage.sqlite_engine import open_sqlite
from gateway.storage.goals import GoalStore
from gateway.storage.inbox import InboxStore
from gateway.storage.learning import LearningStore
from gateway.storage.leases import LeaseStore
from gateway.storage.owners import OwnerStore
from gateway.storage.outbox import OutboxStore
from gateway.storage.sessions import SessionStore
from gateway.storage.sqlite_connection import SqliteConnection
from gateway.storage.subagents import SubagentStore
from gateway.storage.tables import Tables
from gateway.storage.upkeep import Upkeep
from gateway.storage.usage import UsageStore

T = TypeVar("T")


def _private(path: Path, mode: int) -> None:
    """Tighten permissions of a file or folder we own (a database made by an older version)."""
    try:
        if path.exists() and path.stat().st_mode & 0o777 != mode:
            path.chmod(mode)
    except OSError:
        pass  # not ours to change (e.g. a mounted volume); SQLite still works


class Store(Tables):
    """The gateway's SQLite store. Open with `await Store.open(path)`; close with `close()`."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.inbox = InboxStore(db)
        self.outbox = OutboxStore(db)
        self.sessions = SessionStore(db)
        self.approvals = ApprovalStore(db)
        self.access = AccessStore(db)
        self.cron = CronStore(db)
        self.goals = GoalStore(db)
        self.board = BoardStore(db)
        self.subagents = SubagentStore(db, self.sessions)
        self.learning = LearningStore(db)
        self.documents = DocumentStore(db)
        self.usage = UsageStore(db)
        self.leases = LeaseStore(db)
        self.owners = OwnerStore(db)
        self.upkeep = Upkeep(db)

    @property
    def batches(self) -> int:
        """Group commits so far (the tests read it)."""
        return self.db.batches

    @classmethod
    async def open(cls, path: Path | str, *, url: str | None = None, durability: str = "full", migrate: bool = True,
                   lock_wait: float = LOCK_WAIT, instance: str | None = None) -> "Store":
        """Open (and migrate) the database: the SQLite file at `path`, or with `url` the PostgreSQL database it
        names (`storage.url`; gateway.storage.postgres_engine). `durability` "full" or "normal" (SQLite: see
        the module doc). `migrate` False: a database that needs migrating is refused (`SchemaError`), as is
        always one from a newer chatgate. `lock_wait`: see `gateway.storage.database`. `instance`: the gateway
        instance the store serves, on a database several share (what it writes is known as that one's)."""
        if url is not None:
            from gateway.storage.postgres_engine import open_postgres

            return cls(await open_postgres(url, lock_wait=lock_wait, upgrade=migrate, instance=instance))
        path = Path(path)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _private(path.parent, 0o700)
        synchronous = "FULL" if durability == "full" else "NORMAL"
        old_mask = os.umask(0o077)  # the files SQLite creates (database, -wal, -shm) are the owner's only
        try:
            new = not path.exists() or path.stat().st_size == 0
            pragmas = ["auto_vacuum=INCREMENTAL"] * new  # (only before anything is written: see upkeep)
            pragmas += ["journal_mode=WAL", f"synchronous={synchronous}", "foreign_keys=ON"]
            db = await open_sqlite(str(path), pragmas, functools.partial(schema.migrate, path=str(path),
                                                                          upgrade=migrate), lock_wait=lock_wait)
        finally:
            os.umask(old_mask)
        for suffix in ("", "-wal", "-shm"):
            _private(Path(f"{path}{suffix}"), 0o600)
        return cls(db)

    @property
    def shared(self) -> bool:
        """Whether other gateway instances may use this database (PostgreSQL), or this daemon alone (SQLite: its
        home's lock file keeps any other daemon out)."""
        return self.db.engine.shared

    async def close(self) -> None:
        await self.db.close()

    def health(self) -> dict[str, Any]:
        """Whether writes work now (see `Database.health`)."""
        return self.db.health()

    async def check(self) -> dict[str, Any]:
        """`health()`, checked by a real write when nothing was written lately (see `Database.check`)."""
        return await self.db.check()

    async def until_stored(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """`call`, tried again while the storage refuses it (see `Database.until_stored`)."""
        return await self.db.until_stored(call, what)

    async def backup(self, target: Path) -> None:
        """A consistent copy of the database while it is in use (SQLite's online backup; PostgreSQL's is
        the operator's: pg_dump)."""
        if self.shared:
            raise StorageError("the database is PostgreSQL: back it up with pg_dump")
        async def copy(db: SqliteConnection) -> None:
            async with aiosqlite.connect(target) as to:
                await db.raw.backup(to)

        await self.read(copy)

    async def write(self, work: Callable[[Connection], Awaitable[T]], *, single: bool = False) -> T:
        """Run `work` in the next group commit (see `gateway.storage.database`); its result once durable."""
        return await self.db.write(work, single=single)

    def later(self, work: Work) -> None:
        """Put `work` into the next group commit without waiting (see `gateway.storage.database`)."""
        self.db.later(work)

    async def read(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """Run `work` between group commits (several queries, none of them uncommitted)."""
        return await self.db.read(work)
