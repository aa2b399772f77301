"""`chatgate cron …`: scheduled jobs and their run ledger, with or without the daemon running."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from gateway.cli.state import open_store
from gateway.config import Config


async def cron(config: Config, args: argparse.Namespace) -> int:
    from gateway.cron.jobs import OPERATOR, CronError, CronJobs
    from gateway.cron.ledger import RunLedger, new_instance_id

    async with open_store(config) as store:
        jobs = CronJobs(store.cron, default_tz=config.gateway.timezone, min_interval=config.cron.min_interval_seconds)
        ledger = RunLedger(store.cron, new_instance_id())
        running = bool(await ledger.live_instances(3 * config.gateway.tick_seconds + 5.0))
        try:
            if args.action == "list":
                for job in await jobs.list():
                    print(job.describe())
            elif args.action == "runs":
                job_id = (await jobs.find(args.job)).id if args.job else None
                for run in await store.cron.runs(job_id, args.limit):
                    print(format_run(run))
            elif args.action == "add":
                job = await jobs.create(name=args.name, prompt=args.prompt, schedule=args.schedule, target=args.to,
                                        owner_platform=OPERATOR[0], owner_id=OPERATOR[1], timezone=args.tz,
                                        missed_policy=args.missed, model=args.model)
                print(f"added {job.describe()}")
            else:
                job = await jobs.find(args.job)
                if args.action == "run":
                    await store.cron.queue_run(job.id)
                    print(f"queued a run of #{job.id} {job.name}")
                elif args.action == "remove":
                    await store.cron.remove_job(job.id)
                    print(f"removed #{job.id} {job.name}")
                else:
                    print(f"{args.action}d {(await jobs.set_enabled(job.id, args.action == 'resume')).describe()}")
        except CronError as exc:
            print(f"chatgate cron: {exc}", file=sys.stderr)
            return 1
    if args.action in ("add", "pause", "resume", "remove", "run"):
        print("the running gateway picks this up within a second" if running else
              "note: the gateway is not running; this takes effect when it starts")
    return 0


def format_run(run: dict[str, Any]) -> str:
    when = datetime.fromtimestamp(run["scheduled_at"]).strftime("%Y-%m-%d %H:%M:%S")
    kind = "run now" if run["manual"] else "scheduled"
    line = f"{run['id']:>6}  #{run['job_id']} {run['name'] or '(removed)'}  {when} {kind}: {run['state']}"
    if run["started_at"]:
        line += f", started {run['started_at'] - run['scheduled_at']:+.1f}s"
    if run["platform_message_ids"] and run["platform_message_ids"] != "[]":
        line += f", delivered as {', '.join(json.loads(run['platform_message_ids']))}"
    elif run["delivery"]:
        line += f", delivery {run['delivery']}"
    detail = run["error"] or (run["output"] or "").replace("\n", " ")
    return line + (f" — {detail[:120]}" if detail else "")
