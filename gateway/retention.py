"""Retention: what the tick forgets, and the space the database gives back.

Every tick, each step on its own (one that fails is logged; the others still run):

- finished inbox and outbox rows and dead letters older than `gateway.retention_days`;
- approvals decided that long ago, with their events (a session grant stays while its session is active);
- subagent runs that ended that long ago, each with its transcript;
- each scheduled job's ledger beyond its newest `cron.keep_runs` rows, each run with its transcript (only
  final rows; each job's newest stays);
- token usage older than that (at least two days), rolled up into daily sums (`gateway.usage`);
- compression summaries a later one replaced, review counters of sessions that ended;
- with `gateway.transcript_retention_days`: sessions that ended and were not touched for that long, with
  their messages, search index rows, summaries and counters (`SessionStore.prune_ended`; off by default);
- curator runs beyond the newest `curator.keep_reports`; with `trajectories.retention_days`, older
  trajectory day files;
- files people sent and copies made to send (`files/`, `outgoing/`) older than `gateway.retention_days`.

Giving space back (`gateway.storage.upkeep`): after pruning, the free pages are handed back to the file
system, `RECLAIM_PAGES` per trip (other work goes between), and a WAL checkpoint lets the file shrink (as
far as readers in other processes allow at that moment: it does not wait for them). A database an older
chatgate made (without incremental vacuum) needs one VACUUM to switch, which rewrites the whole file
while every other use of the database waits and needs free disk for a second copy. Up to
`SWITCH_NOW_BYTES` that is a fraction of a second and is done at the first tick; a larger database is
switched at the first quiet moment — nothing going on (no message, turn, review or scheduled run) for
`QUIET_SECONDS` — when the disk has room for the copy, and the log says so until then.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from gateway.chat.files import OUTGOING, prune_files
from gateway.learning import trajectories
from gateway.storage.database import StorageError

if TYPE_CHECKING:
    from gateway.config import Config
    from gateway.cron.ledger import RunLedger
    from gateway.learning.curator import Curator
    from gateway.storage.approvals import ApprovalStore
    from gateway.storage.inbox import InboxStore
    from gateway.storage.sessions import SessionStore
    from gateway.storage.subagents import SubagentStore
    from gateway.storage.upkeep import Upkeep
    from gateway.usage import UsageLedger

log = logging.getLogger(__name__)

DAY = 86400.0
RECLAIM_PAGES = 2000  # free pages handed back per trip
SWITCH_NOW_BYTES = 64 * 1024 * 1024  # a database up to this size is switched to incremental vacuum at once
QUIET_SECONDS = 900.0  # a larger one waits for this long without anything going on
RETRY_SECONDS = 3600.0  # after a switch that failed (a lock held elsewhere, a full disk)


class Retention:
    """Each group of tables (and the ledgers and reports over them) prunes its own rows; this says when and
    how far, and then gives the space back through `upkeep`."""

    def __init__(self, config: "Config", *, inbox: "InboxStore", sessions: "SessionStore",
                 approvals: "ApprovalStore", subagents: "SubagentStore", usage: "UsageLedger", ledger: "RunLedger",
                 curator: "Curator", upkeep: "Upkeep",
                 idle_since: Callable[[], Awaitable[float | None]] | None = None) -> None:
        self.config = config
        self.inbox, self.sessions, self.approvals, self.subagents = inbox, sessions, approvals, subagents
        self.usage, self.ledger, self.curator = usage, ledger, curator
        self.upkeep = upkeep
        self.idle_since = idle_since  # None from it: busy now
        self._switch_after = 0.0
        self._said_waiting = False

    async def tick(self) -> dict[str, int]:
        """Prune everything due (see the module doc), then give the space back; return what went."""
        cfg = self.config
        before = time.time() - cfg.gateway.retention_days * DAY
        steps: dict[str, Callable[[], Awaitable[Any]]] = {  # (files first: a storage error stops the rest)
            "received and outgoing files": lambda: self._prune_files(before),
            "scheduled runs": lambda: self.ledger.prune(cfg.cron.keep_runs),
            "inbox and outbox rows": lambda: self.inbox.prune(before),
            "approvals": lambda: self.approvals.prune(before),
            "subagent runs": lambda: self.subagents.prune(before),
            "token usage rows": lambda: self.usage.roll_up(cfg.gateway.retention_days),
            "summaries and counters": lambda: self.sessions.prune_leftovers(before),
            "curator runs": lambda: self.curator.prune_reports(cfg.curator.keep_reports),
        }
        if cfg.gateway.transcript_retention_days is not None:
            steps["transcripts"] = lambda: self.sessions.prune_ended(
                time.time() - cfg.gateway.transcript_retention_days * DAY)
        if cfg.trajectories.retention_days is not None:
            steps["trajectory files"] = lambda: asyncio.to_thread(
                trajectories.prune, cfg.home / "trajectories", cfg.trajectories.retention_days)
        gone: dict[str, int] = {}
        for name, step in steps.items():
            try:
                result = await step()
            except StorageError as exc:  # locked by another program, disk full: the next tick tries again
                log.warning("pruning %s: %s; the rest waits for the next tick", name, exc)
                return gone
            except Exception:
                log.exception("pruning %s failed", name)
                continue
            gone[name] = sum(result) if isinstance(result, tuple) else int(result)
        if any(gone.values()):
            log.info("pruned %s", ", ".join(f"{n} {name}" for name, n in gone.items() if n))
        try:
            gone["pages"] = await self.reclaim()
        except Exception as exc:  # (a lock another program holds, a full disk: next tick)
            log.warning("could not give the database's free space back: %s", exc)
        return gone

    async def _prune_files(self, before: float) -> int:
        folders = [self.config.home / name for name in ("files", OUTGOING)]
        folders = [folder for folder in folders if folder.is_dir()]  # (no worker thread for nothing to do)
        return sum([await asyncio.to_thread(prune_files, folder, before) for folder in folders])

    async def reclaim(self) -> int:
        """Hand the database's free pages back to the file system; return how many went."""
        space = await self.upkeep.space()
        if not space.incremental:
            await self._switch(space.size)
            return 0
        reclaimed, free = 0, space.free_pages
        while free:
            left = await self.upkeep.give_back(RECLAIM_PAGES)
            if left >= free:
                break
            reclaimed, free = reclaimed + free - left, left
        if reclaimed:
            await self.upkeep.checkpoint()
        return reclaimed

    async def _switch(self, size: int) -> None:
        """The one VACUUM that turns on incremental vacuum (see the module doc for when)."""
        now = time.time()
        if now < self._switch_after:
            return
        if size > SWITCH_NOW_BYTES:
            idle = await self.idle_since() if self.idle_since is not None else None
            free_disk = shutil.disk_usage(self.config.db_path.parent).free
            if idle is None or now - idle < QUIET_SECONDS or free_disk < 2 * size:
                if not self._said_waiting:
                    self._said_waiting = True
                    log.info("the database (%d MiB) will be compacted once, to give space back after pruning, at "
                             "the first %d quiet minutes with %d MiB free on its disk (%d MiB free now)",
                             size >> 20, QUIET_SECONDS // 60, 2 * size >> 20, free_disk >> 20)
                return
        started = time.monotonic()
        try:
            await self.upkeep.switch_to_incremental()
        except Exception as exc:
            self._switch_after = now + RETRY_SECONDS
            log.warning("could not compact the database to give space back (tried again in an hour): %s", exc)
            return
        if size > SWITCH_NOW_BYTES:
            log.info("the database was compacted once (%d MiB, %.1fs): pruning gives space back from now on",
                     size >> 20, time.monotonic() - started)
