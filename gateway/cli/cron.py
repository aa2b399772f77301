"""`chatgate cron …`: scheduled jobs and their run ledger, with or without the daemon running."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from gateway.cli.state import open_store
from gateway.config import Config


def add_parsers(sub: Any) -> None:
    cron = sub.add_parser("cron", help="scheduled jobs and their run ledger (with or without the daemon running)")
    cron_sub = cron.add_subparsers(dest="action", required=True)
    cron_sub.add_parser("list", help="all jobs")
    add = cron_sub.add_parser("add", help="add a job")
    add.add_argument("name")
    add.add_argument("schedule", help="'every 30m', '0 9 * * 1-5', 'at 2026-12-01T09:00' or 'in 20m'")
    add.add_argument("prompt", help="what the agent does at each run")
    add.add_argument("--to", required=True, metavar="TARGET",
                     help="where results go: platform:chat[:thread] (e.g. telegram:12345) or none")
    add.add_argument("--tz", help="IANA time zone (default: gateway.timezone, else the system's)")
    add.add_argument("--model", help="the model its runs use (default: llm.model)")
    add.add_argument("--missed", choices=["run_once", "skip"], default="run_once",
                     help="a run missed while the gateway was down: run it once when back (default) or skip it")
    for action, what in (("pause", "stop running a job"), ("resume", "run a paused job again, from now on"),
                         ("remove", "delete a job (its ledger stays)"), ("run", "run a job now")):
        cron_sub.add_parser(action, help=what).add_argument("job", help="job number or name")
    runs = cron_sub.add_parser("runs", help="the run ledger, newest first")
    runs.add_argument("job", nargs="?", help="only this job (number or name)")
    runs.add_argument("--limit", type=int, default=20)


async def cron(config: Config, args: argparse.Namespace) -> int:
    from gateway.cron.jobs import OPERATOR, CronError, CronJobs
    from gateway.cron.ledger import RunLedger, new_instance_id

    async with open_store(config) as store:
        jobs = CronJobs(store, default_tz=config.gateway.timezone, min_interval=config.cron.min_interval_seconds)
        ledger = RunLedger(store, new_instance_id())
        running = bool(await ledger.live_instances(3 * config.gateway.tick_seconds + 5.0))
        try:
            if args.action == "list":
                for job in await jobs.list():
                    print(job.describe())
            elif args.action == "runs":
                job_id = (await jobs.find(args.job)).id if args.job else None
                for run in await ledger.runs(job_id, args.limit):
                    print(format_run(run))
            elif args.action == "add":
                job = await jobs.create(name=args.name, prompt=args.prompt, schedule=args.schedule, target=args.to,
                                        owner_platform=OPERATOR[0], owner_id=OPERATOR[1], timezone=args.tz,
                                        missed_policy=args.missed, model=args.model)
                print(f"added {job.describe()}")
            else:
                job = await jobs.find(args.job)
                if args.action == "run":
                    await ledger.request_run(job.id)
                    print(f"queued a run of #{job.id} {job.name}")
                elif args.action == "remove":
                    await jobs.remove(job.id)
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


HANDLERS = {"cron": cron}
