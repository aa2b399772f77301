"""The database: group commit over one writing connection, whatever the engine (`Engine`: SQLite through
aiosqlite, gateway.storage.sqlite_engine; PostgreSQL through asyncpg, gateway.storage.postgres_engine).

Whatever touches the database is an async function of a `Connection` (`Work`, gateway.storage.connection).
Each statement is a round trip (to aiosqlite's thread, or to the server), so a unit of work keeps its
awaits few: `fetch` for rows, `executemany` for many rows, `pipelined` for statements that do not wait
for each other, one statement where two would do.

Group commit: the writes of many callers (`write`) share one transaction and one fsync. A writer
takes every unit queued while the previous commit ran, runs them between one BEGIN and one
COMMIT; each caller's await returns only after that commit, so "stored" means durable. A unit
that fails rolls its batch back, and each unit of the batch is then run in a transaction of its
own (the failing one reports its error; the others commit). That holds for whatever a unit raises:
a `CancelledError` of its own is its failure like any other, and no transaction is ever left open
(one left open would refuse every later BEGIN). A unit alone in its batch that is one statement
(`single`) runs in SQLite's autocommit, without BEGIN/COMMIT. While a batch's transaction is open,
reads (`read`) wait for it: they never see what is not committed yet.

Another program's write lock (an operator's `sqlite3` shell in a transaction, a backup tool; on
PostgreSQL, another instance's transaction that the batch deadlocked with) is waited out on the event
loop: the engine says which errors are such a conflict (`Engine.busy`), and a batch that met one is
tried again after a pause, so reads go on meanwhile. A write waits up to `lock_wait` seconds in all, then fails with
`StorageError`, as does a write the database could not do for its own sake (disk full, I/O
error): errors of the storage, not of the data, which the caller may try again later (`until_stored`
does, for work that has nobody to hand the error to: a turn's record). `health()` says which (for
`/readyz`), until a write succeeds again. Only a commit that changed something counts as one: an empty
transaction, or a statement that matched no row, commits on a full disk. So the probe is a real write
(one row of the `health` table, a page appended to the WAL): while writes fail it runs every
`PROBE_SECONDS`, and `check()` (what `/readyz` asks) runs one when nothing was written for that long,
so a disk that filled up while nothing happened is seen too. If the connection itself fails (a
ROLLBACK that fails), every caller of that batch is told and the connection is opened again.

A record whose last moment may be lost at a power loss (token usage) needs no commit of its
own: `later` puts it into the next group commit, or into one of its own after `LATER_SECONDS`
when no other write comes first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Awaitable, Callable, Protocol, TypeVar

from gateway.storage.connection import Connection, Work

log = logging.getLogger(__name__)
T = TypeVar("T")
LATER_SECONDS = 1.0  # the longest a `later` write waits for a group commit to join
LOCK_WAIT = 5.0  # seconds a write waits for another program's lock before it fails (`gateway.lock_wait_seconds`)
PROBE_SECONDS = 2.0  # while writes fail, how often the probe writes; when ready, how old a write `check` trusts
CHECK_WAIT = 1.0  # how long `check` waits for its probe (one that waits for a lock longer says `locked`)
_RETRY_PAUSES = (0.25, 0.5, 1.0, 2.0, 4.0)  # `until_stored`: before the next try, then until writes work
_RETRY_LONGEST = 60.0  # (or this long: a write refused while the probe succeeds is still tried again)
_PAUSES = (0.02, 0.05, 0.1, 0.2, 0.4)  # between tries of a batch that found the database locked


class StorageError(RuntimeError):
    """The database could not do it for its own sake (locked by another program for too long, disk
    full, an I/O error, its connection lost), not because of the data: it was not stored, and the
    same write may work later."""


class SchemaError(RuntimeError):
    """The database's schema is not one this chatgate can use (said in one line)."""


class EngineConnection(Connection, Protocol):
    """A connection as the group commit drives it: its transaction, and how much it changed."""

    async def begin(self) -> None: ...

    async def commit(self) -> None: ...

    async def rollback(self) -> None:
        """Roll back what is open (nothing when nothing is); an error here is the connection's."""

    async def close(self) -> None: ...

    def changes(self) -> int | None:
        """Rows changed on this connection so far (None: the engine does not count them)."""


class Engine(Protocol):
    """What the group commit needs of an engine: a connection (the first at open, another after one
    failed), and which of its errors are the storage's (`fault`) and, of those, a conflict with another
    writer that passes (`busy`: a lock held, a deadlock broken)."""

    dialect: ModuleType
    shared: bool  # other gateway instances may use the database (PostgreSQL); False: this daemon alone (SQLite)

    async def connect(self) -> EngineConnection: ...

    def busy(self, exc: BaseException) -> bool: ...

    def fault(self, exc: BaseException) -> bool: ...

    def describe_busy(self) -> str: ...


def storage_error(engine: Engine, exc: BaseException, lock_wait: float = LOCK_WAIT) -> BaseException:
    """`exc` as a `StorageError` when it is the storage's fault; otherwise `exc` itself."""
    if isinstance(exc, StorageError) or not engine.fault(exc):
        return exc
    if engine.busy(exc):
        wrapped = StorageError(f"{engine.describe_busy()} (for over {lock_wait:g}s)")
    else:
        wrapped = StorageError(f"the database failed: {exc}")
    wrapped.__cause__ = exc
    return wrapped


@dataclass(slots=True)
class _Unit:
    work: Work
    single: bool  # one statement: alone in its batch it needs no BEGIN/COMMIT
    done: asyncio.Future[Any]
    since: float = field(default_factory=time.monotonic)  # queued at


Outcome = tuple[bool, Any]  # (committed, its result or its error)


def _retrieved(done: asyncio.Future[Any]) -> None:
    """A write whose caller was cancelled: its outcome is not an unhandled error."""
    if not done.cancelled():
        done.exception()


def _logged(done: asyncio.Future[Any]) -> None:
    """A `later` write has no caller waiting: a failure is logged."""
    if not done.cancelled() and done.exception() is not None:
        log.warning("a deferred write failed: %s", done.exception())


async def _rollback(conn: EngineConnection) -> None:
    """Roll back what is open; an error here is the connection's, and leaves `_commit`. (SQLite: asked on
    the connection's thread, after what is queued there: a statement of a cancelled unit may still run.)"""
    await conn.rollback()


def _failure(exc: BaseException) -> Exception:
    """What a unit's caller is told of what the unit raised (after the rollback). A `CancelledError` the
    unit raised of its own, the writer not being cancelled, is its failure like any other; the writer's
    own cancellation (closing) and an interpreter that exits go on up."""
    if isinstance(exc, Exception):
        return exc
    task = asyncio.current_task()
    if isinstance(exc, asyncio.CancelledError) and task is not None and not task.cancelling():
        failed = RuntimeError("the write's unit was cancelled inside its transaction; it was not stored")
        failed.__cause__ = exc
        return failed
    raise exc


async def _alone(conn: EngineConnection, unit: _Unit) -> Outcome:
    """One unit in a transaction of its own (in autocommit when it is `single`)."""
    try:
        if unit.single:
            return True, await unit.work(conn)
        await conn.begin()
        result = await unit.work(conn)
        await conn.commit()
        return True, result
    except BaseException as exc:
        await _rollback(conn)
        return False, _failure(exc)


async def _commit(engine: Engine, conn: EngineConnection, batch: list[_Unit], out: list[Outcome]) -> None:
    """The batch in one transaction, or unit by unit when one fails; each unit's outcome is
    appended to `out`. The database locked: every unit gets the busy error (none ran). An
    exception left is the connection's: the units without an outcome were not stored."""
    if len(batch) == 1:
        out.append(await _alone(conn, batch[0]))
        return
    try:
        await conn.begin()
        results = [await unit.work(conn) for unit in batch]
        await conn.commit()
    except BaseException as raised:
        await _rollback(conn)
        exc = _failure(raised)
        if engine.busy(exc):
            out.extend((False, exc) for _ in batch)
            return
        log.warning("a group commit of %d writes failed (%s); committing them one by one", len(batch), exc)
        for unit in batch:
            out.append(await _alone(conn, unit))
        return
    out.extend((True, result) for result in results)


async def _close_quietly(conn: EngineConnection) -> None:
    """Close a connection that failed (its own error on the way is of no more use)."""
    try:
        await conn.close()
    except Exception as exc:
        log.debug("closing the failed connection: %s", exc)


async def _probe_write(conn: Connection) -> None:
    """The probe: one row written (a page appended to the WAL), which a full disk refuses; an empty
    transaction would commit there (it writes nothing)."""
    await conn.execute("INSERT INTO health (id, probed_at) VALUES (1, ?)"
                       " ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at", time.time())


class Database:
    """The group commit over `engine`'s connection `conn` (opened by the engine: `open_sqlite`,
    `open_postgres`); close with `close()`."""

    def __init__(self, engine: Engine, conn: EngineConnection, lock_wait: float = LOCK_WAIT) -> None:
        self.lock_wait = lock_wait
        self.engine = engine
        self.dialect = engine.dialect
        self._conn: EngineConnection | None = conn  # None: it failed; opened again at the next use
        self._gate = asyncio.Lock()  # held by a batch (its transaction open) and by a read
        self._queued: list[_Unit] = []
        self._later: list[_Unit] = []  # `later` writes: they join the next group commit
        self._later_timer: asyncio.TimerHandle | None = None
        self._probe_timer: asyncio.TimerHandle | None = None
        self._writer: asyncio.Task[None] | None = None
        self._health: tuple[str, float, str | None] = ("ready", time.time(), None)
        self._ready = asyncio.Event()  # set while `_health` is ready (`until_stored` waits for it)
        self._ready.set()
        self._written_at = float("-inf")  # (monotonic) the last commit that changed something
        self._checking: asyncio.Future[Any] | None = None  # `check`'s probe in flight
        self.waiting = 0  # callers of `until_stored` waiting for the database to take their write
        self._closed = False
        self.batches = 0  # group commits so far (the tests read it)

    async def close(self) -> None:
        self._closed = True  # (no more probes)
        if self._probe_timer is not None:
            self._probe_timer.cancel()
        self._flush_later()
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        async with self._gate:
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.close()

    def health(self) -> dict[str, Any]:
        """Whether writes work: `ready`, `locked` (waiting for another program's lock) or `failing`
        (the last write failed for the storage's sake), since when, and why; and how many callers wait
        for it to take their write (`until_stored`: a turn's answer held in memory)."""
        state, since, error = self._health
        return {"state": state, "since": round(since, 3), "error": error, "waiting": self.waiting}

    async def check(self) -> dict[str, Any]:
        """`health()`, made true by a real write when it says ready but nothing was written for
        `PROBE_SECONDS` (a disk that filled up with no traffic): one probe at a time, waited for up to
        `CHECK_WAIT` seconds (a probe that waits for another program's lock says `locked` meanwhile)."""
        stale = time.monotonic() - self._written_at > PROBE_SECONDS
        if self._health[0] == "ready" and stale and not self._closed:
            if self._checking is None or self._checking.done():
                self._checking = self._queue_probe()
            await asyncio.wait({self._checking}, timeout=CHECK_WAIT)
        return self.health()

    async def writable(self, longest: float) -> None:
        """Return once writes work (`health` ready), or after `longest` seconds."""
        try:
            await asyncio.wait_for(self._ready.wait(), longest)
        except TimeoutError:
            pass

    async def until_stored(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """`call` (a write, with the reads around it) tried again until it is not refused for the storage's
        sake: a `StorageError` is waited out (a pause, growing, then until writes work again), never
        raised. For work whose caller has nobody to hand the error to and must not lose it (a turn's
        record, its reply held in memory meanwhile); `what` names it in the log. Cancelling ends it."""
        tries = 0
        try:
            while True:
                try:
                    result = await call()
                except StorageError as exc:
                    if self._closed:
                        raise
                    if not tries:
                        self.waiting += 1
                        log.warning("%s waits for the database to take it (%s)", what, exc)
                    await asyncio.sleep(_RETRY_PAUSES[min(tries, len(_RETRY_PAUSES) - 1)])
                    await self.writable(_RETRY_LONGEST)
                    tries += 1
                    continue
                if tries:
                    log.info("%s: the database took it after %d tries", what, tries + 1)
                return result
        finally:
            self.waiting -= bool(tries)

    async def _connection(self) -> EngineConnection:
        """The connection, opened again if it failed (under the gate)."""
        if self._conn is None:
            if self._closed:
                raise StorageError("the store is closed")
            self._conn = await self.engine.connect()
            log.warning("the database connection was opened again")
        return self._conn

    async def read(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """Run `work` between group commits; for reads, and for writes that must not wait for one. Whatever
        it raises, it leaves no transaction open; a failure of the storage's is said in `health()`."""
        async with self._gate:
            try:
                conn = await self._connection()
                try:
                    return await work(conn)
                except BaseException:
                    try:
                        await _rollback(conn)
                    except Exception:  # the connection failed (PostgreSQL's lost): the next use opens another
                        self._conn = None
                        await _close_quietly(conn)
                        raise
                    raise
            except Exception as exc:
                wrapped = storage_error(self.engine, exc, self.lock_wait)
                if wrapped is exc:
                    raise
                if not self.engine.busy(exc):  # (a read refused for a lock is no news of writes)
                    self._set_health("failing", str(wrapped))
                raise wrapped from exc

    async def write(self, work: Callable[[Connection], Awaitable[T]], *, single: bool = False) -> T:
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

    async def _trip(self, batch: list[_Unit], out: list[Outcome]) -> bool:
        """Commit `batch`, each unit's outcome appended to `out`; whether it changed anything. A connection
        that fails is closed (every unit left without an outcome gets a `StorageError`) and opened again
        at the next use."""
        async with self._gate:
            try:
                conn = await self._connection()
                changes = conn.changes()
                await _commit(self.engine, conn, batch, out)
                after = conn.changes()
                return any(ok for ok, _ in out) if changes is None or after is None else after > changes
            except Exception as exc:
                log.error("the database connection failed (%s); opening it again", exc)
                failed = StorageError(f"the database connection failed ({exc}); it was not stored")
                failed.__cause__ = exc
                out.extend((False, failed) for _ in batch[len(out):])
                conn, self._conn = self._conn, None
                if conn is not None:
                    await _close_quietly(conn)  # (the engine rolls back what was left open)
        return False

    async def _write_batches(self) -> None:
        tries = 0  # of a batch that found the database locked
        while self._queued or self._later:
            if self._later_timer is not None:
                self._later_timer.cancel()
                self._later_timer = None
            batch, self._queued, self._later = [*self._later, *self._queued], [], []
            self.batches += 1
            outcomes: list[Outcome] = []
            trip = asyncio.ensure_future(self._trip(batch, outcomes))
            try:
                wrote = await asyncio.shield(trip)
            except asyncio.CancelledError:  # closing: the batch still ends (its transaction too)
                await asyncio.gather(trip, return_exceptions=True)
                closed = StorageError("the store closed before this was committed")
                outcomes += [(False, closed)] * (len(batch) - len(outcomes))
                self._queued = [*self._settle(batch, outcomes, closing=True), *self._queued]
                self._close_queue()
                raise
            again = self._settle(batch, outcomes, wrote=wrote)
            if again:  # locked: the same units first in the next batch, after a pause off the thread
                self._queued = [*again, *self._queued]
                try:
                    await asyncio.sleep(_PAUSES[min(tries, len(_PAUSES) - 1)])
                except asyncio.CancelledError:
                    self._close_queue()
                    raise
                tries += 1
            else:
                tries = 0

    def _close_queue(self) -> None:
        """Closing: every write still queued is told it was not committed."""
        left, self._queued, self._later = [*self._later, *self._queued], [], []
        closed = StorageError("the store closed before this was committed")
        self._settle(left, [(False, closed)] * len(left), closing=True)

    def _settle(self, batch: list[_Unit], outcomes: list[Outcome], *, closing: bool = False,
                wrote: bool = False) -> list[_Unit]:
        """Tell each caller its outcome; return the units that found the database locked and may
        wait longer (`lock_wait`; when `closing`, those are returned whatever their wait). `wrote`: the
        batch changed something (only that shows writes work: see the module doc)."""
        again: list[_Unit] = []
        now = time.monotonic()
        trouble: str | None = None
        for unit, (ok, value) in zip(batch, outcomes):
            if not ok and self.engine.busy(value) and (closing or now - unit.since < self.lock_wait):
                again.append(unit)
                continue
            if not ok:
                value = storage_error(self.engine, value, self.lock_wait)
                if isinstance(value, StorageError) and not closing:
                    trouble = str(value)
            if unit.done.done():
                continue
            if ok:
                unit.done.set_result(value)
            else:
                unit.done.set_exception(value)
        if trouble is not None:
            self._set_health("failing", trouble)
        elif again and self._health[0] == "ready":  # (failing stays failing until a write works)
            self._set_health("locked", "another program holds the database's write lock; writes wait for it "
                                       f"up to {self.lock_wait:g}s")
        elif wrote and any(ok for ok, _ in outcomes):
            self._written_at = time.monotonic()
            self._set_health("ready", None)
        return again

    def _set_health(self, state: str, error: str | None) -> None:
        if (state, error) == self._health[::2]:
            return
        if state == "ready":
            log.info("the database takes writes again")
        elif state == "failing":
            log.error("a write failed for the database's sake: %s", error)
        else:
            log.warning("the database is locked by another program; writes wait up to %gs", self.lock_wait)
        self._health = (state, time.time(), error)
        if state == "ready":
            self._ready.set()
        else:
            self._ready.clear()
        if state != "ready" and self._probe_timer is None and not self._closed:
            self._probe_timer = asyncio.get_running_loop().call_later(PROBE_SECONDS, self._probe)

    def _probe(self) -> None:
        """While writes do not work: a probe write, so the state clears without other traffic."""
        self._probe_timer = None
        if self._health[0] == "ready" or self._closed:
            return
        if not self._queued:
            self._queue_probe()
        self._probe_timer = asyncio.get_running_loop().call_later(PROBE_SECONDS, self._probe)

    def _queue_probe(self) -> asyncio.Future[Any]:
        """Queue the probe write (see the module doc); its outcome goes to `health()`."""
        unit = _Unit(_probe_write, True, asyncio.get_running_loop().create_future())
        unit.done.add_done_callback(_retrieved)
        self._queued.append(unit)
        self._start_writer()
        return unit.done
