"""The `chatgate` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, AsyncIterator, Sequence

from gateway import cli_learning
from gateway.config import Config, ConfigError, load_config
from gateway.logs import setup_logging

log = logging.getLogger("chatgate")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chatgate", description="One AI agent in your chats.")
    parser.add_argument("--config", help="config file (default: $CHATGATE_HOME/config.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="run the gateway in the foreground")
    sub.add_parser("doctor", help="check the configuration, the LLM endpoint and the tokens")
    sessions = sub.add_parser("sessions", help="list or search conversations")
    sessions_sub = sessions.add_subparsers(dest="action", required=True)
    listing = sessions_sub.add_parser("list", help="recent sessions")
    listing.add_argument("--limit", type=int, default=20)
    search = sessions_sub.add_parser("search", help="full-text search in transcripts")
    search.add_argument("query")
    search.add_argument("--platform", required=True)
    search.add_argument("--user", required=True)
    approvals = sub.add_parser("approvals", help="the command safety check and 'always allow' rules")
    approvals_sub = approvals.add_subparsers(dest="action", required=True)
    check = approvals_sub.add_parser("check", help="classify a shell command: hardline, dangerous or safe (JSON)")
    check.add_argument("shell_command")
    rules = approvals_sub.add_parser("rules", help="list or remove 'always allow' rules")
    rules.add_argument("rules_action", choices=["list", "remove"])
    rules.add_argument("rule_id", nargs="?", type=int)
    _cron_parser(sub)
    cli_learning.add_parsers(sub)
    pair = sub.add_parser("pair", help="admit people who asked for access in a DM")
    pair_sub = pair.add_subparsers(dest="action", required=True)
    pair_sub.add_parser("list", help="pending codes and approved people")
    approve = pair_sub.add_parser("approve", help="admit the person who was given CODE")
    approve.add_argument("platform")
    approve.add_argument("code")
    revoke = pair_sub.add_parser("revoke", help="remove an approved person")
    revoke.add_argument("platform")
    revoke.add_argument("user_id")
    return parser


def _cron_parser(sub: Any) -> None:
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
    add.add_argument("--missed", choices=["run_once", "skip"], default="run_once",
                     help="a run missed while the gateway was down: run it once when back (default) or skip it")
    for action, what in (("pause", "stop running a job"), ("resume", "run a paused job again, from now on"),
                         ("remove", "delete a job (its ledger stays)"), ("run", "run a job now")):
        cron_sub.add_parser(action, help=what).add_argument("job", help="job number or name")
    runs = cron_sub.add_parser("runs", help="the run ledger, newest first")
    runs.add_argument("job", nargs="?", help="only this job (number or name)")
    runs.add_argument("--limit", type=int, default=20)


async def _run(config: Config) -> int:
    from gateway.runner import GatewayRunner

    runner = GatewayRunner(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await runner.start()
    except (OSError, RuntimeError) as exc:
        print(f"chatgate cannot start: {exc}", file=sys.stderr)
        await runner.stop()
        return 1
    print(f"chatgate is running: open http://{config.http.host}:{runner.http.port}/ (Ctrl-C stops)", flush=True)
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(runner.failed.wait())]
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waiters:
        waiter.cancel()
    log.info("stopping: finishing running turns (up to %.0fs)", config.gateway.drain_seconds)
    await runner.stop()
    if runner.failure:
        print(f"chatgate stopped: {runner.failure}", file=sys.stderr)
        return 1
    return 0


async def _doctor(config: Config) -> int:
    from gateway.doctor import run_doctor

    lines: list[str] = []
    ok = await run_doctor(config, lines)
    print("\n".join(lines))
    print("all good" if ok else "problems found")
    return 0 if ok else 1


def _check_command(command: str) -> int:
    from agent.command_guard import classify

    print(json.dumps(classify(command).as_dict()))
    return 0


@asynccontextmanager
async def _open_store(config: Config) -> AsyncIterator[Any]:
    """The daemon's database, opened beside a running daemon or without one (WAL allows both)."""
    from gateway.store import Store

    store = await Store.open(config.db_path)
    try:
        yield store
    finally:
        await store.close()


async def _rules(config: Config, args: argparse.Namespace) -> int:
    async with _open_store(config) as store:
        if args.rules_action == "remove":
            if args.rule_id is None:
                print("usage: chatgate approvals rules remove RULE_ID", file=sys.stderr)
                return 2
            async with store.tx() as db:
                cur = await db.execute("DELETE FROM approval_rules WHERE id = ?", (args.rule_id,))
            if not cur.rowcount:
                print(f"no rule {args.rule_id}", file=sys.stderr)
                return 1
            print(f"removed rule {args.rule_id}")
            return 0
        for rule in await store.fetch_all("SELECT * FROM approval_rules ORDER BY id"):
            when = datetime.fromtimestamp(rule["created_at"]).strftime("%Y-%m-%d %H:%M")
            print(f"{rule['id']:>4}  {rule['kind']:<8} {when}  by {rule['created_by']}: {rule['subject']}")
    return 0


async def _pair(config: Config, args: argparse.Namespace) -> int:
    from gateway.pairing import Pairing

    async with _open_store(config) as store:
        pairing = Pairing(store)
        if args.action == "approve":
            admitted = await pairing.approve(args.platform, args.code)
            if admitted is None:
                print(f"no pending {args.platform} code {args.code.upper()} (wrong, or expired after an hour)",
                      file=sys.stderr)
                return 1
            print(f"approved {admitted.user_name or admitted.user_id} ({args.platform} user {admitted.user_id})")
        elif args.action == "revoke":
            if not await pairing.revoke(args.platform, args.user_id):
                print(f"{args.platform} user {args.user_id} was not approved", file=sys.stderr)
                return 1
            print(f"revoked {args.platform} user {args.user_id}")
        else:
            for code in await pairing.pending():
                left = (code.expires_at - datetime.now().timestamp()) / 60
                print(f"pending   {code.platform:<9} {code.code}  {code.user_name} ({code.user_id}), {left:.0f} min left")
            for platform, user_id, name, when in await pairing.approved():
                print(f"approved  {platform:<9} {user_id}  {name}  since {datetime.fromtimestamp(when):%Y-%m-%d %H:%M}")
    return 0


async def _sessions(config: Config, args: argparse.Namespace) -> int:
    async with _open_store(config) as store:
        if args.action == "list":
            for s in await store.list_sessions(args.limit):
                ended = " (ended)" if s["ended_at"] else ""
                when = datetime.fromtimestamp(s["updated_at"]).strftime("%Y-%m-%d %H:%M")
                print(f"{s['id']:>6}  {when}  {s['messages']:>5} msgs  {s['key']}{ended}")
        else:
            for hit in await store.search(args.query, platform=args.platform, user_id=args.user):
                print(f"session {hit.session_id} {hit.role}: {hit.snippet}")
    return 0


async def _cron(config: Config, args: argparse.Namespace) -> int:
    from gateway.cron_jobs import CronError, CronJobs
    from gateway.cron_ledger import Ledger, new_instance_id

    async with _open_store(config) as store:
        jobs = CronJobs(store, default_tz=config.gateway.timezone, min_interval=config.cron.min_interval_seconds)
        ledger = Ledger(store, new_instance_id())
        running = bool(await ledger.live_instances(3 * config.gateway.tick_seconds + 5.0))
        try:
            if args.action == "list":
                for job in await jobs.list():
                    print(job.describe())
            elif args.action == "runs":
                job_id = (await jobs.find(args.job)).id if args.job else None
                for run in await ledger.runs(job_id, args.limit):
                    print(_format_run(run))
            elif args.action == "add":
                job = await jobs.create(name=args.name, prompt=args.prompt, schedule=args.schedule, target=args.to,
                                        owner_platform="cli", owner_id="operator", timezone=args.tz,
                                        missed_policy=args.missed)
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


async def _learning(config: Config, args: argparse.Namespace) -> int:
    async with _open_store(config) as store:
        if args.command == "skills":
            return await cli_learning.skills_command(config, store, args)
        return await cli_learning.curator_command(config, store, args)


def _format_run(run: dict[str, Any]) -> str:
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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "approvals" and args.action == "check":
        return _check_command(args.shell_command)  # needs no configuration
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    setup_logging(config.gateway.log_level, config.secrets())
    try:
        if args.command == "run":
            return asyncio.run(_run(config))
        if args.command == "doctor":
            return asyncio.run(_doctor(config))
        if args.command == "pair":
            return asyncio.run(_pair(config, args))
        if args.command == "approvals":
            return asyncio.run(_rules(config, args))
        if args.command == "cron":
            return asyncio.run(_cron(config, args))
        if args.command in ("skills", "curator"):
            return asyncio.run(_learning(config, args))
        return asyncio.run(_sessions(config, args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
