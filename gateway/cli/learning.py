"""`chatgate skills …` and `chatgate curator …`: the skill library and its curator from the shell."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from agent.skills import SkillLibrary, SkillRefused, summary
from gateway.cli.state import with_store
from gateway.config import Config
from gateway.learning.curator import Curator
from gateway.learning.documents import documents_of
from gateway.storage.learning import LearningStore


def _parts(config: Config, store: Any) -> tuple[SkillLibrary, LearningStore, Curator]:
    skills = SkillLibrary(documents_of(store, config.home), store.learning)
    curator = Curator(store.learning, skills, config.home, settings=config.curator)
    return skills, store.learning, curator


@with_store
async def skills(config: Config, store: Any, args: argparse.Namespace) -> int:
    skills, ledger, _ = _parts(config, store)
    try:
        if args.action == "list":
            meta = await ledger.skills()
            for skill in await skills.all():
                row = meta.get(skill.name) or {"provenance": "user", "views": 0}
                print(summary(skill, {**row, "provenance": f"{row['provenance']}, {row.get('state', 'active')}"}))
            for name in await skills.archived():
                print(f"{name} — (archived; `chatgate skills restore {name}`)")
        elif args.action == "pending":
            proposals = await skills.proposals()
            print("\n".join(f"{name} — proposed by {who}" for name, who in proposals) or "No skills waiting.")
        elif args.action in ("accept", "reject"):
            print(await skills.settle(args.name, args.action == "accept", by="admin (cli)"))
        elif args.action == "show":
            skill = await skills.get(args.name)
            if skill is None:
                raise SkillRefused(f"no skill {args.name!r}")
            print(await skills.documents.read(skill.document) or "", end="")
        elif args.action in ("pin", "unpin"):
            if await skills.get(args.name) is None:
                raise SkillRefused(f"no skill {args.name!r}")
            await ledger.pin_skill(args.name, args.action == "pin")
            print(f"{args.action}ned {args.name}")
        elif args.action == "archive":
            print(await skills.archive(args.name))
        else:
            print(await skills.restore(args.name))
    except SkillRefused as exc:
        print(f"chatgate skills: {exc}", file=sys.stderr)
        return 1
    return 0


@with_store
async def curator(config: Config, store: Any, args: argparse.Namespace) -> int:
    _, _, curator = _parts(config, store)
    if args.action == "status":
        due = await curator.next_due()
        print(f"next run due {_when(due)} (then only after {config.curator.min_idle_hours:g} h without activity)"
              + ("" if config.curator.enabled else "; the curator is disabled (curator.enabled)"))
        for run in await curator.learning.curator_runs():
            outcome = run["error"] or f"{len(json.loads(run['changes'] or '[]'))} change(s)"
            print(f"{run['id']}  {'dry run' if run['dry_run'] else 'applied'} ({run['trigger']}): {outcome}")
        return 0
    if args.action == "run":
        result = await curator.run(dry_run=args.dry_run, trigger="cli")
        assert result is not None  # (a run the operator asks for is never another's)
        for change in result.changes:
            print(f"{'would mark' if result.dry_run else 'marked'} {change.skill} {change.after} "
                  f"(unused for {change.unused_days:.0f} days)")
        print(f"{'no changes' if not result.changes else ''}report: {result.report}")
        return 0
    try:
        print(await curator.restore(args.run))
    except ValueError as exc:
        print(f"chatgate curator: {exc}", file=sys.stderr)
        return 1
    return 0


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))


@with_store
async def memory(config: Config, store: Any, args: argparse.Namespace) -> int:
    from agent.memory import Memory, MemoryRefused

    notes = Memory(documents_of(store, config.home))
    if args.action == "pending":
        waiting = await notes.pending()
        print("\n".join(f"{n:>3}  {entry}" for n, entry in enumerate(waiting, 1)) or "No notes waiting.")
        return 0
    try:
        print(await notes.settle(args.number, accept=args.action == "accept"))
    except MemoryRefused as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0
