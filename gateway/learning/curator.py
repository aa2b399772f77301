"""The curator: keeps the skill library tidy, only when nobody is using the gateway.

From the tick, it runs when `curator.interval_hours` have passed since its last run (the first
run one interval after the gateway first started) **and** the gateway has really been idle for
`curator.min_idle_hours`: no inbound message on any platform, no turn, review or scheduled run
going, for that long (`idle_since` says since when). An applied run that changed something is
reported to the admins in their direct chats (`curator.notify_admins`).

The pass is deterministic. Skills the agent or a review created that were not used (viewed or
written) for `stale_days` become *stale*; for `archive_days`, they are archived (moved to
`skills/.archive/`, restorable). Skills a person made (or put in place by hand), pinned skills,
bundled skills and skills a scheduled job's prompt names are never touched. Before it changes
anything it copies the whole `skills/` folder to `logs/curator/<run>/snapshot/` (the last
`keep_snapshots` are kept): documents like the skills (agent.documents: files in the home, or rows of the
database several instances share, so that any instance can restore a run another made). With `curator.consolidate`, an applied run then lets an LLM merge
overlapping skills among those it may touch (`gateway.learning.consolidate`). Every run writes `logs/curator/<run>/REPORT.md`, dry runs too.
`restore <run>` puts a snapshot back (the library it replaces is kept beside it first, as
`logs/curator/<run>/replaced-<time>/`). The report folders and rows of the newest `curator.keep_reports` runs
are kept (`prune_reports`, from the tick).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

from agent.skills import ROOT, SkillLibrary
from gateway.config import CuratorConfig
from gateway.storage.learning import LearningStore

TOUCHABLE = ("agent", "review")
RUNS = "logs/curator"  # the snapshots' documents: RUNS/<run>/snapshot/<what skills/ held>
DAY = 86400.0
CLAIM_SECONDS = 3600.0  # a tick's pass another instance started this recently is not run again


@dataclass(frozen=True, slots=True)
class Change:
    skill: str
    before: str
    after: str  # stale | archived
    unused_days: float


@dataclass(frozen=True, slots=True)
class CuratorRun:
    id: str
    dry_run: bool
    changes: list[Change]
    report: Path


class Curator:
    def __init__(self, learning: LearningStore, skills: SkillLibrary, home: Path, *,
                 settings: CuratorConfig = CuratorConfig(),
                 idle_since: Callable[[], Awaitable[float | None]] | None = None,
                 notify: Callable[[str], Awaitable[None]] | None = None,
                 consolidate: Callable[[list[str]], Awaitable[str]] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.learning = learning  # its runs, and the skills' provenance, usage and state
        self.skills = skills
        self.logs = home / "logs" / "curator"
        self.interval = settings.interval_hours * 3600
        self.min_idle = settings.min_idle_hours * 3600
        self.stale_after = settings.stale_days * DAY
        self.archive_after = settings.archive_days * DAY
        self.keep = settings.keep_snapshots
        self.idle_since = idle_since  # None from it: busy now
        self.notify = notify  # tells the admins what an applied run changed
        self.consolidate = consolidate  # the optional LLM pass over the touchable skills
        self.clock = clock
        self._lock = asyncio.Lock()

    # -- when ------------------------------------------------------------------------------

    async def first_started(self) -> float:
        """When the gateway first started (recorded once)."""
        return await self.learning.first_started_at(self.clock())

    async def next_due(self) -> float:
        last = await self.learning.last_applied_run_start()
        since = last if last is not None else await self.first_started()
        return since + self.interval

    async def tick(self) -> CuratorRun | None:
        """The tick hook: run when due and idle long enough."""
        now = self.clock()
        if now < await self.next_due():
            return None
        idle = await self.idle_since() if self.idle_since is not None else None
        if idle is None or now - idle < self.min_idle:
            return None
        return await self.run(trigger="tick")

    # -- what ------------------------------------------------------------------------------

    async def touchable(self) -> list[str]:
        """Skills the curator may change: written by the agent or a review, not pinned, not named by a job."""
        meta = await self.learning.skills()
        referenced = await self._referenced_by_jobs()
        return [s.name for s in await self.skills.all() if (row := meta.get(s.name)) is not None
                and row["provenance"] in TOUCHABLE and not row["pinned"] and s.name not in referenced]

    async def plan(self) -> list[Change]:
        now = self.clock()
        meta = await self.learning.skills()
        changes = []
        for name in await self.touchable():
            row = meta[name]
            used = max(filter(None, (row["last_used_at"], row["updated_at"], row["created_at"])))
            unused = now - used
            if unused >= self.archive_after:
                changes.append(Change(name, row["state"], "archived", unused / DAY))
            elif unused >= self.stale_after and row["state"] == "active":
                changes.append(Change(name, row["state"], "stale", unused / DAY))
        return changes

    async def _referenced_by_jobs(self) -> set[str]:
        prompts = await self.learning.job_prompts()
        names = {s.name for s in await self.skills.all()}
        return {n for n in names for p in prompts if re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w-])", p)}

    # -- doing -----------------------------------------------------------------------------

    async def run(self, *, dry_run: bool = False, trigger: str = "cli") -> CuratorRun | None:
        """A pass over the skills; None when it is the tick's and another instance's tick took it (within the last
        `CLAIM_SECONDS`: one that failed is tried again after that)."""
        async with self._lock:
            started = self.clock()
            run_id = await self._new_id(started)
            alone_since = started - CLAIM_SECONDS if trigger == "tick" and not dry_run else None
            if not await self.learning.run_started(run_id, started, dry_run, trigger, alone_since=alone_since):
                return None
            error, merged = None, None
            changes = await self.plan()
            try:
                if changes and not dry_run:
                    await self._snapshot(run_id)
                    for change in changes:
                        if change.after == "archived":
                            await self.skills.archive(change.skill)
                        else:
                            await self.learning.set_skill_state(change.skill, "stale")
                if self.consolidate is not None and not dry_run:
                    candidates = await self.touchable()
                    if len(candidates) >= 2:
                        if not changes:
                            await self._snapshot(run_id)
                        merged = await self.consolidate(candidates)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                raise
            finally:
                snapshotted = bool(await self.skills.documents.names(f"{RUNS}/{run_id}/snapshot/"))
                report = await asyncio.to_thread(self._report, run_id, started, dry_run, changes, error, merged,
                                                 snapshotted)
                await self.learning.run_finished(run_id, self.clock(), [_as_dict(c) for c in changes], error)
            if changes and not dry_run and self.notify is not None:
                stale = sum(c.after == "stale" for c in changes)
                await self.notify(f"🧹 Skill curator run {run_id}: {stale} marked stale, {len(changes) - stale} archived "
                                  f"(restorable: chatgate curator restore {run_id}). Report: {report}")
            return CuratorRun(run_id, dry_run, changes, report)

    async def restore(self, run_id: str) -> str:
        """Put the snapshot taken before run `run_id` back; the current library is kept aside first."""
        documents = self.skills.documents
        snapshot = f"{RUNS}/{run_id}/snapshot"
        if not re.fullmatch(r"[\w-]+", run_id) or not await documents.names(snapshot + "/"):
            raise ValueError(f"no snapshot for run {run_id!r}; `chatgate curator status` lists the runs")
        async with self._lock:
            aside = f"{RUNS}/{run_id}/replaced-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(self.clock()))}"
            await documents.move(ROOT, aside)
            await documents.copy(snapshot, ROOT)
            self.skills.changed()
            archived = set(await self.skills.archived())
            for skill in await self.skills.all():
                await self.learning.set_skill_state(skill.name, "active")
            for name in archived:
                await self.learning.set_skill_state(name, "archived")
        return f"restored the skills as they were before run {run_id} (the replaced library is in {aside})"

    async def prune_reports(self, keep: int) -> int:
        """Keep the newest `keep` runs' folders (`logs/curator/<run>/`) and rows; return how many older
        ones went. A run with a snapshot stays (it can be restored; `keep_snapshots` bounds those), and
        so does the latest applied run (the next one is due from it) and one still going."""
        if self._lock.locked():  # a run or a restore is going on: next time
            return 0
        async with self._lock:
            recorded = await self.learning.recorded_runs()
            last = await self.learning.last_applied_run()
            held = {r for r, finished in recorded.items() if not finished} | ({last} if last is not None else set())
            held |= await self._snapshotted()
            gone = await asyncio.to_thread(self._prune_folders, set(recorded), held, max(keep, 1))
            if gone:
                await self.learning.forget_runs(gone)
            return len(gone)

    def _prune_folders(self, recorded: set[str], held: set[str], keep: int) -> list[str]:
        """The run ids beyond the newest `keep` (folders on disk and rows), less those held (those with a
        snapshot among them) and those whose folder has one; their folders removed."""
        folders = {p.name for p in self.logs.iterdir() if p.is_dir()} if self.logs.is_dir() else set()
        runs = sorted((r for r in folders | recorded if _RUN_ID.fullmatch(r)), key=_run_order, reverse=True)
        gone = [r for r in runs[keep:] if r not in held and not (self.logs / r / "snapshot").is_dir()]
        for run_id in gone:
            shutil.rmtree(self.logs / run_id, ignore_errors=True)
        return gone

    # -- files -----------------------------------------------------------------------------

    async def _new_id(self, at: float) -> str:
        base = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at))
        taken = set(await self.learning.recorded_runs())  # (another instance's runs too)
        return await asyncio.to_thread(self._new_folder, base, taken)

    def _new_folder(self, base: str, taken: set[str]) -> str:
        run_id, n = base, 1
        while run_id in taken or (self.logs / run_id).exists():
            n += 1
            run_id = f"{base}-{n}"
        (self.logs / run_id).mkdir(parents=True)
        return run_id

    async def _snapshotted(self) -> set[str]:
        """The runs that have a snapshot."""
        return {parts[2] for parts in (n.split("/") for n in await self.skills.documents.names(f"{RUNS}/"))
                if len(parts) > 4 and parts[3] == "snapshot"}

    async def _snapshot(self, run_id: str) -> None:
        """The skills as they are, copied to the run's snapshot; the older snapshots beyond `keep` removed."""
        documents = self.skills.documents
        await documents.copy(ROOT, f"{RUNS}/{run_id}/snapshot")
        kept = sorted(await self._snapshotted())
        for old in kept[:-self.keep]:
            await documents.delete_all(f"{RUNS}/{old}/snapshot")

    def _report(self, run_id: str, started: float, dry_run: bool, changes: list[Change], error: str | None,
                merged: str | None, snapshotted: bool) -> Path:
        lines = [f"# Curator run {run_id}", "",
                 f"- started: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(started))}",
                 f"- mode: {'dry run (nothing changed)' if dry_run else 'applied'}",
                 f"- snapshot: {'snapshot/' if snapshotted else 'none (nothing changed)'}"]
        if error:
            lines.append(f"- error: {error}")
        lines += ["", "## Changes", ""]
        lines += [f"- `{c.skill}`: {c.before} → {c.after} (unused for {c.unused_days:.0f} days)" for c in changes] \
            or ["- none"]
        if merged is not None:
            lines += ["", "## Consolidation (LLM pass)", "", merged]
        path = self.logs / run_id / "REPORT.md"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path


_RUN_ID = re.compile(r"(\d{8}T\d{6}Z)(?:-(\d+))?")  # what `_new_id` makes


def _run_order(run_id: str) -> tuple[str, int]:
    match = _RUN_ID.fullmatch(run_id)
    assert match is not None
    return match.group(1), int(match.group(2) or 1)


def _as_dict(change: Change) -> dict[str, Any]:
    return {"skill": change.skill, "from": change.before, "to": change.after, "unused_days": round(change.unused_days, 1)}
