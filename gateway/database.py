"""The database thread: one SQLite connection, used only from one thread of its own.

Whatever touches the database is a plain function of the connection (`Work`), run on that
thread: a unit of work is one trip from the event loop however many statements it has, and it
cannot wait on anything else while it holds the database. Each trip is a hand-over between
threads that costs about as much CPU as sixty small statements (some 60 µs here), so the number
of trips, not of statements, is what a turn pays for.

Group commit: the writes of many callers (`write`) share one trip, one transaction and one
fsync. A writer takes every unit queued while the previous commit ran, runs them in one
transaction and commits; each caller's await returns only after that commit, so "stored"
means durable. A unit that fails rolls its batch back, and each unit of the batch is then run
in a transaction of its own in the same trip (the failing one reports its error; the others
commit). A unit alone in its batch that is one statement (`single`) runs in SQLite's
autocommit, without BEGIN/COMMIT.

A record whose last moment may be lost at a power loss (token usage) needs no commit of its
own: `later` puts it into the next group commit, or into one of its own after `LATER_SECONDS`
when no other write comes first.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
Work = Callable[[sqlite3.Connection], Any]
LATER_SECONDS = 1.0  # the longest a `later` write waits for a group commit to join


@dataclass(slots=True)
class _Unit:
    work: Work
    single: bool  # one statement: alone in its batch it needs no BEGIN/COMMIT
    done: asyncio.Future[Any]


def _retrieved(done: asyncio.Future[Any]) -> None:
    """A write whose caller was cancelled: its outcome is not an unhandled error."""
    if not done.cancelled():
        done.exception()


def _logged(done: asyncio.Future[Any]) -> None:
    """A `later` write has no caller waiting: a failure is logged."""
    if not done.cancelled() and done.exception() is not None:
        log.warning("a deferred write failed: %s", done.exception())


def _alone(conn: sqlite3.Connection, unit: _Unit) -> tuple[bool, Any]:
    """(committed, result or error) of one unit in a transaction of its own."""
    try:
        if unit.single:
            return True, unit.work(conn)
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = unit.work(conn)
        except BaseException:
            conn.rollback()
            raise
        conn.execute("COMMIT")
        return True, result
    except Exception as exc:
        return False, exc


def _commit(conn: sqlite3.Connection, batch: list[_Unit]) -> list[tuple[bool, Any]]:
    """On the database thread: the batch in one transaction, or unit by unit when one fails."""
    if len(batch) == 1:
        return [_alone(conn, batch[0])]
    try:
        conn.execute("BEGIN IMMEDIATE")
        results = [unit.work(conn) for unit in batch]
        conn.execute("COMMIT")
        return [(True, result) for result in results]
    except Exception as exc:
        if conn.in_transaction:
            conn.rollback()
        log.warning("a group commit of %d writes failed (%s); committing them one by one", len(batch), exc)
        return [_alone(conn, unit) for unit in batch]


class Database:
    """Open with `await Database.open(path, pragmas)`; close with `close()`."""

    def __init__(self, conn: sqlite3.Connection, thread: ThreadPoolExecutor) -> None:
        self._conn = conn
        self._thread = thread
        self._queued: list[_Unit] = []
        self._later: list[_Unit] = []  # `later` writes: they join the next group commit
        self._later_timer: asyncio.TimerHandle | None = None
        self._writer: asyncio.Task[None] | None = None
        self.batches = 0  # group commits so far (the tests read it)

    @classmethod
    async def open(cls, path: str, pragmas: list[str]) -> "Database":
        thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="database")

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(path, isolation_level=None)  # transactions are ours: BEGIN/COMMIT
            conn.row_factory = sqlite3.Row
            for pragma in pragmas:
                conn.execute(f"PRAGMA {pragma}")
            return conn

        try:
            conn = await asyncio.get_running_loop().run_in_executor(thread, connect)
        except BaseException:
            thread.shutdown(wait=False)
            raise
        return cls(conn, thread)

    async def close(self) -> None:
        self._flush_later()
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        await self.read(lambda conn: conn.close())
        self._thread.shutdown(wait=False)

    async def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` on the database thread (one trip); for reads, and for writes that must not
        wait for a group commit (migrations)."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, work, self._conn)

    async def write(self, work: Callable[[sqlite3.Connection], T], *, single: bool = False) -> T:
        """Run `work` (statements, no BEGIN/COMMIT of its own) in the next group commit; return its
        result once committed. `single`: it is one statement. A caller that is cancelled meanwhile
        does not cancel the write."""
        unit = _Unit(work, single, asyncio.get_running_loop().create_future())
        unit.done.add_done_callback(_retrieved)
        self._queued.append(unit)
        self._start_writer()
        return await asyncio.shield(unit.done)

    def later(self, work: Work) -> None:
        """Put `work` into the next group commit, without waiting for it (see the module doc)."""
        loop = asyncio.get_running_loop()
        unit = _Unit(work, False, loop.create_future())
        unit.done.add_done_callback(_logged)
        self._later.append(unit)
        if self._later_timer is None:
            self._later_timer = loop.call_later(LATER_SECONDS, self._flush_later)

    def _flush_later(self) -> None:
        """No group commit came for the `later` writes in time: they get one."""
        if self._later:
            self._start_writer()

    def _start_writer(self) -> None:
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_batches(), name="group-commit")

    async def _write_batches(self) -> None:
        while self._queued or self._later:
            if self._later_timer is not None:
                self._later_timer.cancel()
                self._later_timer = None
            batch, self._queued, self._later = [*self._later, *self._queued], [], []
            self.batches += 1
            trip = asyncio.get_running_loop().run_in_executor(self._thread, _commit, self._conn, batch)
            try:
                outcomes = await asyncio.shield(trip)
            except asyncio.CancelledError:  # closing: the trip still ends on the database thread
                _settle(batch, await trip)
                left, self._queued, self._later = [*self._later, *self._queued], [], []
                closed = RuntimeError("the store closed before this was committed")
                _settle(left, [(False, closed)] * len(left))
                raise
            _settle(batch, outcomes)


def _settle(batch: list[_Unit], outcomes: list[tuple[bool, Any]]) -> None:
    for unit, (ok, value) in zip(batch, outcomes):
        if unit.done.done():
            continue
        if ok:
            unit.done.set_result(value)
        else:
            unit.done.set_exception(value)
