"""`chatgate cron …`: scheduled jobs and their run ledger."""

from __future__ import annotations

from typing import Any

from gateway.cli.dispatch import handled_by


def add_parsers(sub: Any) -> None:
    cron = sub.add_parser("cron", help="scheduled jobs and their run ledger (with or without the daemon running)")
    handled_by(cron, "gateway.cli.cron:cron")
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
